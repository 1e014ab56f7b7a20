"""StableLM (StableLM-2, StableLM-3B-4E1T, StableLM-Zephyr): Llama's SiLU-gated MLP and grouped-query
attention with LayerNorms (with biases), RoPE on the leading `partial_rotary_factor` of each head (NEOX
halves), and three options:
- use_qkv_bias: biases on q/k/v;
- use_parallel_residual: x = x + attn(ln(x)) + mlp(ln(x)), both reading the same normed input (there is no
  post_attention_layernorm then);
- qk_layernorm: a LayerNorm without bias over every head of q and of k before RoPE, each head with gains
  of its own (HuggingFace: `q_layernorm.norms.{h}.weight`, one tensor per head, stacked here into the
  GGUF layout (heads, head_dim); llama.cpp's converter stacks them the same way, StableLMModel._stack_qk_norm).

GGUF (StableLMModel.set_gguf_parameters): rope.dimension_count, attention.layer_norm_epsilon,
use_parallel_residual; llama.cpp runs the parallel block when a layer has no `ffn_norm`, and so does fak:
the key and the tensors must agree. No Q/K permutation (NEOX rotation in llama.cpp too).
Config lineages: `rope_parameters.partial_rotary_factor` (transformers 5), `partial_rotary_factor`, or the
original `rope_pct`; `layer_norm_eps` or the original `norm_eps`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models.common import HF_GLOBAL, HF_LAYER, gguf_base, hf_base, hf_rope_dim, rename_hf, untie_gguf
from fakcore.models.config import ConfigError, ModelConfig
from fakcore.models.shapes import WeightError

ARCH = "stablelm"
HF_STABLELM_GLOBAL = HF_GLOBAL | {"model.norm.bias": "output_norm.bias"}
HF_STABLELM_LAYER = HF_LAYER | {"input_layernorm.bias": "attn_norm.bias", "post_attention_layernorm.bias": "ffn_norm.bias"}
HF_HEAD_NORM = re.compile(r"model\.layers\.(\d+)\.self_attn\.(q|k)_layernorm\.norms\.(\d+)\.weight")


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    base = gguf_base(meta, ARCH, source, layer_norm=True, partial_rope=True)
    key = f"{ARCH}.use_parallel_residual"
    no_ffn_norm = "blk.0.ffn_norm.weight" not in tensors
    parallel = bool(meta.get(key, no_ffn_norm))
    if parallel != no_ffn_norm:
        raise ConfigError(f"{source}: '{key}' = {parallel} but the layers {'have' if not no_ffn_norm else 'lack'} "
                          f"'ffn_norm' (llama.cpp runs the parallel block exactly when ffn_norm is absent)")
    qk_norm = "blk.0.attn_q_norm.weight" in tensors
    return ModelConfig(**base, tie_embeddings=untie_gguf(tensors), norm="layer", norm_bias=True,
                       qkv_bias="blk.0.attn_q.bias" in tensors, parallel_residual=parallel, shared_ffn_norm=parallel,
                       qk_norm=qk_norm, qk_norm_per_head=qk_norm)


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    eps_key = "layer_norm_eps" if cfg.get("layer_norm_eps") is not None else "norm_eps"
    base = hf_base(cfg, ARCH, source, eps_key=eps_key, eps_default=1e-5, allow_partial=True)
    head_dim = base["dim"] // base["n_heads"]  # HuggingFace's StableLM has no head_dim of its own
    base |= dict(head_dim=head_dim, tie_embeddings=bool(cfg.get("tie_word_embeddings", False)))
    parallel, qk_norm = bool(cfg.get("use_parallel_residual", False)), bool(cfg.get("qk_layernorm", False))
    return ModelConfig(**base, norm="layer", norm_bias=True, rope_dim=hf_rope_dim(cfg, head_dim, source, 0.25),
                       qkv_bias=bool(cfg.get("use_qkv_bias", False)), parallel_residual=parallel,
                       shared_ffn_norm=parallel, qk_norm=qk_norm, qk_norm_per_head=qk_norm)


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return dict(tensors)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    heads: dict[tuple[int, str], dict[int, Tensor]] = {}
    rest: dict[str, Tensor] = {}
    for name, t in tensors.items():
        match = HF_HEAD_NORM.fullmatch(name)
        if match is None:
            rest[name] = t
            continue
        layer, which, head = int(match[1]), match[2], int(match[3])
        n = cfg.n_heads if which == "q" else cfg.n_kv_heads
        if not cfg.qk_norm or layer >= cfg.n_layers or head >= n:
            raise WeightError(f"{t.source or source}: unexpected tensor {name!r}")
        heads.setdefault((layer, which), {})[head] = t
    out = rename_hf(rest, HF_STABLELM_LAYER, cfg.n_layers, cfg.tie_embeddings, source, global_map=HF_STABLELM_GLOBAL)
    for (layer, which), per_head in heads.items():
        n = cfg.n_heads if which == "q" else cfg.n_kv_heads
        out[f"blk.{layer}.attn_{which}_norm.weight"] = stack_heads(per_head, n, layer, which, source)
    return out


def stack_heads(per_head: Mapping[int, Tensor], n: int, layer: int, which: str, source: str) -> Tensor:
    """n (head_dim,) gains -> one (n, head_dim) tensor in their common type."""
    name = f"model.layers.{layer}.self_attn.{which}_layernorm.norms.{{h}}.weight"
    missing = [h for h in range(n) if h not in per_head]
    if missing:
        raise WeightError(f"{source}: missing tensor {name.format(h=missing[0])!r}")
    first = per_head[0]
    for h in range(n):
        if (per_head[h].qtype, per_head[h].shape) != (first.qtype, first.shape):
            raise WeightError(f"{per_head[h].source or source}: tensor {name.format(h=h)!r} is {per_head[h].qtype} "
                              f"{per_head[h].shape}, head 0 is {first.qtype} {first.shape}")
    raw = np.concatenate([per_head[h].raw for h in range(n)])
    return Tensor(f"blk.{layer}.attn_{which}_norm.weight", first.qtype, (n, *first.shape), raw, first.source or source)
