"""What the engine-cuda tests share: the backend (on the simulator or a GPU), a tiny random Llama, quant blocks.

The simulator runs every CUDA thread as a Python thread and every array access in Python (some 10-20 µs
each, more on a loaded machine): the shapes here are as small as the kernels allow (rows of whole
32-element units; K-quants 256), and on the simulator the backend launches few blocks of few threads —
the kernels' grid-stride loops give the same numbers for any grid — with `lanes` threads per dot product:
4 for the kernel tests (the reduction tree), 2 where whole forward passes are compared bit for bit, 1
where they are compared with the reference. A GPU runs 32 lanes and a block per work item.
"""

from __future__ import annotations

import functools

import numpy as np

from fak_engine_cuda.backend import CudaBackend
from fakcore.engine.reference import ReferenceBackend
from fakcore.engine.transformer import Transformer, load_weights
from fakcore.formats.quants import QTYPES
from fakcore.formats.tensor import Tensor
from fakcore.models import synthetic
from fakcore.models.config import ModelConfig
from tests.cuda.conftest import SIMULATED

KERNEL_LANES, EXACT_LANES, MODEL_LANES = (4, 2, 1) if SIMULATED else (32, 32, 32)

# A Llama of the synthetic model's kind, smaller: 2 layers, grouped-query attention (2 heads, 1 kv head),
# every matrix a whole number of 32-element quant blocks wide.
TINY = ModelConfig(arch="llama", vocab_size=48, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                   ffn_dim=64, norm_eps=1e-5, rope_theta=10000.0, context_length=256)


@functools.cache
def cuda_backend(lanes: int = KERNEL_LANES) -> CudaBackend:
    return CudaBackend(lanes=lanes, max_grid=(2 if lanes == KERNEL_LANES else 1) if SIMULATED else 0)


def tiny_tensors(qtype: str = "F32", cfg: ModelConfig = TINY) -> dict[str, Tensor]:
    """The synthetic checkpoint's recipe at `cfg`'s shapes, every matrix re-encoded as `qtype` (norms stay F32)."""
    out = {}
    for name, t in synthetic.tensors(cfg).items():
        out[name] = Tensor.from_array(name, t.dequantize(), qtype, "tiny") if len(t.shape) == 2 and qtype != "F32" else t
    return out


def transformer(backend, tensors: dict[str, Tensor], cfg: ModelConfig = TINY) -> Transformer:
    return Transformer(cfg, load_weights(cfg, tensors, backend, "tiny"), backend)


@functools.cache
def tiny(backend_name: str, qtype: str = "F32", lanes: int = MODEL_LANES) -> Transformer:
    be = cuda_backend(lanes) if backend_name == "cuda" else ReferenceBackend()
    return transformer(be, tiny_tensors(qtype))


def quant_blocks(qtype: str, rows: int, cols: int, seed: int = 0) -> Tensor:
    """A (rows, cols) tensor of random `qtype` blocks whose f16 scales are small and finite (a realistic range:
    products stay far from overflow), for the matvec tests; formats_helpers.random_blocks covers every f16."""
    rng = np.random.default_rng(seed)
    qt = QTYPES[qtype]
    n_blocks = rows * cols // qt.block_size
    blocks = rng.integers(0, 256, size=(n_blocks, qt.type_size), dtype=np.uint8)
    for at in SCALE_FIELDS[qtype]:
        scale = (rng.uniform(0.002, 0.02, n_blocks) * rng.choice([-1, 1], n_blocks)).astype(np.float16)
        blocks[:, at:at + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return Tensor("w", qtype, (rows, cols), blocks.reshape(-1), "random")


# the byte offsets of each type's f16 fields (quants/legacy.py, quants/kquants.py)
SCALE_FIELDS = {"Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}
