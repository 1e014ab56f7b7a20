"""Qwen3-MoE: Qwen3's attention (RMSNorm over each head of q and k, no biases) with a sparse
mixture-of-experts MLP in every layer: a router (n_experts, dim) scores the experts, softmax, the top
`n_experts_used` kept and, with `norm_topk_prob`, renormalised to sum 1; each chosen expert is a SiLU-gated
MLP of width `moe_intermediate_size`; their outputs are summed with those weights. No shared expert.

GGUF (convert_hf_to_gguf's Qwen3MoeModel): the router is `ffn_gate_inp` (kept F32), the experts are stacked
into three 3-D tensors `ffn_gate_exps` / `ffn_up_exps` (n_experts, expert_ffn, dim) and `ffn_down_exps`
(n_experts, dim, expert_ffn); counts in `qwen3moe.expert_count`, `expert_used_count`,
`expert_feed_forward_length`. llama.cpp always renormalises Qwen3-MoE's top-k weights (the converter writes
no flag); a file that says `qwen3moe.expert_weights_norm` is read. No Q/K permutation.
HuggingFace: one tensor per expert (`mlp.experts.{e}.gate_proj.weight`…), stacked here into the GGUF layout
(canonical names); the engine splits them again per expert at load, as views.

Dense layers among the sparse ones (HuggingFace's `mlp_only_layers`, `decoder_sparse_step`: layer i is sparse
unless listed, and only when (i + 1) % step == 0) run a SiLU-gated MLP of width `intermediate_size`
(ModelConfig.dense_layers); llama.cpp's qwen3moe has no such layers, so a GGUF with one misses its router.

Not supported, each an explicit ConfigError: shared experts (a `shared_expert_intermediate_size` in config.json, a GGUF's
`expert_shared_*` keys or `ffn_*_shexp` tensors: Qwen2-MoE has them, qwen2moe.py), a gating function other
than softmax, q/k/v/o biases, sliding windows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models.common import HF_LAYER, gguf_base, hf_base, hf_field, rename_hf, untie_gguf
from fakcore.models.config import ConfigError, ModelConfig
from fakcore.models.shapes import WeightError

ARCH = "qwen3moe"
GATING_SOFTMAX = 1  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX
HF_MOE_LAYER = HF_LAYER | {"mlp.gate.weight": "ffn_gate_inp.weight"}
HF_EXPERT = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight")


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    return ModelConfig(**gguf_base(meta, ARCH, source), qk_norm=True, tie_embeddings=untie_gguf(tensors),
                       **gguf_experts(meta, tensors, ARCH, source))


def gguf_experts(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], arch: str, source: str,
                 expert_ffn_dim: int | None = None, weights_norm: bool = True,
                 shared: bool = False) -> dict[str, Any]:
    """The ModelConfig expert fields of a GGUF that stores its experts as Qwen3-MoE's (also OLMoE, GraniteMoE,
    Qwen2-MoE), after the checks they share: softmax gating, shared experts only where the family has them.
    expert_ffn_dim: the experts' width for a family whose converter writes no `expert_feed_forward_length`
    (llama.cpp sizes them by feed_forward_length); weights_norm: whether llama.cpp renormalises the top-k
    weights for the family, which a file's `{arch}.expert_weights_norm` overrides; shared: the family may have
    one shared expert, `{arch}.expert_shared_feed_forward_length` wide (absent or 0: none, the family file
    decides otherwise), else any shared-expert key or `ffn_*_shexp` tensor is an error."""

    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    if not shared and (get("expert_shared_count", 0) or get("expert_shared_feed_forward_length", 0) or
                       any(name.endswith("_shexp.weight") for name in tensors)):
        raise ConfigError(f"{source}: {arch} with shared experts is not supported")
    if shared and get("expert_shared_count", 1) not in (0, 1):
        raise ConfigError(f"{source}: '{arch}.expert_shared_count' = {get('expert_shared_count')} is not supported "
                          f"(one shared expert)")
    if get("expert_gating_func", GATING_SOFTMAX) != GATING_SOFTMAX:
        raise ConfigError(f"{source}: '{arch}.expert_gating_func' = {get('expert_gating_func')} is not supported "
                          f"(softmax, {GATING_SOFTMAX})")
    keys = ("expert_count", "expert_used_count") + (("expert_feed_forward_length",) if expert_ffn_dim is None else ())
    missing = [k for k in keys if get(k) is None]
    if missing:
        raise ConfigError(f"{source}: missing GGUF metadata key '{arch}.{missing[0]}'")
    return dict(n_experts=int(get("expert_count")), n_experts_used=int(get("expert_used_count")),
                expert_ffn_dim=int(get("expert_feed_forward_length") if expert_ffn_dim is None else expert_ffn_dim),
                expert_weights_norm=bool(get("expert_weights_norm", weights_norm)),
                shared_expert_ffn_dim=int(get("expert_shared_feed_forward_length", 0)) if shared else 0)


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    if cfg.get("attention_bias"):
        raise ConfigError(f"{source}: attention_bias is not supported for qwen3_moe (it biases o_proj too)")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    if cfg.get("use_sliding_window"):
        raise ConfigError(f"{source}: use_sliding_window is not supported for qwen3_moe")
    if cfg.get("shared_expert_intermediate_size"):
        raise ConfigError(f"{source}: qwen3_moe with shared experts (shared_expert_intermediate_size) is not supported")
    # transformers 5 writes num_local_experts, older versions num_experts
    n_experts = cfg.get("num_experts") or hf_field(cfg, "num_local_experts", source)
    return ModelConfig(**hf_base(cfg, ARCH, source), qk_norm=True, n_experts=int(n_experts),
                       dense_layers=hf_dense_layers(cfg, int(n_experts), source),
                       n_experts_used=int(hf_field(cfg, "num_experts_per_tok", source)),
                       expert_ffn_dim=int(hf_field(cfg, "moe_intermediate_size", source)),
                       expert_weights_norm=bool(cfg.get("norm_topk_prob", False)))  # HF's default: off


def hf_dense_layers(cfg: Mapping[str, Any], n_experts: int, source: str) -> tuple[bool, ...]:
    """ModelConfig.dense_layers of a Qwen-MoE config.json (hf_dense_flags); () when every layer is sparse."""
    dense = hf_dense_flags(cfg, n_experts, source)
    if all(dense):
        raise ConfigError(f"{source}: every layer is dense (mlp_only_layers {sorted(cfg.get('mlp_only_layers') or ())}, "
                          f"decoder_sparse_step {cfg.get('decoder_sparse_step', 1)}): no mixture of experts left")
    return dense if any(dense) else ()


def hf_dense_flags(cfg: Mapping[str, Any], n_experts: int, source: str) -> tuple[bool, ...]:
    """Per layer, whether a Qwen-MoE config.json makes it dense, as its decoder layers decide: layer i runs the
    experts unless it is in `mlp_only_layers` or (i + 1) is not a multiple of `decoder_sparse_step`."""
    n_layers = int(hf_field(cfg, "num_hidden_layers", source))
    step, only = int(cfg.get("decoder_sparse_step") if cfg.get("decoder_sparse_step") is not None else 1), set(cfg.get("mlp_only_layers") or ())
    if step < 1 or not only <= set(range(n_layers)):
        raise ConfigError(f"{source}: decoder_sparse_step {step} is not positive or mlp_only_layers {sorted(only)} "
                          f"names layers the model does not have ({n_layers})")
    return tuple(i in only or n_experts <= 0 or (i + 1) % step != 0 for i in range(n_layers))


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return dict(tensors)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str,
                    layer_map: Mapping[str, str] = HF_MOE_LAYER) -> dict[str, Tensor]:
    """layer_map: the per-layer names besides the experts (qwen2moe.py adds its shared expert's)."""
    experts: dict[tuple[int, str], dict[int, Tensor]] = {}
    rest: dict[str, Tensor] = {}
    for name, t in tensors.items():
        match = HF_EXPERT.fullmatch(name)
        if match is None:
            rest[name] = t
            continue
        layer, expert, kind = int(match[1]), int(match[2]), match[3]
        if layer >= cfg.n_layers or expert >= cfg.n_experts:
            raise WeightError(f"{t.source or source}: unexpected tensor {name!r}")
        experts.setdefault((layer, kind), {})[expert] = t
    out = rename_hf(rest, layer_map, cfg.n_layers, cfg.tie_embeddings, source)
    for (layer, kind), per_expert in experts.items():
        out[f"blk.{layer}.ffn_{kind}_exps.weight"] = stack_experts(per_expert, cfg.n_experts, layer, kind, source)
    return out


def stack_experts(per_expert: Mapping[int, Tensor], n_experts: int, layer: int, kind: str, source: str) -> Tensor:
    """n_experts (rows, cols) tensors -> one (n_experts, rows, cols) tensor in their common type (a copy)."""
    name = f"model.layers.{layer}.mlp.experts.{{e}}.{kind}_proj.weight"
    missing = [e for e in range(n_experts) if e not in per_expert]
    if missing:
        raise WeightError(f"{source}: missing tensor {name.format(e=missing[0])!r}")
    first = per_expert[0]
    for e in range(n_experts):
        t = per_expert[e]
        if (t.qtype, tuple(t.shape)) != (first.qtype, tuple(first.shape)):
            raise WeightError(f"{t.source or source}: tensor {name.format(e=e)!r} is {t.qtype} {tuple(t.shape)}, "
                              f"expert 0 is {first.qtype} {tuple(first.shape)}")
        if t.columns is not None:  # each expert's own act-order: one stacked tensor cannot hold them
            raise WeightError(f"{t.source or source}: tensor {name.format(e=e)!r} has GPTQ act-order columns "
                              f"(a non-trivial g_idx): not supported for experts")
    raw = np.concatenate([per_expert[e].raw for e in range(n_experts)])
    return Tensor(f"blk.{layer}.ffn_{kind}_exps.weight", first.qtype, (n_experts, *first.shape), raw,
                  first.source or source)
