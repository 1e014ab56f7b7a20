"""Gemma 2: sandwich norms, (1 + w) norm gains, GELU-tanh, embeddings scaled by sqrt(dim), softcapped
attention and output logits, and sliding-window layers alternating with global ones (even layers local).

The two sources differ in two places:
- norm gains: HuggingFace stores w and multiplies by (1 + w); llama.cpp's converter adds the 1 when it
  writes the GGUF, so GGUF norms are used as stored (norm_offset 0 vs 1).
- the softmax scale: HuggingFace has `query_pre_attn_scalar`; GGUF files do not, and llama.cpp derives it
  from the model size (27B: dim / n_heads, otherwise head_dim), as fak does here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fakcore.formats.tensor import Tensor
from fakcore.models.common import (
    HF_LAYER_SANDWICH,
    gemma_attention_scale,
    gguf_base,
    gguf_window_pattern,
    hf_base,
    hf_field,
    hf_window_pattern,
    rename_hf,
    untie_gguf,
)
from fakcore.models.config import ConfigError, ModelConfig

ARCH = "gemma2"
LAYERS_27B = 46  # llama.cpp tells the 27B model (other softmax scale) by its layer count
GELU_TANH = ("gelu_pytorch_tanh", "gelu_tanh")


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    base = gguf_base(meta, ARCH, source)
    n = base["n_layers"]
    return ModelConfig(
        **base, tie_embeddings=untie_gguf(tensors), sandwich_norm=True, act="gelu_tanh",
        embed_scale=math.sqrt(base["dim"]),
        attn_scale=gemma_attention_scale(n, LAYERS_27B, base["dim"], base["n_heads"], base["head_dim"]),
        attn_softcap=float(meta.get(f"{ARCH}.attn_logit_softcapping", 50.0)),  # llama.cpp's defaults
        final_softcap=float(meta.get(f"{ARCH}.final_logit_softcapping", 30.0)),
        sliding_window=int(meta.get(f"{ARCH}.attention.sliding_window", 4096)),
        window_pattern=gguf_window_pattern(meta, ARCH, n, 2, source),
    )


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    act = cfg.get("hidden_activation") or cfg.get("hidden_act") or "gelu_pytorch_tanh"
    if act not in GELU_TANH:
        raise ConfigError(f"{source}: hidden_activation {act!r} is not supported (gelu_pytorch_tanh)")
    base = hf_base(cfg, ARCH, source)
    base["tie_embeddings"] = bool(cfg.get("tie_word_embeddings", True))
    head_dim = base["head_dim"]
    return ModelConfig(
        **base, norm_offset=1.0, sandwich_norm=True, act="gelu_tanh", embed_scale=math.sqrt(base["dim"]),
        attn_scale=float(hf_field(cfg, "query_pre_attn_scalar", source, head_dim)) ** -0.5,
        attn_softcap=float(cfg.get("attn_logit_softcapping") or 0.0),
        final_softcap=float(cfg.get("final_logit_softcapping") or 0.0),
        sliding_window=int(hf_field(cfg, "sliding_window", source)),
        window_pattern=hf_window_pattern(cfg, base["n_layers"], source, default=lambda i: i % 2 == 0),
    )


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return dict(tensors)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return rename_hf(tensors, HF_LAYER_SANDWICH, cfg.n_layers, cfg.tie_embeddings, source)
