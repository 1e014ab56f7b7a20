"""OLMoE (AllenAI's OLMoE-1B-7B): pre-norm Llama blocks with OLMo2's full-width q/k RMSNorms (one over all of
q's heads, one over all of k's, before the split into heads and RoPE) and a sparse mixture-of-experts MLP in
every layer: softmax over the router's logits, the top `n_experts_used` kept, by default NOT renormalised
(`norm_topk_prob`, HuggingFace's default false, what OLMoE ships); SiLU-gated experts of width
`intermediate_size`. No shared expert, no biases, untied head by default.

    x = x + attn(norm(x))      q = q_norm(wq h), k = k_norm(wk h), full width
    x = x + moe(norm(x))

GGUF (convert_hf_to_gguf's OlmoeModel): experts stacked into `ffn_{gate,up,down}_exps` as for Qwen3-MoE
(qwen3moe.py), the router `ffn_gate_inp`, the q/k norms `attn_q_norm` (n_heads*head_dim,) / `attn_k_norm`
(n_kv_heads*head_dim,); no Q/K permutation (NEOX RoPE in llama.cpp). The converter writes no
`expert_feed_forward_length` (llama.cpp sizes the experts by `feed_forward_length`), always writes the RMSNorm
epsilon as 1e-5 (OLMoE's own), and no flag for `norm_topk_prob`: llama.cpp never renormalises OLMoE's top-k
weights, so neither does fak for a file that does not say `olmoe.expert_weights_norm`.

Not supported, each an explicit ConfigError: `clip_qkv` (q, k, v clamped), a `head_dim` other than
hidden_size / heads (HuggingFace sizes the q/k norms by hidden_size), shared experts (a GGUF's `expert_shared_*`
keys or `ffn_*_shexp` tensors), a gating function other than softmax, attention biases, other activations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fakcore.formats.tensor import Tensor
from fakcore.models import qwen3moe
from fakcore.models.common import gguf_base, hf_base, hf_field, untie_gguf
from fakcore.models.config import ConfigError, ModelConfig

ARCH = "olmoe"


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    base = gguf_base(meta, ARCH, source)
    experts = qwen3moe.gguf_experts(meta, tensors, ARCH, source, expert_ffn_dim=base["ffn_dim"], weights_norm=False)
    return ModelConfig(**base, qk_norm=True, qk_norm_full=True, tie_embeddings=untie_gguf(tensors), **experts)


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    if cfg.get("attention_bias"):
        raise ConfigError(f"{source}: attention_bias is not supported for olmoe (it biases o_proj too)")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    if cfg.get("clip_qkv") is not None:
        raise ConfigError(f"{source}: clip_qkv {cfg['clip_qkv']} is not supported for olmoe")
    base = hf_base(cfg, ARCH, source)
    if base["head_dim"] * base["n_heads"] != base["dim"]:
        raise ConfigError(f"{source}: head_dim {base['head_dim']} is not hidden_size / num_attention_heads "
                          f"({base['dim']} / {base['n_heads']}): not supported for olmoe")
    # transformers writes num_experts (num_local_experts is its alias)
    n_experts = cfg.get("num_experts") or hf_field(cfg, "num_local_experts", source)
    return ModelConfig(**base, qk_norm=True, qk_norm_full=True, n_experts=int(n_experts),
                       n_experts_used=int(hf_field(cfg, "num_experts_per_tok", source)),
                       expert_ffn_dim=base["ffn_dim"],  # every MLP is sparse: intermediate_size is the experts' width
                       expert_weights_norm=bool(cfg.get("norm_topk_prob", False)))  # HF's default: off


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return dict(tensors)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    # Qwen3-MoE's names: mlp.gate (the router), mlp.experts.{e}.{gate,up,down}_proj, self_attn.{q,k}_norm
    return qwen3moe.tensors_from_hf(cfg, tensors, source)
