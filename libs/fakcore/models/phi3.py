"""Phi-3 (Phi-3-mini/medium, Phi-3.5-mini, Phi-4, Phi-4-mini): Llama's block with q/k/v fused into one
`qkv_proj` ([q; k; v] rows) and gate/up into one `gate_up_proj` ([gate; up] rows), RMSNorm, SiLU; optionally
partial rotary (Phi-4-mini: 0.75) and a sliding window on every layer (Phi-3-mini: 2047).

Both fused projections are split here into the canonical attn_q / attn_k / attn_v and ffn_gate / ffn_up (a row
gather: quant blocks move whole; the engine fuses them again where the backend can). llama.cpp keeps them
fused too, as `attn_qkv` and `ffn_up` (2 * ffn rows, gate first: its SWIGLU splits them in that order).

GGUF (Phi3MiniModel.set_gguf_parameters): rope.dimension_count = int(partial_rotary_factor * dim) // heads,
attention.sliding_window (0: none), rope.scaling.original_context_length. No Q/K permutation.

LongRoPE (Phi-3-*-128k, Phi-3.5, Phi-4-mini): one divisor per frequency and cos/sin multiplied by an attention
factor (transformers: sqrt(1 + ln(max_pos / original) / ln(original)) unless the file gives one). Two sets of
divisors: `short_factor` while the sequence fits the original context, `long_factor` past it. transformers
switches sets inside a sequence once it grows past the original context (keys already cached keep the short
rotation); llama.cpp picks one set per context size. fak runs the short set and serves the original context
(`context_length` = original_max_position_embeddings), where it matches both exactly; the long set is checked
for shape and not used. GGUF: `rope_factors_short` / `rope_factors_long` (consumed here),
`rope.scaling.attn_factor`, `rope.scaling.original_context_length`.

Not supported, an explicit ConfigError: biases, another activation than SiLU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models.common import (
    HF_LAYER,
    gguf_base,
    gguf_field,
    hf_base,
    hf_field,
    hf_rope_dim,
    rename_hf,
    rope_freqs_check,
    split_rows,
    untie_gguf,
)
from fakcore.models.config import ConfigError, ModelConfig, RopeScaling

ARCH = "phi3"
HF_PHI3_LAYER = HF_LAYER | {"self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_gate_up.weight"}


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    base = gguf_base(meta, ARCH, source, partial_rope=True)
    found = [name for name in ("rope_factors_short.weight", "rope_factors_long.weight") if name in tensors]
    if found:  # longrope: the short set, the original context
        if len(found) == 1:
            raise ConfigError(f"{source}: phi3 longrope needs both 'rope_factors_short' and 'rope_factors_long' "
                              f"tensors, the file has only {found[0]!r}")
        if base["rope_scaling"].kind != "none":
            raise ConfigError(f"{source}: both '{ARCH}.rope.scaling.type' and longrope factor tensors scale RoPE")
        short, _ = (rope_freqs_check(tensors[name], base["rope_dim"], source) for name in found)
        base["rope_scaling"] = RopeScaling("longrope", factors=short,
                                           attention_factor=float(meta.get(f"{ARCH}.rope.scaling.attn_factor", 1.0)))
        base["context_length"] = int(gguf_field(meta, f"{ARCH}.rope.scaling.original_context_length", source))
    return ModelConfig(**base, tie_embeddings=untie_gguf(tensors),
                       sliding_window=int(meta.get(f"{ARCH}.attention.sliding_window", 0)))


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise ConfigError(f"{source}: attention_bias / mlp_bias are not supported for phi3")
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    longrope = params.get("rope_type", params.get("type")) in ("longrope", "su", "yarn")  # transformers: all longrope
    if longrope:
        rest = {k: v for k, v in params.items() if k not in ("rope_type", "type")}
        cfg = {**cfg, "rope_parameters": rest | {"rope_type": "default"}}  # theta and partial factor, read as usual
    base = hf_base(cfg, ARCH, source, allow_partial=True)
    rope_dim = hf_rope_dim(cfg, base["head_dim"], source)
    if longrope:
        base |= longrope_scaling(cfg, params, rope_dim, source)
    return ModelConfig(**base, rope_dim=rope_dim, sliding_window=int(cfg.get("sliding_window") or 0))


def longrope_scaling(cfg: Mapping[str, Any], params: Mapping[str, Any], rope_dim: int, source: str) -> dict[str, Any]:
    """rope_scaling and context_length of a longrope config, as transformers' _compute_longrope_parameters."""
    original = int(params.get("original_max_position_embeddings") or hf_field(cfg, "original_max_position_embeddings", source))
    sets = {}
    for key in ("short_factor", "long_factor"):
        values = params.get(key)
        if not isinstance(values, list) or len(values) != rope_dim // 2:
            raise ConfigError(f"{source}: longrope '{key}' must list {rope_dim // 2} factors (one per rotated pair), "
                              f"got {values!r}")
        sets[key] = tuple(float(v) for v in values)
    factor = params.get("factor") or int(hf_field(cfg, "max_position_embeddings", source)) / original
    attention = params.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    return dict(rope_scaling=RopeScaling("longrope", factors=sets["short_factor"], attention_factor=float(attention)),
                context_length=original)


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    out = dict(tensors)
    out.pop("rope_factors_short.weight", None)  # already in cfg.rope_scaling (config_from_gguf); the long set unused
    out.pop("rope_factors_long.weight", None)
    for i in range(cfg.n_layers):  # llama.cpp's fused gate/up is `ffn_up` with 2 * ffn_dim rows
        if f"blk.{i}.ffn_gate.weight" not in out and f"blk.{i}.ffn_up.weight" in out \
                and out[f"blk.{i}.ffn_up.weight"].shape[0] == 2 * cfg.ffn_dim:
            out[f"blk.{i}.ffn_gate_up.weight"] = out.pop(f"blk.{i}.ffn_up.weight")
    return split_fused(cfg, out, source)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return split_fused(cfg, rename_hf(tensors, HF_PHI3_LAYER, cfg.n_layers, cfg.tie_embeddings, source), source)


def split_fused(cfg: ModelConfig, tensors: dict[str, Tensor], source: str) -> dict[str, Tensor]:
    """Every layer's attn_qkv as attn_q / attn_k / attn_v and ffn_gate_up as ffn_gate / ffn_up (rows in order)."""
    q, kv, f = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim, cfg.ffn_dim
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        if (qkv := tensors.pop(p + "attn_qkv.weight", None)) is not None:
            tensors |= split_rows(qkv, {p + "attn_q.weight": np.arange(q), p + "attn_k.weight": np.arange(q, q + kv),
                                        p + "attn_v.weight": np.arange(q + kv, q + 2 * kv)}, source)
        if (gate_up := tensors.pop(p + "ffn_gate_up.weight", None)) is not None:
            tensors |= split_rows(gate_up, {p + "ffn_gate.weight": np.arange(f), p + "ffn_up.weight": np.arange(f, 2 * f)},
                                  source)
    return tensors
