"""Qwen3-Next: a hybrid decoder. Most layers are Gated DeltaNet linear attention (engine/deltanet.py: a causal
depthwise conv, then the gated delta rule over a (dk, dv) state per value head, an RMSNorm gated by silu(z));
every `full_attention_interval`-th layer (or as `layer_types` says) is Qwen3's attention with two changes: RoPE on
the leading `partial_rotary_factor` of each head (0.25 by default), and the output gated per channel by
sigmoid(gate), the gate coming out of q_proj with the query. Every RMSNorm outside the linear layers is
zero-centred, x * (1 + w) (norm_offset 1); the gated one scales by w itself.

The canonical tensors (models/shapes.py) are llama.cpp's, but for two splits: a full-attention layer's q_proj
holds per head [query (head_dim); gate (head_dim)], split into `attn_q` and `attn_gate`; a linear layer's
`ssm_ba` (per key head [b (r); a (r)]) is split into `ssm_beta` and `ssm_alpha`, each in value-head order.
A linear layer: `attn_qkv` (all q, all k, all v: the conv's channels), `attn_gate` (z), `ssm_conv1d` (channels,
kernel), `ssm_a` = -exp(A_log), `ssm_dt.bias` = dt_bias, `ssm_norm`, `ssm_out`.

HuggingFace: in_proj_qkvz holds per key head [q (dk); k (dk); v (r*dv); z (r*dv)], regrouped here (rows, so a
quantized tensor stays so) as convert_hf_to_gguf does; conv1d (C, 1, K) squeezed; A_log turned into A. The
multi-token-prediction head (`mtp.*`), which plain decoding does not run, is not read (transformers ignores it
too, and llama.cpp's converter drops it).

GGUF (convert_hf_to_gguf's Qwen3NextModel, a Qwen2-MoE): its metadata plus `ssm.conv_kernel`, `ssm.state_size`
(dk), `ssm.group_count` (Hk), `ssm.time_step_rank` (Hv), `ssm.inner_size` (Hv*dv), `full_attention_interval`
(layer i attends when (i + 1) % interval == 0: llama.cpp keeps no other layout) and `rope.dimension_count`
(the rotated part of a head). The converter adds 1 to every RMSNorm's gains but the gated one, so a GGUF's norms
are plain (norm_offset 0). llama.cpp maps no dense MLP for qwen3next: a GGUF is always the MoE.

The MLP: Qwen3-Next's mixture of experts on every layer (softmax router, top `num_experts_per_tok`, renormalised
with `norm_topk_prob`, experts of width `moe_intermediate_size`) plus one shared expert of width
`shared_expert_intermediate_size` times sigmoid(shared_expert_gate . x), as Qwen2-MoE's (qwen2moe.py's names); or
a dense SiLU-gated MLP (`num_experts` 0, or every layer in `mlp_only_layers`), or a mix of the two (qwen3moe.py's
hf_dense_layers). Explicit ConfigErrors: a sparse layer without a shared expert, q/k/v/o biases, an activation other
than SiLU, layer types other than linear_attention / full_attention.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models import qwen2moe, qwen3moe
from fakcore.models.common import (
    HF_LAYER,
    gguf_base,
    gguf_field,
    hf_base,
    hf_field,
    hf_rope_dim,
    split_rows,
    untie_gguf,
)
from fakcore.models.config import ConfigError, ModelConfig

ARCH = "qwen3next"
HF_NEXT_LAYER = HF_LAYER | {
    "linear_attn.in_proj_qkvz.weight": "ssm_in.weight", "linear_attn.in_proj_ba.weight": "ssm_ba.weight",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight", "linear_attn.A_log": "ssm_a",
    "linear_attn.dt_bias": "ssm_dt.bias", "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
}
LAYER_TYPES = ("linear_attention", "full_attention")


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    base = gguf_base(meta, ARCH, source, partial_rope=True)
    experts = qwen3moe.gguf_experts(meta, tensors, ARCH, source, shared=True)
    if experts["shared_expert_ffn_dim"] <= 0:
        raise ConfigError(f"{source}: qwen3next with no shared expert ('{ARCH}.expert_shared_feed_forward_length' "
                          f"absent or 0) is not supported")
    return ModelConfig(**base, qk_norm=True, attn_gate=True, tie_embeddings=untie_gguf(tensors), shared_expert_gate=True,
                       **gguf_linear(meta, ARCH, base["n_layers"], source), **experts)


def gguf_linear(meta: Mapping[str, Any], arch: str, n_layers: int, source: str) -> dict[str, Any]:
    """The ModelConfig fields of the linear layers, from the `ssm.*` keys and `full_attention_interval` (layer i
    attends when (i + 1) % interval == 0) that Qwen3NextModel.set_gguf_parameters writes (qwen35.py's too)."""

    def get(key: str) -> Any:
        return gguf_field(meta, f"{arch}.{key}", source)

    hv, inner, interval = int(get("ssm.time_step_rank")), int(get("ssm.inner_size")), int(get("full_attention_interval"))
    if hv <= 0 or inner % hv or interval <= 0:
        raise ConfigError(f"{source}: '{arch}.ssm.inner_size' = {inner} is not a multiple of '{arch}.ssm.time_step_rank' "
                          f"= {hv}, or '{arch}.full_attention_interval' = {interval} is not positive")
    return dict(linear_layers=tuple((i + 1) % interval != 0 for i in range(n_layers)),
                linear_k_heads=int(get("ssm.group_count")), linear_v_heads=hv, linear_k_dim=int(get("ssm.state_size")),
                linear_v_dim=inner // hv, linear_conv=int(get("ssm.conv_kernel")))


def config_from_hf(cfg: Mapping[str, Any], source: str, arch: str = ARCH, family: str = "qwen3_next") -> ModelConfig:
    """arch, family: the names a Qwen3.5 config is loaded under (qwen35.py), in the config and its errors."""
    if cfg.get("attention_bias"):
        raise ConfigError(f"{source}: attention_bias is not supported for {family}")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    n_layers, n_experts = int(hf_field(cfg, "num_hidden_layers", source)), int(cfg.get("num_experts", 0))
    moe = {}
    dense = qwen3moe.hf_dense_flags(cfg, n_experts, source) if n_experts > 0 else ()
    if dense and not all(dense):  # some layer is sparse
        shared = int(cfg.get("shared_expert_intermediate_size", 0))
        if shared <= 0:
            raise ConfigError(f"{source}: {family} with shared_expert_intermediate_size {shared} (no shared expert) "
                              f"is not supported")
        moe = dict(n_experts=n_experts, dense_layers=dense if any(dense) else (),
                   n_experts_used=int(hf_field(cfg, "num_experts_per_tok", source)),
                   expert_ffn_dim=int(hf_field(cfg, "moe_intermediate_size", source)),
                   expert_weights_norm=bool(cfg.get("norm_topk_prob", True)),  # Qwen3NextConfig's default: on
                   shared_expert_ffn_dim=shared, shared_expert_gate=True)
    types = cfg.get("layer_types")
    if types is None:  # transformers' default: every interval-th layer attends
        interval = int(cfg.get("full_attention_interval", 4))
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers)]
    if len(types) != n_layers:
        raise ConfigError(f"{source}: config.json 'layer_types' has {len(types)} entries for {n_layers} layers")
    if unknown := sorted(set(types) - set(LAYER_TYPES)):
        raise ConfigError(f"{source}: config.json 'layer_types' has unsupported {unknown} ({', '.join(LAYER_TYPES)})")
    base = hf_base(cfg, arch, source, allow_partial=True)
    linear = dict(linear_k_heads=int(hf_field(cfg, "linear_num_key_heads", source)),
                  linear_v_heads=int(hf_field(cfg, "linear_num_value_heads", source)),
                  linear_k_dim=int(hf_field(cfg, "linear_key_head_dim", source)),
                  linear_v_dim=int(hf_field(cfg, "linear_value_head_dim", source)),
                  linear_conv=int(hf_field(cfg, "linear_conv_kernel_dim", source)))
    return ModelConfig(**base, rope_dim=hf_rope_dim(cfg, base["head_dim"], source, default=0.25), qk_norm=True,
                       norm_offset=1.0, attn_gate=True, linear_layers=tuple(t == "linear_attention" for t in types),
                       **linear, **moe)


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    out = {name.replace(".post_attention_norm.", ".ffn_norm."): t for name, t in tensors.items()}
    split_gates(cfg, out, source)
    return out


