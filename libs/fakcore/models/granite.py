"""Granite (IBM Granite 3.x dense): Llama with four multipliers.

    x = embed(ids) * embedding_multiplier
    x = x + attn(norm(x)) * residual_multiplier     softmax scale attention_multiplier (not 1/sqrt(head_dim))
    x = x + mlp(norm(x)) * residual_multiplier
    logits = head(norm(x)) / logits_scaling

GGUF (GraniteModel, a LlamaModel in convert_hf_to_gguf): the multipliers as `granite.embedding_scale`,
`residual_scale`, `attention.scale`, `logit_scale` (each written only when set, so an absent key is 1 / the
default scale); Q and K rows permuted as for Llama, and put back here (llama.py). The converter drops
`head_dim` (the GGUF then says hidden_size / heads); HuggingFace and fak honour it.

Not supported, an explicit ConfigError: attention / MLP biases, another activation than SiLU. GraniteMoE and
Granite-4 hybrids are other architectures (`granitemoe`: granitemoe.py; `granitehybrid`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from fakcore.formats.tensor import Tensor
from fakcore.models import llama
from fakcore.models.common import HF_LAYER, hf_base, hf_field, rename_hf
from fakcore.models.config import ConfigError, ModelConfig

ARCH = "granite"


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str,
                     arch: str = ARCH) -> ModelConfig:
    """arch: the multipliers' key prefix, `granitemoe` for GraniteMoE (granitemoe.py)."""
    base = llama.config_from_gguf(meta, tensors, source, arch=arch)
    return _with_multipliers(base, embedding=meta.get(f"{arch}.embedding_scale"),
                             residual=meta.get(f"{arch}.residual_scale"),
                             attention=meta.get(f"{arch}.attention.scale"), logits=meta.get(f"{arch}.logit_scale"))


def config_from_hf(cfg: Mapping[str, Any], source: str, arch: str = ARCH) -> ModelConfig:
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise ConfigError(f"{source}: attention_bias / mlp_bias are not supported for {arch}")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    base = hf_base(cfg, arch, source)
    return _with_multipliers(ModelConfig(**base), embedding=hf_field(cfg, "embedding_multiplier", source, 1.0),
                             residual=hf_field(cfg, "residual_multiplier", source, 1.0),
                             attention=hf_field(cfg, "attention_multiplier", source, 1.0),
                             logits=hf_field(cfg, "logits_scaling", source, 1.0))


def _with_multipliers(cfg: ModelConfig, embedding: Any, residual: Any, attention: Any, logits: Any) -> ModelConfig:
    """attention None (a GGUF without `attention.scale`): llama.cpp's 1/sqrt(head_dim)."""
    return replace(cfg, embed_scale=float(embedding or 1.0), residual_scale=float(residual or 1.0),
                   attn_scale=float(attention or 0.0), logit_scale=float(logits or 1.0))


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return llama.tensors_from_gguf(cfg, tensors, source)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return rename_hf(tensors, HF_LAYER, cfg.n_layers, cfg.tie_embeddings, source)
