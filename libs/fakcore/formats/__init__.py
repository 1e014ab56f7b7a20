"""Model-file formats: GGUF and safetensors readers that hand the engine mmapped `Tensor`s, plus the quant
table (`QTYPES`) and the plain numpy dequantizers every faster kernel is tested against."""

from .gguf import GGUFError, GGUFFile
from .quants import QTYPES
from .safetensors import SafetensorsError, load_safetensors
from .tensor import FormatError, Tensor, UnsupportedTypeError

__all__ = [
    "QTYPES",
    "FormatError",
    "GGUFError",
    "GGUFFile",
    "SafetensorsError",
    "Tensor",
    "UnsupportedTypeError",
    "load_safetensors",
]
