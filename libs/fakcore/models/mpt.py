"""MPT (MosaicML's MPT-7B / MPT-30B and their fine-tunes): ALiBi instead of RoPE, LayerNorms without biases, one
fused Wqkv projection, a plain MLP of exact GELU (up_proj / down_proj, 4 * d_model wide), no bias anywhere, and a
tied head by default.

    x = x + attn(ln1(x));  x = x + mlp(ln2(x))

ALiBi (ModelConfig.alibi_max_bias): no position enters q or k; head h adds m_h * (j - i) to the score of key j
from query i, with the slopes of config.alibi_slopes (MPT's alibi_bias_max, 8 by default, is their scale).
transformers adds m_h * (j - (S - 1)) over the S keys instead: the same bias shifted by a constant per query
row, which the softmax ignores.

The fused projection's rows are [all q; all k; all v] in both formats (transformers chunks the output in three;
llama.cpp's converter keeps the tensor as it is), split here into the canonical attn_q / attn_k / attn_v (a row
gather: quant blocks move whole; the engine fuses them again where the backend can).

HuggingFace config.json: MptConfig's own names (d_model, n_heads, n_layers, max_seq_len, layer_norm_epsilon,
expansion_ratio) and its `attn_config` (alibi, alibi_bias_max, clip_qkv, softmax_scale, qk_ln, attn_type,
prefix_lm). What transformers' MptForCausalLM runs is what fak runs, and the options it would run differently
from the model they describe are errors: it builds no bias whatever `no_bias` says, applies ALiBi even with
`alibi` false, has no q/k LayerNorms for `qk_ln`, ignores `logit_scale`, and makes the MLP 4 * d_model wide
whatever `expansion_ratio` says. One deliberate difference: transformers builds its ALiBi with alibi_bias_max 8
whatever attn_config says, while the original (llm-foundry) and llama.cpp use the config's value, as fak does
(MPT-7B and MPT-30B say 8, where all three agree). `learned_pos_emb` is not read: the tensors decide (a
`transformer.wpe` table is an unexpected tensor, as it is to transformers).

GGUF (MPTModel.set_gguf_parameters): context_length = max_seq_len, feed_forward_length 4 * d_model, head_count,
head_count_kv when attn_config has kv_n_heads (llama.cpp's grouped-query MPT: k and v rows of that many heads; no transformers model to test it against),
attention.layer_norm_epsilon (the converter always writes 1e-5), attention.clamp_kqv when clip_qkv is set and
attention.max_alibi_bias (0 when alibi is false). llama.cpp's softmax scale is always 1/sqrt(head_dim), so a
config.json softmax_scale has no GGUF form.

Not supported, an explicit ConfigError naming the file and the field: no ALiBi (alibi false, max_alibi_bias 0:
learned positions or none), q/k LayerNorms (qk_ln, attn_q_norm tensors), biases (no_bias false, bias tensors),
a prefix LM, attention types other than multi-head in config.json, another norm type or MLP, logit_scale,
expansion_ratio other than 4.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models.common import gguf_base, gguf_field, hf_base, hf_field, rename_hf, split_qkv, untie_gguf
from fakcore.models.config import ConfigError, ModelConfig

ARCH = "mpt"
HF_GLOBAL = {"transformer.wte.weight": "token_embd.weight", "transformer.norm_f.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
HF_LAYER = {"norm_1.weight": "attn_norm.weight", "attn.Wqkv.weight": "attn_qkv.weight",
            "attn.out_proj.weight": "attn_output.weight", "norm_2.weight": "ffn_norm.weight",
            "ffn.up_proj.weight": "ffn_up.weight", "ffn.down_proj.weight": "ffn_down.weight"}
NORM_TYPES = ("low_precision_layernorm", "layernorm")
# GGUF tensors of MPT options fak does not run, by the option they come from
GGUF_UNSUPPORTED = {"position_embd.weight": "learned positions (alibi false)", "blk.0.attn_q_norm.weight": "qk_ln",
                    "blk.0.attn_qkv.bias": "biases (no_bias false)", "blk.0.attn_norm.bias": "biases (no_bias false)",
                    "output_norm.bias": "biases (no_bias false)"}


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    for name, option in GGUF_UNSUPPORTED.items():
        if name in tensors:
            raise ConfigError(f"{source}: tensor {name!r}: {option} is not supported for {ARCH}")
    max_bias = float(gguf_field(meta, f"{ARCH}.attention.max_alibi_bias", source))
    if max_bias <= 0:
        raise ConfigError(f"{source}: '{ARCH}.attention.max_alibi_bias' = {max_bias} (no ALiBi) is not supported: "
                          f"fak runs MPT with ALiBi only")
    base = gguf_base(meta, ARCH, source, layer_norm=True)
    return ModelConfig(**base, tie_embeddings=untie_gguf(tensors), norm="layer", gated_mlp=False, act="gelu",
                       alibi_max_bias=max_bias, clip_qkv=float(meta.get(f"{ARCH}.attention.clamp_kqv", 0.0)))


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    attn = cfg.get("attn_config") or {}
    unsupported = {
        "attn_config.alibi": (attn.get("alibi", True) is not True, "false (transformers applies ALiBi anyway, the "
                              "original learned positions): fak runs MPT with ALiBi only"),
        "attn_config.qk_ln": (bool(attn.get("qk_ln", False)), "true (transformers has no q/k LayerNorms)"),
        "attn_config.prefix_lm": (bool(attn.get("prefix_lm", False)), "true (bidirectional prefixes)"),
        "attn_config.attn_type": (attn.get("attn_type", "multihead_attention") != "multihead_attention",
                                  f"{attn.get('attn_type')!r} (transformers' MptAttention: multihead_attention)"),
        "no_bias": (cfg.get("no_bias", True) is not True, "false (transformers builds no biases)"),
        "logit_scale": (cfg.get("logit_scale") is not None, f"{cfg.get('logit_scale')!r} (transformers ignores it)"),
        "expansion_ratio": (cfg.get("expansion_ratio", 4) != 4,
                            f"{cfg.get('expansion_ratio')!r} (transformers and llama.cpp's converter: 4)"),
        "norm_type": (cfg.get("norm_type", NORM_TYPES[0]) not in NORM_TYPES,
                      f"{cfg.get('norm_type')!r} ({', '.join(NORM_TYPES)})"),
        "ffn_config.ffn_type": ((cfg.get("ffn_config") or {}).get("ffn_type", "mptmlp") != "mptmlp",
                                f"{(cfg.get('ffn_config') or {}).get('ffn_type')!r} (mptmlp)"),
    }
    for key, (bad, why) in unsupported.items():
        if bad:
            raise ConfigError(f"{source}: {key} {why} is not supported")
    max_bias = float(attn.get("alibi_bias_max", 8))
    if max_bias <= 0:
        raise ConfigError(f"{source}: attn_config.alibi_bias_max {max_bias} is not supported (ALiBi needs > 0)")
    # MptConfig's own names (and its default max_seq_len) as hf_base reads them
    dim, n_heads, n_layers = (hf_field(cfg, key, source) for key in ("d_model", "n_heads", "n_layers"))
    cfg = {**cfg, "hidden_size": dim, "num_attention_heads": n_heads, "num_hidden_layers": n_layers,
           "max_position_embeddings": cfg.get("max_seq_len") or 2048, "intermediate_size": 4 * int(dim),
           "head_dim": None, "num_key_value_heads": None, "tie_word_embeddings": cfg.get("tie_word_embeddings", True)}
    base = hf_base(cfg, ARCH, source, eps_key="layer_norm_epsilon", eps_default=1e-5)
    head_dim = base["dim"] // base["n_heads"]
    if head_dim * base["n_heads"] != base["dim"]:
        raise ConfigError(f"{source}: d_model {base['dim']} is not a multiple of n_heads {base['n_heads']}")
    scale = attn.get("softmax_scale")
    return ModelConfig(**base | dict(head_dim=head_dim), norm="layer", gated_mlp=False, act="gelu",
                       attn_scale=float(scale) if scale else 0.0, alibi_max_bias=max_bias,
                       clip_qkv=float(attn.get("clip_qkv") or 0.0))


def split_fused(cfg: ModelConfig, tensors: dict[str, Tensor], source: str) -> dict[str, Tensor]:
    """Every layer's attn_qkv as attn_q / attn_k / attn_v: rows [all q; all k; all v]."""
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    rows = (np.arange(q), np.arange(q, q + kv), np.arange(q + kv, q + 2 * kv))
    return split_qkv(cfg.n_layers, tensors, rows, source)


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return split_fused(cfg, dict(tensors), source)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    out = rename_hf(tensors, HF_LAYER, cfg.n_layers, cfg.tie_embeddings, source, global_map=HF_GLOBAL,
                    layers="transformer.blocks.")
    return split_fused(cfg, out, source)
