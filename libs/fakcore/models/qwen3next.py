"""Qwen3-Next: a hybrid decoder. Most layers are Gated DeltaNet linear attention (engine/deltanet.py: a causal
depthwise conv, then the gated delta rule over a (dk, dv) state per value head, an RMSNorm gated by silu(z));
every `full_attention_interval`-th layer (or as `layer_types` says) is Qwen3's attention with two changes: RoPE on
the leading `partial_rotary_factor` of each head (0.25 by default), and the output gated per channel by
sigmoid(gate), the gate coming out of q_proj with the query. Every RMSNorm outside the linear layers is
zero-centred, x * (1 + w) (norm_offset 1); the gated one scales by w itself.

HuggingFace: q_proj holds per head [query (head_dim); gate (head_dim)], split here into `attn_q` and
`attn_gate`; the linear layers' tensors take llama.cpp's names (`ssm_in` = in_proj_qkvz, `ssm_ba` = in_proj_ba,
`ssm_conv1d` squeezed to (channels, kernel), `ssm_a` = -exp(A_log) as llama.cpp stores it, `ssm_dt.bias` =
dt_bias, `ssm_norm`, `ssm_out`). The multi-token-prediction head (`mtp.*`), which plain decoding does not run, is
not read (transformers ignores it too).

The MLP: Qwen3-Next's mixture of experts on every layer (softmax router, top `num_experts_per_tok`, renormalised
with `norm_topk_prob`, experts of width `moe_intermediate_size`) plus one shared expert of width
`shared_expert_intermediate_size` times sigmoid(shared_expert_gate . x), as Qwen2-MoE's (qwen2moe.py's names); or
a dense SiLU-gated MLP (`num_experts` 0, or every layer in `mlp_only_layers`). A mix of dense and sparse layers
is an explicit ConfigError, as are a sparse layer without a shared expert, q/k/v/o biases, an activation other
than SiLU, layer types other than linear_attention / full_attention. GGUF (llama.cpp's qwen3next) is not
supported yet: an explicit ConfigError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models import qwen2moe, qwen3moe
from fakcore.models.common import HF_LAYER, hf_base, hf_field, hf_rope_dim, split_rows
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
    raise ConfigError(f"{source}: qwen3next GGUF files are not supported yet (the safetensors checkpoint is)")


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    if cfg.get("attention_bias"):
        raise ConfigError(f"{source}: attention_bias is not supported for qwen3_next")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    n_layers = int(hf_field(cfg, "num_hidden_layers", source))
    dense = set(cfg.get("mlp_only_layers") or ())
    step = int(cfg.get("decoder_sparse_step", 1))
    sparse = [i for i in range(n_layers) if int(cfg.get("num_experts", 0)) > 0 and i not in dense and (i + 1) % step == 0]
    if sparse and len(sparse) != n_layers:
        raise ConfigError(f"{source}: qwen3_next with dense layers among the sparse ones (mixture of experts on layers "
                          f"{sparse} only: mlp_only_layers {sorted(dense)}, decoder_sparse_step {step}) is not supported")
    moe = {}
    if sparse:
        shared = int(cfg.get("shared_expert_intermediate_size", 0))
        if shared <= 0:
            raise ConfigError(f"{source}: qwen3_next with shared_expert_intermediate_size {shared} (no shared expert) "
                              f"is not supported")
        moe = dict(n_experts=int(cfg["num_experts"]), n_experts_used=int(hf_field(cfg, "num_experts_per_tok", source)),
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
    base = hf_base(cfg, ARCH, source, allow_partial=True)
    linear = dict(linear_k_heads=int(hf_field(cfg, "linear_num_key_heads", source)),
                  linear_v_heads=int(hf_field(cfg, "linear_num_value_heads", source)),
                  linear_k_dim=int(hf_field(cfg, "linear_key_head_dim", source)),
                  linear_v_dim=int(hf_field(cfg, "linear_value_head_dim", source)),
                  linear_conv=int(hf_field(cfg, "linear_conv_kernel_dim", source)))
    return ModelConfig(**base, rope_dim=hf_rope_dim(cfg, base["head_dim"], source, default=0.25), qk_norm=True,
                       norm_offset=1.0, attn_gate=True, linear_layers=tuple(t == "linear_attention" for t in types),
                       **linear, **moe)


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    raise ConfigError(f"{source}: qwen3next GGUF files are not supported yet")


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    layer_map = HF_NEXT_LAYER | (qwen2moe.HF_SHARED_LAYER if cfg.n_experts else {})
    out = qwen3moe.tensors_from_hf(cfg, {n: t for n, t in tensors.items() if not n.startswith("mtp.")}, source,
                                   layer_map)  # per-expert tensors stacked into ffn_*_exps
    d = cfg.head_dim
    per_head = np.arange(cfg.n_heads)[:, None] * 2 * d + np.arange(d)  # (H, D): each head's query rows
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        if p + "attn_q.weight" in out:  # per head [query; gate] -> attn_q, attn_gate
            out |= split_rows(out.pop(p + "attn_q.weight"), {p + "attn_q.weight": per_head.reshape(-1),
                                                              p + "attn_gate.weight": (per_head + d).reshape(-1)}, source)
        if p + "ssm_conv1d.weight" in out:  # (C, 1, K) -> (C, K): the same bytes
            t = out[p + "ssm_conv1d.weight"]
            out[p + "ssm_conv1d.weight"] = Tensor(t.name, t.qtype, (t.shape[0], t.shape[-1]), t.raw, t.source)
        if p + "ssm_a" in out:  # llama.cpp's A = -exp(A_log)
            t = out[p + "ssm_a"]
            out[p + "ssm_a"] = Tensor.from_array(p + "ssm_a", -np.exp(t.dequantize().astype(np.float32)), "F32",
                                                 t.source or source)
    return out
