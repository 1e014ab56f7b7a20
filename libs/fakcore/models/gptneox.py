"""GPT-NeoX (Pythia, GPT-NeoX-20B): LayerNorms with biases, a parallel residual by default, RoPE on the
leading `rotary_pct` of each head (NEOX halves), one fused query_key_value projection, biases on every
projection, a plain GELU MLP (dense_h_to_4h / dense_4h_to_h) and an untied head (`embed_out`).

    x = x + attn(ln1(x)) + mlp(ln2(x))          use_parallel_residual (the default)
    x = x + attn(ln1(x));  x = x + mlp(ln2(x))  otherwise

The fused projection is stored two ways, and split here into the canonical attn_q / attn_k / attn_v (a row
gather: quant blocks move whole; the engine fuses them again where the backend can):
- HuggingFace: rows interleaved per head, [h0 q, h0 k, h0 v, h1 q, …] of head_dim rows each (the model
  views the output as (T, H, 3*D) and chunks the last axis);
- GGUF: llama.cpp's converter regroups them into [all q; all k; all v] (GPTNeoXModel.modify_tensors).

Config lineages: transformers 5 writes `rope_parameters` {rope_theta, partial_rotary_factor}; older files
(Pythia's) write `rotary_pct` and `rotary_emb_base`; both are read, with HuggingFace's defaults (0.25,
10000) when neither is there. There is no grouped-query attention and no `head_dim` (hidden_size / heads).
GGUF (GPTNeoXModel.set_gguf_parameters) writes rope.dimension_count, use_parallel_residual and
attention.layer_norm_epsilon, no head_count_kv and no rope.freq_base (llama.cpp's default 10000 holds).

The activation is HuggingFace's `hidden_act`: exact (erf) GELU for Pythia; `gelu_new` and its kin are the
tanh approximation. A GGUF records none: fak uses exact GELU, as the models were trained (llama.cpp
computes the tanh approximation).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models.common import gguf_base, hf_base, hf_rope_dim, rename_hf, split_qkv, untie_gguf
from fakcore.models.config import ConfigError, ModelConfig

ARCH = "gptneox"
ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh"}
HF_GLOBAL = {"gpt_neox.embed_in.weight": "token_embd.weight", "gpt_neox.final_layer_norm.weight": "output_norm.weight",
             "gpt_neox.final_layer_norm.bias": "output_norm.bias", "embed_out.weight": "output.weight",
             "lm_head.weight": "output.weight"}  # transformers 5 reads `embed_out` as lm_head, and writes it back
HF_LAYER = {f"{hf}.{kind}": f"{canonical}.{kind}" for kind in ("weight", "bias") for hf, canonical in (
    ("input_layernorm", "attn_norm"), ("post_attention_layernorm", "ffn_norm"),
    ("attention.query_key_value", "attn_qkv"), ("attention.dense", "attn_output"),
    ("mlp.dense_h_to_4h", "ffn_up"), ("mlp.dense_4h_to_h", "ffn_down"))}
# buffers older checkpoints saved: the causal mask and RoPE's frequencies, both recomputed
HF_IGNORED = ("attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq", "rotary_emb.inv_freq")


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    base = gguf_base(meta, ARCH, source, layer_norm=True, partial_rope=True)
    bias = "blk.0.attn_qkv.bias" in tensors
    return ModelConfig(**base, tie_embeddings=untie_gguf(tensors), norm="layer", norm_bias=True,
                       parallel_residual=bool(meta.get(f"{ARCH}.use_parallel_residual", True)), gated_mlp=False,
                       act="gelu", qkv_bias=bias, attn_out_bias=bias, mlp_bias=True)


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    act = ACTS.get(cfg.get("hidden_act", "gelu"))
    if act is None:
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported ({', '.join(ACTS)})")
    base = hf_base(cfg, ARCH, source, eps_key="layer_norm_eps", eps_default=1e-5,
                   default_theta=float(cfg.get("rotary_emb_base") or 10000.0), allow_partial=True)
    # GPT-NeoX has neither grouped-query attention nor a head_dim of its own: HuggingFace ignores both keys
    head_dim = base["dim"] // base["n_heads"]
    if head_dim * base["n_heads"] != base["dim"]:
        raise ConfigError(f"{source}: hidden_size {base['dim']} is not a multiple of num_attention_heads {base['n_heads']}")
    base |= dict(n_kv_heads=base["n_heads"], head_dim=head_dim, tie_embeddings=bool(cfg.get("tie_word_embeddings", False)))
    bias = bool(cfg.get("attention_bias", True))
    return ModelConfig(**base, norm="layer", norm_bias=True, rope_dim=hf_rope_dim(cfg, head_dim, source, 0.25),
                       parallel_residual=bool(cfg.get("use_parallel_residual", True)), gated_mlp=False, act=act,
                       qkv_bias=bias, attn_out_bias=bias, mlp_bias=True)


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    rows = np.arange(3 * cfg.n_heads * cfg.head_dim).reshape(3, -1)  # [all q; all k; all v]
    return split_qkv(cfg.n_layers, dict(tensors), rows, source)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    out = rename_hf(tensors, HF_LAYER, cfg.n_layers, cfg.tie_embeddings, source, global_map=HF_GLOBAL,
                    layers="gpt_neox.layers.", ignored=HF_IGNORED)
    per_head = np.arange(3 * cfg.n_heads * cfg.head_dim).reshape(cfg.n_heads, 3, cfg.head_dim)
    return split_qkv(cfg.n_layers, out, per_head.transpose(1, 0, 2).reshape(3, -1), source)  # [q|k|v][h, d] rows

