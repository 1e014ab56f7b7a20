"""What every family file shares: reading config fields, RoPE settings and layer patterns, renaming tensors.

Each `models/<arch>.py` states only what is particular to its family; the field names of GGUF metadata
(`{arch}.attention.head_count`, as llama.cpp's convert_hf_to_gguf writes them) and of HuggingFace
`config.json` files (old `rope_scaling` style and transformers 5's `rope_parameters` alike) are read here.
Every missing or unusable field raises ConfigError naming the file and the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models.config import ConfigError, RopeScaling
from fakcore.models.shapes import WeightError

_MISSING: Any = object()


# -- GGUF metadata ---------------------------------------------------------------------------------------


def gguf_field(meta: Mapping[str, Any], key: str, source: str, default: Any = _MISSING) -> Any:
    if key in meta:
        return meta[key]
    if default is _MISSING:
        raise ConfigError(f"{source}: missing GGUF metadata key '{key}'")
    return default


def gguf_base(meta: Mapping[str, Any], arch: str, source: str, *, layer_norm: bool = False,
              partial_rope: bool = False) -> dict[str, Any]:
    """ModelConfig fields every llama.cpp architecture stores the same way (keyword arguments).

    layer_norm: the family uses LayerNorm, whose epsilon is `attention.layer_norm_epsilon`; partial_rope: a
    `rope.dimension_count` below the head size is the family's partial rotary (`rope_dim`), not an error."""

    def get(key: str, default: Any = _MISSING) -> Any:
        return gguf_field(meta, f"{arch}.{key}", source, default)

    dim, n_heads = int(get("embedding_length")), int(get("attention.head_count"))
    n_kv = get("attention.head_count_kv", n_heads)
    if isinstance(n_kv, list):  # llama.cpp allows one count per layer; fak needs them equal
        if len(set(n_kv)) != 1:
            raise ConfigError(f"{source}: '{arch}.attention.head_count_kv' varies per layer ({n_kv}): not supported")
        n_kv = n_kv[0]
    head_dim = int(get("attention.key_length", dim // n_heads))
    if int(get("attention.value_length", head_dim)) != head_dim:
        raise ConfigError(f"{source}: '{arch}.attention.value_length' differs from key_length: not supported")
    rope_dim = int(get("rope.dimension_count", head_dim))
    if rope_dim != head_dim and not partial_rope:
        raise ConfigError(f"{source}: '{arch}.rope.dimension_count' = {rope_dim} is not the "
                          f"head size {head_dim} (partial RoPE is not supported)")
    vocab = get("vocab_size", None)
    if vocab is None:
        vocab = len(gguf_field(meta, "tokenizer.ggml.tokens", source))
    eos = [int(meta[k]) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                  "tokenizer.ggml.eom_token_id") if meta.get(k) is not None]
    bos = meta.get("tokenizer.ggml.bos_token_id")
    eps = get("attention.layer_norm_epsilon") if layer_norm else get("attention.layer_norm_rms_epsilon")
    extra = {"rope_dim": rope_dim} if partial_rope else {}
    return extra | dict(
        arch=arch, vocab_size=int(vocab), dim=dim, n_layers=int(get("block_count")), n_heads=n_heads,
        n_kv_heads=int(n_kv), head_dim=head_dim, ffn_dim=int(get("feed_forward_length")),
        norm_eps=float(eps), rope_theta=float(get("rope.freq_base", 10000.0)),
        context_length=int(get("context_length")), rope_scaling=gguf_rope_scaling(meta, arch, source),
        bos_id=None if bos is None else int(bos), eos_ids=tuple(dict.fromkeys(eos)),
    )


def gguf_rope_scaling(meta: Mapping[str, Any], arch: str, source: str) -> RopeScaling:
    kind = meta.get(f"{arch}.rope.scaling.type", "none")
    factor = float(meta.get(f"{arch}.rope.scaling.factor", 1.0))
    if kind == "none" or (kind == "linear" and factor == 1.0):
        return RopeScaling("none")
    if kind == "linear":
        return RopeScaling("linear", factor=factor)
    if kind == "yarn":
        return gguf_yarn(meta, arch, factor, source)
    raise ConfigError(f"{source}: '{arch}.rope.scaling.type' = {kind!r} is not supported (none, linear, yarn)")


def gguf_yarn(meta: Mapping[str, Any], arch: str, factor: float, source: str) -> RopeScaling:
    """YaRN as convert_hf_to_gguf writes it from config.json (TextModel.set_gguf_parameters): factor,
    original_context_length, and yarn_beta_fast / yarn_beta_slow / yarn_attn_factor when config.json has
    them. They are read with transformers' meaning (yarn_attn_factor is its attention_factor, replacing the
    default 1 + 0.1 ln(factor); llama.cpp reads these keys for some architectures only). The keys transformers'
    YaRN has no counterpart for are errors: an extrapolation factor other than 1, DeepSeek's log multiplier
    (mscale_all_dim), a generic attn_factor."""
    key = f"{arch}.rope.scaling."
    ext = float(meta.get(key + "yarn_ext_factor", 1.0))
    if ext != 1.0:
        raise ConfigError(f"{source}: '{key}yarn_ext_factor' = {ext} is not supported (transformers' YaRN extrapolates "
                          f"fully: 1.0)")
    for unsupported in ("yarn_log_multiplier", "attn_factor"):
        if meta.get(key + unsupported) is not None:
            raise ConfigError(f"{source}: '{key}{unsupported}' is not supported with YaRN (transformers' YaRN has no such "
                              f"parameter)")
    attention = meta.get(key + "yarn_attn_factor")
    return RopeScaling("yarn", factor=factor, original_context=int(gguf_field(meta, key + "original_context_length", source)),
                       attention_factor=yarn_mscale(factor) if attention is None else float(attention),
                       beta_fast=float(meta.get(key + "yarn_beta_fast", 32.0)),
                       beta_slow=float(meta.get(key + "yarn_beta_slow", 1.0)))


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """transformers' get_mscale: YaRN's attention factor for a context `factor` times the original."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def gguf_window_pattern(meta: Mapping[str, Any], arch: str, n_layers: int, default_period: int,
                        source: str) -> tuple[bool, ...]:
    """Per layer: sliding-window or not. llama.cpp's set_swa_pattern(n): every n-th layer is global; a file
    may say otherwise with `{arch}.attention.sliding_window_pattern` (a period, or one bool per layer)."""
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern", default_period)
    if isinstance(pattern, list):
        if len(pattern) != n_layers:
            raise ConfigError(f"{source}: '{arch}.attention.sliding_window_pattern' has {len(pattern)} entries "
                              f"for {n_layers} layers")
        return tuple(bool(p) for p in pattern)
    period = int(pattern)
    return tuple(period == 0 or i % period < period - 1 for i in range(n_layers))


# -- HuggingFace config.json -----------------------------------------------------------------------------


def hf_field(cfg: Mapping[str, Any], key: str, source: str, default: Any = _MISSING) -> Any:
    if cfg.get(key) is not None:
        return cfg[key]
    if default is _MISSING:
        raise ConfigError(f"{source}: config.json has no '{key}'")
    return default


def hf_base(cfg: Mapping[str, Any], arch: str, source: str, *, eps_key: str = "rms_norm_eps",
            eps_default: Any = _MISSING, default_theta: float = 10000.0, allow_partial: bool = False) -> dict[str, Any]:
    """ModelConfig fields every HuggingFace decoder config spells the same way (keyword arguments).

    LayerNorm families name their epsilon `layer_norm_eps` (eps_key, with the family's default); families
    with partial rotary read the factor themselves (allow_partial, hf_rope_dim)."""
    dim, n_heads = int(hf_field(cfg, "hidden_size", source)), int(hf_field(cfg, "num_attention_heads", source))
    head_dim = int(hf_field(cfg, "head_dim", source, dim // n_heads))
    theta, scaling = hf_rope(cfg, None, source, default_theta, allow_partial)
    eos = hf_field(cfg, "eos_token_id", source, [])
    return dict(
        arch=arch, vocab_size=int(hf_field(cfg, "vocab_size", source)), dim=dim,
        n_layers=int(hf_field(cfg, "num_hidden_layers", source)), n_heads=n_heads,
        n_kv_heads=int(hf_field(cfg, "num_key_value_heads", source, n_heads)), head_dim=head_dim,
        ffn_dim=int(hf_field(cfg, "intermediate_size", source)), norm_eps=float(hf_field(cfg, eps_key, source, eps_default)),
        rope_theta=theta, rope_scaling=scaling, context_length=int(hf_field(cfg, "max_position_embeddings", source)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)), bos_id=cfg.get("bos_token_id"),
        eos_ids=tuple([eos] if isinstance(eos, int) else eos),
    )


def hf_rope(cfg: Mapping[str, Any], layer_type: str | None, source: str,
            default_theta: float = 10000.0, allow_partial: bool = False) -> tuple[float, RopeScaling]:
    """(base, scaling) of one layer type ("full_attention", "sliding_attention"; None: the only one).

    transformers 5 writes `rope_parameters` (per layer type when they differ); older files write
    `rope_theta` + `rope_scaling`. Both are read. A partial_rotary_factor is an error unless the family
    reads it (`allow_partial`, then `hf_rope_dim`).
    """
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and layer_type is not None and layer_type in params:
        params = params[layer_type]
    elif isinstance(params, dict) and "full_attention" in params:
        params = params["full_attention"]
    if not isinstance(params, dict):
        params = dict(cfg.get("rope_scaling") or {})
        params.setdefault("rope_theta", cfg.get("rope_theta", default_theta))
    theta = float(params.get("rope_theta") or default_theta)
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0 and not allow_partial:
        raise ConfigError(f"{source}: partial_rotary_factor {params['partial_rotary_factor']} is not supported")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return theta, RopeScaling("none")
    if kind == "linear":
        return theta, RopeScaling("linear", factor=float(params["factor"]))
    if kind == "llama3":
        return theta, RopeScaling("llama3", factor=float(params["factor"]),
                                  low_freq_factor=float(params["low_freq_factor"]),
                                  high_freq_factor=float(params["high_freq_factor"]),
                                  original_context=int(params["original_max_position_embeddings"]))
    if kind == "yarn":
        return theta, hf_yarn(cfg, params, source)
    if kind == "dynamic":  # the plain RoPE up to max_position_embeddings, an error past it (RopeScaling)
        return theta, RopeScaling("dynamic", factor=float(hf_field(params, "factor", source)),
                                  original_context=int(hf_field(cfg, "max_position_embeddings", source)))
    raise ConfigError(f"{source}: rope type {kind!r} is not supported (default, linear, llama3, yarn, dynamic)")


def hf_yarn(cfg: Mapping[str, Any], params: Mapping[str, Any], source: str) -> RopeScaling:
    """The parameters of transformers' _compute_yarn_parameters, with its defaults: a top-level
    original_max_position_embeddings wins over the rope parameters' (standardize_rope_params), else
    max_position_embeddings; factor, when absent, max / original; the attention factor, when absent,
    get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) with both mscales, else get_mscale(factor);
    beta_fast 32, beta_slow 1, truncate true."""
    max_pos = int(hf_field(cfg, "max_position_embeddings", source))
    original = int(cfg.get("original_max_position_embeddings") or params.get("original_max_position_embeddings") or max_pos)
    factor = float(params.get("factor") or max_pos / original)
    attention = params.get("attention_factor")
    if attention is None:
        mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
        attention = (yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all) if mscale and mscale_all
                     else yarn_mscale(factor))
    return RopeScaling("yarn", factor=factor, original_context=original, attention_factor=float(attention),
                       beta_fast=float(params.get("beta_fast") or 32), beta_slow=float(params.get("beta_slow") or 1),
                       truncate=bool(params.get("truncate", True)))


def hf_rope_dim(cfg: Mapping[str, Any], head_dim: int, source: str, default: float = 1.0) -> int:
    """Dims of each head RoPE rotates, int(head_dim * factor) as transformers computes it. The factor is
    `partial_rotary_factor` in `rope_parameters` (transformers 5), else at the top level, else the older
    names `rotary_pct` (GPT-NeoX) and `rope_pct` (StableLM); `default` when none is written."""
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    for factor in (params.get("partial_rotary_factor"), cfg.get("partial_rotary_factor"), cfg.get("rotary_pct"),
                   cfg.get("rope_pct")):
        if factor is not None:
            break
    else:
        factor = default
    rope_dim = int(head_dim * float(factor))
    if not 0 < rope_dim <= head_dim or rope_dim % 2:
        raise ConfigError(f"{source}: partial_rotary_factor {factor} gives {rope_dim} rotated dims of head_dim "
                          f"{head_dim} (an even number from 2 to head_dim is needed)")
    return rope_dim


def hf_window_pattern(cfg: Mapping[str, Any], n_layers: int, source: str,
                      default: Callable[[int], bool] | None = None) -> tuple[bool, ...]:
    """Per layer: sliding-window or not, from `layer_types` when present, else `default(layer)`."""
    types = cfg.get("layer_types")
    if types is None:
        return tuple(default(i) for i in range(n_layers)) if default else ()
    if len(types) != n_layers:
        raise ConfigError(f"{source}: config.json 'layer_types' has {len(types)} entries for {n_layers} layers")
    unknown = set(types) - {"sliding_attention", "full_attention"}
    if unknown:
        raise ConfigError(f"{source}: config.json 'layer_types' has unsupported {sorted(unknown)}")
    return tuple(t == "sliding_attention" for t in types)


# -- tensors ---------------------------------------------------------------------------------------------

# HuggingFace names -> canonical (llama.cpp) names. Families with sandwich norms re-map the two norms.
HF_GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
HF_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
HF_LAYER_SANDWICH = HF_LAYER | {"post_attention_layernorm.weight": "post_attention_norm.weight",
                                "pre_feedforward_layernorm.weight": "ffn_norm.weight",
                                "post_feedforward_layernorm.weight": "post_ffw_norm.weight"}
# Tensors some checkpoints carry that fak recomputes or never reads.
HF_IGNORED_SUFFIXES = ("self_attn.rotary_emb.inv_freq",)


def rename_hf(tensors: Mapping[str, Tensor], layer_map: Mapping[str, str], n_layers: int, tie_embeddings: bool,
              source: str, global_map: Mapping[str, str] = HF_GLOBAL, layers: str = "model.layers.",
              ignored: tuple[str, ...] = HF_IGNORED_SUFFIXES) -> dict[str, Tensor]:
    """HuggingFace names -> canonical names. A name no rule knows is an error naming file and tensor.
    `global_map`, `layers` (the prefix of per-layer names) and `ignored` are for families that do not use
    Llama's `model.` names (GPT-NeoX)."""
    out: dict[str, Tensor] = {}
    for name, t in tensors.items():
        canonical = global_map.get(name)
        if name.endswith(ignored) or (tie_embeddings and canonical == "output.weight"):
            continue  # the tied head is the embedding table itself
        if canonical is None and name.startswith(layers):
            index, _, rest = name[len(layers):].partition(".")
            if index.isdigit() and int(index) < n_layers and rest in layer_map:
                canonical = f"blk.{index}.{layer_map[rest]}"
        if canonical is None:
            raise WeightError(f"{t.source or source}: unexpected tensor {name!r}")
        out[canonical] = t
    return out


def split_rows(t: Tensor, parts: Mapping[str, np.ndarray], source: str) -> dict[str, Tensor]:
    """A fused projection (or its bias) as one tensor per part: `parts` maps each new name to the rows
    (elements, for a bias) of `t` it takes. Rows move as whole quant blocks, so quantized tensors stay so."""
    n = sum(len(rows) for rows in parts.values())
    if t.shape[0] != n:
        raise WeightError(f"{t.source or source}: tensor {t.name!r} has {t.shape[0]} rows, expected {n}")
    out = {}
    for name, rows in parts.items():
        if len(t.shape) == 1:  # a bias: one element per row, F32/F16/BF16 (block size 1)
            raw = t.raw.reshape(t.shape[0], -1)[rows].reshape(-1)
            out[name] = Tensor(name, t.qtype, (len(rows),), raw, t.source or source)
        else:
            part = t.take_rows(rows)
            out[name] = Tensor(name, part.qtype, part.shape, part.raw, t.source or source, part.columns)
    return out


def untie_gguf(tensors: Mapping[str, Tensor]) -> bool:
    """llama.cpp writes no `output.weight` when the head is tied to the embedding."""
    return "output.weight" not in tensors


def unpermute_qk(t: Tensor, n_heads: int) -> Tensor:
    """Undo convert_hf_to_gguf's Q/K row permutation (`LlamaModel.permute`).

    llama.cpp rotates interleaved pairs (x0,x1),(x2,x3)…; HuggingFace (and fak) rotate halves (x_i, x_{i+D/2}).
    The converter reorders each head's rows from [first half; second half] to interleaved pairs:
    GGUF row h*D + 2i + j holds HF row h*D + j*D/2 + i. Gathering rows moves whole quant blocks, so this
    works on quantized tensors unchanged.
    """
    rows = t.shape[0]
    head_dim = rows // n_heads
    if head_dim * n_heads != rows or head_dim % 2:
        raise WeightError(f"{t.source}: tensor {t.name!r} has {rows} rows, not {n_heads} heads of even size")
    gguf_rows = np.arange(rows).reshape(n_heads, head_dim // 2, 2)  # [h, i, j] = GGUF row of HF (h, j, i)
    return t.take_rows(gguf_rows.transpose(0, 2, 1).reshape(-1))


def rope_freqs_check(t: Tensor, head_dim: int, source: str) -> tuple[float, ...]:
    """The per-frequency divisors of a `rope_freqs.weight` tensor (or Phi-3's `rope_factors_*`), checked for
    shape and sanity; head_dim: the dims RoPE rotates."""
    values = t.dequantize().reshape(-1)
    if values.size != head_dim // 2:
        raise WeightError(f"{source}: tensor {t.name!r} has {values.size} values, expected {head_dim // 2}")
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise WeightError(f"{source}: tensor {t.name!r} holds non-positive or non-finite factors")
    return tuple(float(v) for v in values)


def gemma_attention_scale(n_layers: int, big_model_layers: int, dim: int, n_heads: int, head_dim: int) -> float:
    """llama.cpp's rule for Gemma 2/3 GGUFs, which carry no query_pre_attn_scalar: the 27B model scales by
    1/sqrt(dim / n_heads), every other size by 1/sqrt(head_dim)."""
    return 1.0 / math.sqrt(dim // n_heads if n_layers == big_model_layers else head_dim)


def split_qkv(n_layers: int, tensors: dict[str, Tensor], rows: Sequence[np.ndarray], source: str) -> dict[str, Tensor]:
    """Every layer's fused attn_qkv weight and bias as attn_q / attn_k / attn_v: `rows` names the fused rows of
    q, k and v in order (each family's own interleave)."""
    for i in range(n_layers):
        for kind in ("weight", "bias"):
            fused = tensors.pop(f"blk.{i}.attn_qkv.{kind}", None)
            if fused is not None:
                tensors |= split_rows(fused, {f"blk.{i}.attn_{p}.{kind}": r for p, r in zip("qkv", rows, strict=True)},
                                      source)
    return tensors