def split_gates(cfg: ModelConfig, out: dict[str, Tensor], source: str) -> None:
    """In place: each attention layer's attn_q ([query; gate] per head) into attn_q and attn_gate; each linear
    layer's ssm_ba ([b; a] per key head) into ssm_beta and ssm_alpha (value-head order)."""
    d, r = cfg.head_dim, cfg.linear_v_heads // max(cfg.linear_k_heads, 1)
    per_head = np.arange(cfg.n_heads)[:, None] * 2 * d + np.arange(d)  # (H, D): each head's query rows
    per_group = np.arange(cfg.linear_k_heads)[:, None] * 2 * r + np.arange(r)  # (Hk, r): each key head's b rows
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        if not cfg.linear_layers[i] and p + "attn_q.weight" in out:
            out |= split_rows(out.pop(p + "attn_q.weight"), {p + "attn_q.weight": per_head.reshape(-1),
                                                              p + "attn_gate.weight": (per_head + d).reshape(-1)}, source)
        if cfg.linear_layers[i] and p + "ssm_ba.weight" in out:
            out |= split_rows(out.pop(p + "ssm_ba.weight"), {p + "ssm_beta.weight": per_group.reshape(-1),
                                                              p + "ssm_alpha.weight": (per_group + r).reshape(-1)}, source)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str,
                    linear_map: Mapping[str, str] = HF_NEXT_LAYER) -> dict[str, Tensor]:
    """linear_map: the per-layer names besides the shared expert's (qwen35.py's linear layers name theirs)."""
    layer_map = dict(linear_map) | (qwen2moe.HF_SHARED_LAYER if cfg.n_experts else {})
    out = qwen3moe.tensors_from_hf(cfg, {n: t for n, t in tensors.items() if not n.startswith("mtp.")}, source,
                                   layer_map)  # per-expert tensors stacked into ffn_*_exps
    split_gates(cfg, out, source)
    hk, dk, rv = cfg.linear_k_heads, cfg.linear_k_dim, cfg.linear_v_heads // max(cfg.linear_k_heads, 1) * cfg.linear_v_dim
    group = np.arange(hk)[:, None] * (2 * dk + 2 * rv)  # (Hk, 1): each key head's first row of in_proj_qkvz
    q, k = (group + np.arange(dk)).reshape(-1), (group + dk + np.arange(dk)).reshape(-1)
    v, z = (group + 2 * dk + np.arange(rv)).reshape(-1), (group + 2 * dk + rv + np.arange(rv)).reshape(-1)
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        if p + "ssm_in.weight" in out:  # [q, k, v, z] per key head -> attn_qkv (all q, all k, all v), attn_gate (z)
            out |= split_rows(out.pop(p + "ssm_in.weight"), {p + "attn_qkv.weight": np.concatenate([q, k, v]),
                                                              p + "attn_gate.weight": z}, source)
        if p + "ssm_conv1d.weight" in out:  # (C, 1, K) -> (C, K): the same bytes
            t = out[p + "ssm_conv1d.weight"]
            out[p + "ssm_conv1d.weight"] = Tensor(t.name, t.qtype, (t.shape[0], t.shape[-1]), t.raw, t.source)
        if p + "ssm_a" in out:  # llama.cpp's A = -exp(A_log)
            t = out[p + "ssm_a"]
            out[p + "ssm_a"] = Tensor.from_array(p + "ssm_a", -np.exp(t.dequantize().astype(np.float32)), "F32",
                                                 t.source or source)
    return out
