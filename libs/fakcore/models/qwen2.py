"""Qwen2 (and Qwen2.5): Llama with biases on the q/k/v projections.

GGUF: no Q/K permutation (llama.cpp rotates Qwen2 in NEOX order, halves, like HuggingFace); a tied head is
absent. HuggingFace: `use_sliding_window` makes layers from `max_window_layers` on windowed (`layer_types`
in transformers 5); released checkpoints leave it off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fakcore.formats.tensor import Tensor
from fakcore.models.common import HF_LAYER, gguf_base, hf_base, hf_window_pattern, rename_hf, untie_gguf
from fakcore.models.config import ConfigError, ModelConfig

ARCH = "qwen2"


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    return ModelConfig(**gguf_base(meta, ARCH, source), qkv_bias=True, tie_embeddings=untie_gguf(tensors))


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    base = hf_base(cfg, ARCH, source)
    window, pattern = 0, ()
    if cfg.get("use_sliding_window") and cfg.get("sliding_window"):
        window = int(cfg["sliding_window"])
        first = int(cfg.get("max_window_layers", 0))
        pattern = hf_window_pattern(cfg, base["n_layers"], source, default=lambda i: i >= first)
    return ModelConfig(**base, qkv_bias=True, sliding_window=window, window_pattern=pattern)


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return dict(tensors)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return rename_hf(tensors, HF_LAYER, cfg.n_layers, cfg.tie_embeddings, source)
