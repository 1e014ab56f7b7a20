"""gpt-oss (OpenAI): a Llama-style pre-norm decoder whose every MLP is a sparse mixture of experts, with
- attention biases on q, k, v and o, grouped-query heads, and attention sinks: one learned logit per query head
  (`self_attn.sinks`) that joins the softmax's denominator and carries no value;
- sliding-window (`sliding_window`, 128) and full layers alternating, layer 0 sliding (`layer_types`);
- YaRN RoPE on NEOX halves (transformers' _apply_rotary_emb splits each head in halves, as fak's rope does);
- a router with a bias: the top k of its logits, then a softmax over those k (ModelConfig.moe_topk_softmax);
- experts with biases and their own SwiGLU: g = min(gate, limit), u = clamp(up, -limit, limit),
  (u + 1) * g * sigmoid(alpha * g) (act "swiglu_oai", swiglu_alpha 1.702, swiglu_limit 7).

HuggingFace stores each layer's experts as 3-D parameters that multiply from the right (x @ W):
`mlp.experts.gate_up_proj` (E, dim, 2*ffn) with gate and up interleaved in its last axis (gate the even
columns, up the odd ones), `gate_up_proj_bias` (E, 2*ffn) interleaved the same way, `down_proj` (E, ffn, dim),
`down_proj_bias` (E, dim). They are transposed and de-interleaved here into llama.cpp's layout (copies, F32).
GGUF (convert_hf_to_gguf's GptOssModel, architecture "gpt-oss"): `ffn_{gate,up}_exps.weight` (E, ffn, dim),
`ffn_down_exps.weight` (E, dim, ffn), their biases `ffn_*_exps.bias`, the router `ffn_gate_inp.{weight,bias}`,
`attn_sinks.weight` (n_heads,), and the pre-MLP norm as `post_attention_norm` (renamed to ffn_norm here).
Metadata: the TextModel keys, `gpt-oss.expert_feed_forward_length`, `gpt-oss.attention.sliding_window`; llama.cpp
alternates the windows itself (set_swa_pattern(2): even layers sliding) and always applies the softmax over the
chosen k. A GGUF's YaRN ramp follows llama.cpp (ends rounded: truncate), where transformers' gpt-oss default
(`truncate: false`) does not round them: a real gpt-oss differs there between the two runtimes, not between fak
and either.

A GGUF's MXFP4 experts (how gpt-oss GGUFs ship) load as they are (formats/quants/lowbit.py; resident as int8 on
numba). Not supported, each an explicit error naming the file and the field or tensor: HuggingFace's MXFP4
experts (`*_blocks` / `*_scales` with quantization_config mxfp4), a GGUF with the fused `ffn_gate_up_exps`,
a `layer_types` entry other than sliding_attention / full_attention, a GGUF gating function other than softmax.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models.common import (
    HF_LAYER,
    gguf_base,
    gguf_field,
    gguf_window_pattern,
    hf_base,
    hf_field,
    hf_window_pattern,
    rename_hf,
    untie_gguf,
)
from fakcore.models.config import ConfigError, ModelConfig
from fakcore.models.shapes import WeightError

ARCH = "gpt_oss"
GGUF_ARCH = "gpt-oss"  # gguf's MODEL_ARCH_NAMES[GPT_OSS]: the prefix of its metadata keys
DEFAULT_THETA = 150000.0  # GptOssConfig.default_theta
GATING_SOFTMAX_WEIGHT = 3  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT: softmax over the chosen k
HF_GPT_OSS_LAYER = HF_LAYER | {
    "self_attn.o_proj.bias": "attn_output.bias", "self_attn.sinks": "attn_sinks.weight",
    "mlp.router.weight": "ffn_gate_inp.weight", "mlp.router.bias": "ffn_gate_inp.bias",
}
EXPERTS = "mlp.experts."


def gpt_oss_fields(swiglu_alpha: float, swiglu_limit: float) -> dict[str, Any]:
    """The ModelConfig fields every gpt-oss has, however it was stored."""
    return dict(attn_sinks=True, router_bias=True, expert_bias=True, moe_topk_softmax=True, act="swiglu_oai",
                expert_weights_norm=False, swiglu_alpha=swiglu_alpha, swiglu_limit=swiglu_limit)


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{GGUF_ARCH}.{key}", default)

    if any(name.endswith("ffn_gate_up_exps.weight") for name in tensors):
        raise ConfigError(f"{source}: gpt-oss with fused 'ffn_gate_up_exps' tensors is not supported (convert without "
                          f"fuse_gate_up_exps: ffn_gate_exps and ffn_up_exps)")
    gating = get("expert_gating_func", GATING_SOFTMAX_WEIGHT)
    if gating != GATING_SOFTMAX_WEIGHT:
        raise ConfigError(f"{source}: '{GGUF_ARCH}.expert_gating_func' = {gating} is not supported (softmax over the "
                          f"chosen experts, {GATING_SOFTMAX_WEIGHT})")
    base = gguf_base(meta, GGUF_ARCH, source) | {"arch": ARCH}
    window = int(gguf_field(meta, f"{GGUF_ARCH}.attention.sliding_window", source))
    keys = ("expert_count", "expert_used_count", "expert_feed_forward_length")
    missing = [k for k in keys if get(k) is None]
    if missing:
        raise ConfigError(f"{source}: missing GGUF metadata key '{GGUF_ARCH}.{missing[0]}'")
    bias = [f"blk.{i}.attn_{p}.bias" for i in range(base["n_layers"]) for p in ("q", "k", "v", "output")]
    has_bias = all(name in tensors for name in bias)
    return ModelConfig(**base, tie_embeddings=untie_gguf(tensors), qkv_bias=has_bias, attn_out_bias=has_bias,
                       sliding_window=window,
                       window_pattern=gguf_window_pattern(meta, GGUF_ARCH, base["n_layers"], 2, source) if window else (),
                       n_experts=int(get("expert_count")), n_experts_used=int(get("expert_used_count")),
                       expert_ffn_dim=int(get("expert_feed_forward_length")),
                       **gpt_oss_fields(1.702, 7.0))  # llama.cpp's constants: GGUF records neither


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    base = hf_base(cfg, ARCH, source, default_theta=DEFAULT_THETA)
    n = base["n_layers"]
    bias = bool(cfg.get("attention_bias", True))
    # transformers' default layer_types: layer i sliding when (i + 1) % 2, i.e. the even layers
    pattern = hf_window_pattern(cfg, n, source, default=lambda i: bool((i + 1) % 2))
    window = int(cfg.get("sliding_window") or 0)
    if any(pattern) and not window:
        raise ConfigError(f"{source}: config.json has sliding_attention layers but no 'sliding_window'")
    limit = float(hf_field(cfg, "swiglu_limit", source, 7.0))
    if limit <= 0:
        raise ConfigError(f"{source}: config.json 'swiglu_limit' = {limit} is not supported (> 0)")
    return ModelConfig(**base, qkv_bias=bias, attn_out_bias=bias, sliding_window=window, window_pattern=pattern,
                       n_experts=int(hf_field(cfg, "num_local_experts", source)),
                       n_experts_used=int(hf_field(cfg, "num_experts_per_tok", source)),
                       expert_ffn_dim=int(hf_field(cfg, "intermediate_size", source)),
                       **gpt_oss_fields(float(hf_field(cfg, "swiglu_alpha", source, 1.702)), limit))


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    out = {}
    for name, t in tensors.items():  # the norm before the experts is llama.cpp's post_attention_norm
        out[name.replace(".post_attention_norm.", ".ffn_norm.")] = t
    return out


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    rest: dict[str, Tensor] = {}
    experts: dict[tuple[int, str], Tensor] = {}
    for name, t in tensors.items():
        layer, _, part = name.removeprefix("model.layers.").partition(".")
        if not (name.startswith("model.layers.") and part.startswith(EXPERTS) and layer.isdigit()):
            rest[name] = t
            continue
        kind = part.removeprefix(EXPERTS)
        if kind.endswith(("_blocks", "_scales")):
            raise WeightError(f"{t.source or source}: tensor {name!r} is MXFP4 (blocks and scales): not supported")
        if kind not in ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias") or int(layer) >= cfg.n_layers:
            raise WeightError(f"{t.source or source}: unexpected tensor {name!r}")
        experts[int(layer), kind] = t
    out = rename_hf(rest, HF_GPT_OSS_LAYER, cfg.n_layers, cfg.tie_embeddings, source)
    e, f, d = cfg.n_experts, cfg.expert_ffn_dim, cfg.dim
    for i in range(cfg.n_layers):
        p, hf = f"blk.{i}.", f"model.layers.{i}.{EXPERTS}"
        gate_up = _expert(experts, i, "gate_up_proj", (e, d, 2 * f), source)  # x @ W: (E, dim, 2 ffn), interleaved
        gate_up_b = _expert(experts, i, "gate_up_proj_bias", (e, 2 * f), source)
        down = _expert(experts, i, "down_proj", (e, f, d), source)
        down_b = _expert(experts, i, "down_proj_bias", (e, d), source)
        src = experts[i, "gate_up_proj"].source or source
        for kind, cols in (("gate", slice(0, None, 2)), ("up", slice(1, None, 2))):
            w = np.ascontiguousarray(gate_up[:, :, cols].transpose(0, 2, 1))  # (E, ffn, dim)
            out[p + f"ffn_{kind}_exps.weight"] = Tensor.from_array(hf + "gate_up_proj", w, "F32", src)
            out[p + f"ffn_{kind}_exps.bias"] = Tensor.from_array(hf + "gate_up_proj_bias", gate_up_b[:, cols], "F32", src)
        out[p + "ffn_down_exps.weight"] = Tensor.from_array(hf + "down_proj", down.transpose(0, 2, 1), "F32", src)
        out[p + "ffn_down_exps.bias"] = Tensor.from_array(hf + "down_proj_bias", down_b, "F32", src)
    return out


def _expert(experts: Mapping[tuple[int, str], Tensor], layer: int, kind: str, shape: tuple[int, ...],
            source: str) -> np.ndarray:
    """Layer `layer`'s stacked expert parameter `kind` as f32, its shape checked."""
    name = f"model.layers.{layer}.{EXPERTS}{kind}"
    t = experts.get((layer, kind))
    if t is None:
        raise WeightError(f"{source}: missing tensor {name!r}")
    if tuple(t.shape) != shape:
        raise WeightError(f"{t.source or source}: tensor {name!r} has shape {tuple(t.shape)}, expected {shape}")
    return t.dequantize().reshape(shape).astype(np.float32)
