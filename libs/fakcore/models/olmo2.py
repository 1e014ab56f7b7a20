"""OLMo 2: post-norm blocks (no norm before attention or the MLP; an RMSNorm on each one's output, before the
residual add) and one RMSNorm over all of q's heads and one over all of k's (full width, before the split into
heads and RoPE); no biases, untied head by default.

    x = x + norm(attn(x));  x = x + norm(mlp(x))

GGUF: llama.cpp writes no `attn_norm` / `ffn_norm`, the output norms as `post_attention_norm` /
`post_ffw_norm`, the q/k norms as `attn_q_norm` (n_heads*head_dim,) / `attn_k_norm` (n_kv_heads*head_dim,);
no Q/K permutation (OLMo2 rotates halves, NEOX order, in llama.cpp too). OLMo 3 (sliding-window layers) has
its own model_type and is not this file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fakcore.formats.tensor import Tensor
from fakcore.models.common import HF_LAYER_SANDWICH, gguf_base, hf_base, rename_hf, untie_gguf
from fakcore.models.config import ConfigError, ModelConfig

ARCH = "olmo2"


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    return ModelConfig(**gguf_base(meta, ARCH, source), post_norm=True, qk_norm=True, qk_norm_full=True,
                       tie_embeddings=untie_gguf(tensors))


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    if cfg.get("attention_bias"):
        raise ConfigError(f"{source}: attention_bias is not supported for olmo2 (it biases o_proj too)")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    return ModelConfig(**hf_base(cfg, ARCH, source), post_norm=True, qk_norm=True, qk_norm_full=True)


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return dict(tensors)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    # post_attention_layernorm / post_feedforward_layernorm are output norms here, as in Gemma's sandwich
    return rename_hf(tensors, HF_LAYER_SANDWICH, cfg.n_layers, cfg.tie_embeddings, source)
