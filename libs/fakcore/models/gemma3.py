"""Gemma 3 (text): Gemma 2's sandwich norms, (1 + w) gains, GELU-tanh and sqrt(dim) embedding scale, plus
an RMSNorm over every head of q and k, no attention softcap, and local/global layers that differ in RoPE:
sliding-window layers use base `rope_local_base_freq` (10k) unscaled, global layers `rope_theta` (1M) with
the checkpoint's scaling (linear on 4B+). By default every 6th layer is global.

GGUF vs HuggingFace, as for Gemma 2: norms already hold (1 + w) in GGUF files (the converter adds the 1,
q/k norms included); the softmax scale comes from `query_pre_attn_scalar`, or for GGUF from llama.cpp's
size rule (27B: dim / n_heads, else head_dim). llama.cpp hard-codes the local base (10000) and the period
(6); a file may carry `gemma3.rope.freq_base_swa` and `gemma3.attention.sliding_window_pattern`, which
newer converters write and which are honoured here.
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
    hf_rope,
    hf_window_pattern,
    rename_hf,
    untie_gguf,
)
from fakcore.models.config import ConfigError, ModelConfig

ARCH = "gemma3"
LAYERS_27B = 62  # llama.cpp tells the 27B model (other softmax scale) by its layer count
GLOBAL_EVERY = 6  # default period: layers 5, 11, 17… are global
LOCAL_THETA = 10000.0
GLOBAL_THETA = 1_000_000.0
GELU_TANH = ("gelu_pytorch_tanh", "gelu_tanh")


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    base = gguf_base(meta, ARCH, source)
    base["rope_theta"] = float(meta.get(f"{ARCH}.rope.freq_base", GLOBAL_THETA))
    n = base["n_layers"]
    window = int(meta.get(f"{ARCH}.attention.sliding_window", 0))
    return ModelConfig(
        **base, tie_embeddings=untie_gguf(tensors), qk_norm=True, sandwich_norm=True, act="gelu_tanh",
        embed_scale=math.sqrt(base["dim"]),
        attn_scale=gemma_attention_scale(n, LAYERS_27B, base["dim"], base["n_heads"], base["head_dim"]),
        final_softcap=float(meta.get(f"{ARCH}.final_logit_softcapping", 0.0)),
        sliding_window=window, rope_local_theta=float(meta.get(f"{ARCH}.rope.freq_base_swa", LOCAL_THETA)),
        window_pattern=gguf_window_pattern(meta, ARCH, n, GLOBAL_EVERY, source) if window else (),
    )


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    act = cfg.get("hidden_activation") or cfg.get("hidden_act") or "gelu_pytorch_tanh"
    if act not in GELU_TANH:
        raise ConfigError(f"{source}: hidden_activation {act!r} is not supported (gelu_pytorch_tanh)")
    if cfg.get("use_bidirectional_attention"):
        raise ConfigError(f"{source}: use_bidirectional_attention (EmbeddingGemma) is not supported")
    base = hf_base(cfg, ARCH, source)
    base["tie_embeddings"] = bool(cfg.get("tie_word_embeddings", True))
    base["rope_theta"], base["rope_scaling"] = hf_rope(cfg, "full_attention", source, GLOBAL_THETA)
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and "sliding_attention" in params:
        local_theta, local_scaling = hf_rope(cfg, "sliding_attention", source, LOCAL_THETA)
        if local_scaling.kind != "none":
            raise ConfigError(f"{source}: RoPE scaling on sliding-window layers is not supported")
    else:
        local_theta = float(cfg.get("rope_local_base_freq") or LOCAL_THETA)
    every = int(cfg.get("sliding_window_pattern") or GLOBAL_EVERY)
    return ModelConfig(
        **base, norm_offset=1.0, qk_norm=True, sandwich_norm=True, act="gelu_tanh",
        embed_scale=math.sqrt(base["dim"]),
        attn_scale=float(hf_field(cfg, "query_pre_attn_scalar", source, base["head_dim"])) ** -0.5,
        attn_softcap=float(cfg.get("attn_logit_softcapping") or 0.0),
        final_softcap=float(cfg.get("final_logit_softcapping") or 0.0),
        sliding_window=int(cfg.get("sliding_window") or 0), rope_local_theta=local_theta,
        window_pattern=hf_window_pattern(cfg, base["n_layers"], source, default=lambda i: bool((i + 1) % every)),
    )


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return dict(tensors)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return rename_hf(tensors, HF_LAYER_SANDWICH, cfg.n_layers, cfg.tie_embeddings, source)
