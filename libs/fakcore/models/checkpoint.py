"""A checkpoint on disk -> its config, its tensors under canonical names, its tokenizer and chat template.

Two layouts:
- a `.gguf` file (or a directory holding exactly one): config from the metadata, tokenizer from the
  `tokenizer.*` keys; the family is named by `general.architecture`.
- a HuggingFace directory: `config.json` (family named by `model_type`), `model.safetensors` (or shards),
  `tokenizer.json` + `tokenizer_config.json`, and `generation_config.json` for the end-of-turn ids. A
  `quantization_config` (GPTQ, AWQ) has its packed linears repacked to 4-bit Q4_G first (models/quantized.py).

The family file (`models/<arch>.py`, found through the tables below) turns metadata into a ModelConfig
and file names into canonical names; every tensor is then checked against the config, so a missing,
extra or misshapen tensor fails here, naming the file and the tensor.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from fakcore.formats.gguf import GGUFFile
from fakcore.formats.safetensors import load_safetensors
from fakcore.formats.tensor import Tensor
from fakcore.models.config import ConfigError, ModelConfig
from fakcore.models.quantized import repack_quantized
from fakcore.models.shapes import check_tensors
from fakcore.models.sources import generation_sampling, gguf_sampling
from fakcore.text.chat import ChatTemplate
from fakcore.text.tokenizer import Tokenizer

# GGUF `general.architecture` -> family module. Only names llama.cpp writes: Mistral files say "llama".
GGUF_ARCHS = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2", "gemma3": "gemma3",
              "olmo2": "olmo2", "qwen3moe": "qwen3moe", "gptneox": "gptneox", "stablelm": "stablelm",
              "phi3": "phi3", "granite": "granite", "falcon": "falcon", "mpt": "mpt",
              "olmoe": "olmoe", "granitemoe": "granitemoe", "gpt-oss": "gpt_oss", "qwen3next": "qwen3next",
              "qwen2moe": "qwen2moe", "qwen35": "qwen35", "qwen35moe": "qwen35"}
# HuggingFace `model_type` -> family module.
HF_MODEL_TYPES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2",
                  "gemma3_text": "gemma3", "olmo2": "olmo2", "qwen3_moe": "qwen3moe", "gpt_neox": "gptneox",
                  "stablelm": "stablelm", "phi3": "phi3", "granite": "granite", "falcon": "falcon", "mpt": "mpt",
                  "olmoe": "olmoe", "granitemoe": "granitemoe", "gpt_oss": "gpt_oss", "qwen3_next": "qwen3next",
                  "qwen2_moe": "qwen2moe", "granitemoeshared": "granitemoe", "qwen3_5": "qwen35", "qwen3_5_text": "qwen35",
                  "qwen3_5_moe": "qwen35", "qwen3_5_moe_text": "qwen35"}


@dataclass
class Checkpoint:
    config: ModelConfig
    tensors: dict[str, Tensor]  # canonical (llama.cpp) names, checked against config
    tokenizer: Tokenizer
    template: ChatTemplate | None  # the checkpoint's own chat template; None: raw prompts only
    source: str  # the file or directory it came from
    sampling: dict[str, float] = field(default_factory=dict)  # the makers' sampling the file records (GGUF general.sampling.*, generation_config.json)


def load_checkpoint(path: str | Path) -> Checkpoint:
    path = Path(path)
    if path.is_file():
        if path.suffix != ".gguf":
            raise ConfigError(f"{path}: not a .gguf file (a safetensors checkpoint is loaded by its directory)")
        return _from_gguf(path)
    if not path.is_dir():
        raise ConfigError(f"{path}: no such file or directory")
    if (path / "config.json").is_file():
        return _from_hf(path)
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return _from_gguf(ggufs[0])
    found = f"{len(ggufs)} .gguf files" if ggufs else "no .gguf file"
    raise ConfigError(f"{path}: neither a HuggingFace checkpoint (config.json) nor a single .gguf file ({found})")


def family(table: dict[str, str], name: Any, field: str, source: str) -> ModuleType:
    """The family module an architecture string names; unknown -> ConfigError naming file and architecture."""
    if name not in table:
        raise ConfigError(f"{source}: unsupported architecture {field}={name!r} "
                          f"(fak runs: {', '.join(sorted(table))})")
    return importlib.import_module(f"fakcore.models.{table[name]}")


def _from_gguf(path: Path) -> Checkpoint:
    source = str(path)
    f = GGUFFile(path)  # stays open: the tensors are views into its mmap
    arch = f.metadata.get("general.architecture")
    fam = family(GGUF_ARCHS, arch, "general.architecture", source)
    cfg = fam.config_from_gguf(f.metadata, f.tensors, source)
    tensors = fam.tensors_from_gguf(cfg, f.tensors, source)
    check_tensors(cfg, tensors, source)
    tokenizer = Tokenizer.from_gguf(f.metadata, source)
    cfg = _with_specials(cfg, tokenizer, ())
    return Checkpoint(cfg, tensors, tokenizer, ChatTemplate.from_tokenizer(tokenizer), source, gguf_sampling(f.metadata, source))


def _from_hf(root: Path) -> Checkpoint:
    source = str(root)
    config_file = root / "config.json"
    hf = _read_json(config_file)
    fam = family(HF_MODEL_TYPES, hf.get("model_type"), "model_type", str(config_file))
    cfg = fam.config_from_hf(hf, str(config_file))
    tensors = fam.tensors_from_hf(cfg, repack_quantized(hf, load_safetensors(root), str(config_file)), source)
    check_tensors(cfg, tensors, source)
    tokenizer = Tokenizer.from_hf_dir(root)
    generation = _read_json(root / "generation_config.json") if (root / "generation_config.json").is_file() else {}
    eos = generation.get("eos_token_id")
    cfg = _with_specials(cfg, tokenizer, [eos] if isinstance(eos, int) else list(eos or ()))
    sampling = generation_sampling(root / "generation_config.json") if generation else {}
    return Checkpoint(cfg, tensors, tokenizer, ChatTemplate.from_tokenizer(tokenizer), source, sampling)


def _with_specials(cfg: ModelConfig, tokenizer: Tokenizer, extra_eos: list[int] | tuple[int, ...]) -> ModelConfig:
    """Every id that ends a generation: the config's, generation_config's and the tokenizer's."""
    eos = tuple(dict.fromkeys([*cfg.eos_ids, *extra_eos, *tokenizer.eos_ids]))
    bos = cfg.bos_id if cfg.bos_id is not None else tokenizer.bos_id
    return replace(cfg, eos_ids=eos, bos_id=bos)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot be read as JSON: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return data
