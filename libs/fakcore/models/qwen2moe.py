"""Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): Qwen2's attention (biases on q, k and v) with a sparse
mixture-of-experts MLP in every layer and one shared expert beside the routed ones:

    x = x + attn(norm(x))
    h = norm(x)
    x = x + sum_k w_k * expert_k(h) + sigmoid(shared_gate . h) * shared(h)

The router (n_experts, dim) scores the experts: softmax, the top `n_experts_used` kept, renormalised to sum 1
only with `norm_topk_prob` (HuggingFace's default false, what Qwen1.5-MoE ships). Each expert is a SiLU-gated
MLP of width `moe_intermediate_size`; the shared expert one of width `shared_expert_intermediate_size`, run on
every token, its output times the sigmoid of one scalar per token (`shared_expert_gate`, a (1, dim) linear).

GGUF (convert_hf_to_gguf's Qwen2MoeModel): the router `ffn_gate_inp` and the experts stacked into
`ffn_{gate,up,down}_exps` as for Qwen3-MoE (qwen3moe.py); the shared expert `ffn_{gate,up,down}_shexp`, its gate
`ffn_gate_inp_shexp` (kept F32; (dim,) where the converter squeezed it, as llama.cpp loads it, or (1, dim): both
are read). Widths in `qwen2moe.expert_feed_forward_length` and `expert_shared_feed_forward_length` (absent:
llama.cpp sizes the shared expert by `feed_forward_length`, and so does fak). The converter writes no flag for
norm_topk_prob and llama.cpp never renormalises Qwen2-MoE's top-k weights, so neither does fak for a file that
does not say `qwen2moe.expert_weights_norm`. q/k/v biases as the file has them; no Q/K permutation.
HuggingFace: one tensor per expert (`mlp.experts.{e}.gate_proj.weight`…, stacked here as for Qwen3-MoE),
`mlp.shared_expert.{gate,up,down}_proj.weight`, `mlp.shared_expert_gate.weight` (1, dim).

Dense layers among the sparse ones (`mlp_only_layers`, `decoder_sparse_step`) as in qwen3moe.py: a gated MLP of
width `intermediate_size`, no router and no shared expert there (HuggingFace only).

Not supported, each an explicit ConfigError: no shared expert (`shared_expert_intermediate_size` 0: a Qwen3-MoE), sliding windows
(`use_sliding_window`), a gating function other than softmax, more than one shared expert
(`expert_shared_count`), other activations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fakcore.formats.tensor import Tensor
from fakcore.models import qwen3moe
from fakcore.models.common import gguf_base, hf_base, hf_field, untie_gguf
from fakcore.models.config import ConfigError, ModelConfig

ARCH = "qwen2moe"
HF_SHARED_LAYER = qwen3moe.HF_MOE_LAYER | {
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight", "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight", "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
}


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    base = gguf_base(meta, ARCH, source)
    experts = qwen3moe.gguf_experts(meta, tensors, ARCH, source, weights_norm=False, shared=True)
    experts["shared_expert_ffn_dim"] = experts["shared_expert_ffn_dim"] or base["ffn_dim"]  # llama.cpp's fallback
    return ModelConfig(**base, qkv_bias="blk.0.attn_q.bias" in tensors, tie_embeddings=untie_gguf(tensors),
                       shared_expert_gate=True, **experts)


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    if cfg.get("use_sliding_window") or "sliding_attention" in (cfg.get("layer_types") or ()):
        raise ConfigError(f"{source}: use_sliding_window is not supported for qwen2_moe")
    shared = int(hf_field(cfg, "shared_expert_intermediate_size", source))
    if shared <= 0:
        raise ConfigError(f"{source}: qwen2_moe with shared_expert_intermediate_size {shared} (no shared expert) "
                          f"is not supported")
    # transformers 5 writes num_local_experts, older versions num_experts
    n_experts = cfg.get("num_experts") or hf_field(cfg, "num_local_experts", source)
    return ModelConfig(**hf_base(cfg, ARCH, source), qkv_bias=bool(cfg.get("qkv_bias", True)), n_experts=int(n_experts),
                       dense_layers=qwen3moe.hf_dense_layers(cfg, int(n_experts), source),
                       n_experts_used=int(hf_field(cfg, "num_experts_per_tok", source)),
                       expert_ffn_dim=int(hf_field(cfg, "moe_intermediate_size", source)),
                       expert_weights_norm=bool(cfg.get("norm_topk_prob", False)),  # HF's default: off
                       shared_expert_ffn_dim=shared, shared_expert_gate=True)


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return dict(tensors)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return qwen3moe.tensors_from_hf(cfg, tensors, source, HF_SHARED_LAYER)
