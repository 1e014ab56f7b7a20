"""Qwen3: Llama with an RMSNorm over every head of q and k (before RoPE), no biases.

GGUF: no Q/K permutation; the per-head norms are `attn_q_norm` / `attn_k_norm`; a tied head is absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fakcore.formats.tensor import Tensor
from fakcore.models.common import HF_LAYER, gguf_base, hf_base, rename_hf, untie_gguf
from fakcore.models.config import ConfigError, ModelConfig

ARCH = "qwen3"


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    return ModelConfig(**gguf_base(meta, ARCH, source), qk_norm=True, tie_embeddings=untie_gguf(tensors))


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    if cfg.get("attention_bias"):
        raise ConfigError(f"{source}: attention_bias is not supported for qwen3 (it biases o_proj too)")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    if cfg.get("use_sliding_window"):
        raise ConfigError(f"{source}: use_sliding_window is not supported for qwen3")
    return ModelConfig(**hf_base(cfg, ARCH, source), qk_norm=True)


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return dict(tensors)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return rename_hf(tensors, HF_LAYER, cfg.n_layers, cfg.tie_embeddings, source)
