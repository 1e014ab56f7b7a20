"""Falcon (Falcon-7B, Falcon-40B/180B, Falcon2-11B): LayerNorms with biases, RoPE over each whole head, one fused
query_key_value projection, a plain MLP (dense_h_to_4h / dense_4h_to_h, exact GELU), a tied head by default.
Two architectures (HuggingFace's FalconDecoderLayer):

- the original (new_decoder_architecture false, Falcon-7B): multi-query attention (one key/value head) with
  `multi_query`, else one per query head; the block parallel by default,
      x = x + attn(ln(x)) + mlp(ln(x))            parallel_attn: one LayerNorm (input_layernorm) feeds both
      x = x + attn(ln1(x));  x = x + mlp(ln2(x))  otherwise (post_attention_layernorm)
- the new one (Falcon-40B): grouped-query attention with `num_kv_heads`, always parallel, with two LayerNorms
  (ln_attn, ln_mlp), or one shared (input_layernorm) when num_ln_in_parallel_attn is 1 (Falcon2-11B).

The fused projection's rows, as FalconAttention._split_heads reads them: n_kv groups, each its G = heads / n_kv
query heads, then one key head, then one value head, of head_dim rows each, (n_kv, G + 2, D). The three
layouts are that one view: multi-query is one group of all heads (H + 2 heads of rows), the original without
multi-query is H groups of one ((H, 3, D): q, k, v per head). llama.cpp's converter regroups the rows to
[all q; all k; all v] (FalconModel.modify_tensors, `tensor_data_layout` "jploski"); both are split here into the
canonical attn_q / attn_k / attn_v (a row gather: quant blocks move whole; the engine fuses them again where
the backend can).

GGUF (FalconModel.set_gguf_parameters): head_count_kv, attention.layer_norm_epsilon, no rope.freq_base
(llama.cpp's 10000 holds), context_length 2048. llama.cpp's graph is always the parallel block: the MLP reads
`attn_norm` and attention reads `attn_norm_2` when the layer has one (the converter maps ln_mlp to attn_norm
and ln_attn to attn_norm_2), else `attn_norm` too; so a sequential Falcon has no GGUF form. llama.cpp's falcon
has no biases; a file that carries them (the converter writes what config.json's `bias` made) runs with them.
A GGUF records no activation: fak uses exact GELU, as the models were trained (llama.cpp: the tanh form).

Not supported, an explicit ConfigError: alibi (positions as attention biases instead of RoPE), a new-architecture
block without parallel_attn (transformers cannot run it either), num_kv_heads other than the head count in the
original architecture without multi-query, an activation other than the GELUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models.common import gguf_base, hf_base, rename_hf, split_qkv, untie_gguf
from fakcore.models.config import ConfigError, ModelConfig

ARCH = "falcon"
ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh"}
HF_GLOBAL = {"transformer.word_embeddings.weight": "token_embd.weight", "transformer.ln_f.weight": "output_norm.weight",
             "transformer.ln_f.bias": "output_norm.bias", "lm_head.weight": "output.weight"}
_LAYER = (("self_attention.query_key_value", "attn_qkv"), ("self_attention.dense", "attn_output"),
          ("mlp.dense_h_to_4h", "ffn_up"), ("mlp.dense_4h_to_h", "ffn_down"))
# HuggingFace's norms -> canonical: attention's is attn_norm, the MLP's own (if any) ffn_norm
_NORMS = (("input_layernorm", "attn_norm"), ("post_attention_layernorm", "ffn_norm"), ("ln_attn", "attn_norm"),
          ("ln_mlp", "ffn_norm"))
HF_LAYER = {f"{hf}.{kind}": f"{canonical}.{kind}" for kind in ("weight", "bias") for hf, canonical in _LAYER + _NORMS}
HF_IGNORED = ("self_attention.rotary_emb.inv_freq", "rotary_emb.inv_freq")


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    layout = meta.get(f"{ARCH}.tensor_data_layout", "jploski")
    if layout != "jploski":
        raise ConfigError(f"{source}: '{ARCH}.tensor_data_layout' = {layout!r} is not supported (jploski: the fused "
                          f"qkv rows as [all q; all k; all v])")
    base = gguf_base(meta, ARCH, source, layer_norm=True)
    two_norms = "blk.0.attn_norm_2.weight" in tensors
    return ModelConfig(**base, tie_embeddings=untie_gguf(tensors), norm="layer", norm_bias=True,
                       parallel_residual=True, shared_ffn_norm=not two_norms, gated_mlp=False, act="gelu",
                       qkv_bias="blk.0.attn_qkv.bias" in tensors, attn_out_bias="blk.0.attn_output.bias" in tensors,
                       mlp_bias="blk.0.ffn_up.bias" in tensors)


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    if cfg.get("alibi", False):
        raise ConfigError(f"{source}: alibi true is not supported (fak runs Falcon with RoPE: alibi false)")
    act = ACTS.get(cfg.get("activation", "gelu"))
    if act is None:
        raise ConfigError(f"{source}: activation {cfg['activation']!r} is not supported ({', '.join(ACTS)})")
    new, parallel = bool(cfg.get("new_decoder_architecture", False)), bool(cfg.get("parallel_attn", True))
    if new and not parallel:
        raise ConfigError(f"{source}: new_decoder_architecture with parallel_attn false is not supported "
                          f"(transformers' FalconDecoderLayer cannot run it)")
    # Falcon's own spellings and FalconConfig's defaults: the MLP width is ffn_hidden_size (4 * hidden_size when
    # absent), the key/value heads below; a generic intermediate_size or num_key_value_heads is not Falcon's
    dim = cfg.get("hidden_size") or cfg.get("n_embed")  # n_embed: the original name
    cfg = {**cfg, "hidden_size": dim, "max_position_embeddings": cfg.get("max_position_embeddings") or 2048,
           "intermediate_size": cfg.get("ffn_hidden_size") or (4 * int(dim) if dim else None)}
    base = hf_base(cfg, ARCH, source, eps_key="layer_norm_epsilon", eps_default=1e-5)
    n_heads = base["n_heads"]
    head_dim = base["dim"] // n_heads
    if head_dim * n_heads != base["dim"]:
        raise ConfigError(f"{source}: hidden_size {base['dim']} is not a multiple of num_attention_heads {n_heads}")
    n_kv = int(cfg.get("num_kv_heads") or n_heads)
    if not new and cfg.get("multi_query", True):
        n_kv = 1
    elif not new and n_kv != n_heads:
        raise ConfigError(f"{source}: num_kv_heads {n_kv} with multi_query false in the original architecture (it "
                          f"has one key/value head per query head, {n_heads})")
    n_norms = int(cfg.get("num_ln_in_parallel_attn") or 2) if new else 1 if parallel else 2
    bias = bool(cfg.get("bias", False))
    base |= dict(n_kv_heads=n_kv, head_dim=head_dim, tie_embeddings=bool(cfg.get("tie_word_embeddings", True)))
    return ModelConfig(**base, norm="layer", norm_bias=True, parallel_residual=new or parallel,
                       shared_ffn_norm=(new or parallel) and n_norms == 1, gated_mlp=False, act=act,
                       qkv_bias=bias, attn_out_bias=bias, mlp_bias=bias)


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    out = dict(tensors)
    for i in range(cfg.n_layers):  # two norms: attention's is attn_norm_2, the MLP's attn_norm
        p = f"blk.{i}."
        for kind in ("weight", "bias"):
            if (second := out.pop(f"{p}attn_norm_2.{kind}", None)) is not None:
                if f"{p}attn_norm.{kind}" in out:
                    out[f"{p}ffn_norm.{kind}"] = out.pop(f"{p}attn_norm.{kind}")
                out[f"{p}attn_norm.{kind}"] = second
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    rows = (np.arange(q), np.arange(q, q + kv), np.arange(q + kv, q + 2 * kv))  # [all q; all k; all v]
    return split_qkv(cfg.n_layers, out, rows, source)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    out = rename_hf(tensors, HF_LAYER, cfg.n_layers, cfg.tie_embeddings, source, global_map=HF_GLOBAL,
                    layers="transformer.h.", ignored=HF_IGNORED)
    group = cfg.n_heads // cfg.n_kv_heads
    fused = np.arange((cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim).reshape(cfg.n_kv_heads, group + 2, cfg.head_dim)
    rows = (fused[:, :group].reshape(-1), fused[:, group].reshape(-1), fused[:, group + 1].reshape(-1))
    return split_qkv(cfg.n_layers, out, rows, source)

