"""GraniteMoE (IBM Granite 3.x MoE) and GraniteMoeShared: Granite's blocks and four multipliers (granite.py)
with a sparse mixture-of-experts MLP in every layer: softmax over the top `n_experts_used` router logits (the
same weights as a softmax over all of them renormalised over the top k, which is how fak computes them),
SiLU-gated experts of width `intermediate_size`. GraniteMoeShared (model_type `granitemoeshared`) adds one
shared expert, a SiLU-gated MLP of width `shared_intermediate_size` every token runs, added ungated to the
routed sum (transformers' GraniteMoeSharedDecoderLayer: moe(h) + shared_mlp(h)).

    x = embed(ids) * embedding_multiplier
    x = x + attn(norm(x)) * residual_multiplier     softmax scale attention_multiplier
    x = x + (moe(norm(x)) + shared(norm(x))) * residual_multiplier      shared: GraniteMoeShared only
    logits = head(norm(x)) / logits_scaling

HuggingFace stores each layer's experts fused (JetMoE's parallel experts): `block_sparse_moe.input_linear`
(n_experts, 2*ffn, dim) holds gate then up along its second axis, `output_linear` (n_experts, dim, ffn) is
down, `router.layer` (n_experts, dim) the router. They are split here into the canonical stacked
`ffn_gate_exps` / `ffn_up_exps` / `ffn_down_exps` and `ffn_gate_inp`. The shared expert is fused the same way:
`shared_mlp.input_linear` (2*shared, dim), gate rows then up rows, split into `ffn_gate_shexp` /
`ffn_up_shexp`; `shared_mlp.output_linear` is `ffn_down_shexp`.
GGUF (convert_hf_to_gguf's GraniteMoeModel, a GraniteModel, for both model types): input_linear split the same
way, the multipliers as for granite under `granitemoe.*`, Q/K rows permuted as for Llama (put back by llama.py);
expert counts in `granitemoe.expert_count` / `expert_used_count`, no `expert_feed_forward_length` (llama.cpp
sizes the experts by `feed_forward_length`); llama.cpp always renormalises GraniteMoE's top-k weights. A
GraniteMoeShared file is a `granitemoe` one with `granitemoe.expert_shared_feed_forward_length` and the
`ffn_{gate,up,down}_shexp` tensors (no shared gate); without the key llama.cpp loads no shared expert, and a
`ffn_*_shexp` tensor is then an unexpected tensor.

Not supported, each an explicit ConfigError: a `shared_intermediate_size` under model_type `granitemoe`
(transformers' GraniteMoe has no shared expert: the file contradicts itself), more than one shared expert
(`expert_shared_count`), a GGUF without RoPE (`rope.scaling.finetuned` false), attention biases, other
activations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models import granite, llama, qwen3moe
from fakcore.models.common import HF_LAYER, hf_field, rename_hf, split_rows
from fakcore.models.config import ConfigError, ModelConfig
from fakcore.models.shapes import WeightError

ARCH = "granitemoe"
HF_MOE_LAYER = HF_LAYER | {"block_sparse_moe.router.layer.weight": "ffn_gate_inp.weight",
                           "block_sparse_moe.output_linear.weight": "ffn_down_exps.weight",
                           "shared_mlp.output_linear.weight": "ffn_down_shexp.weight"}
FUSED = "block_sparse_moe.input_linear.weight"  # (n_experts, 2*ffn, dim): gate rows, then up rows
FUSED_SHARED = "shared_mlp.input_linear.weight"  # (2*shared, dim): gate rows, then up rows (GraniteMoeShared)


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    if not meta.get(f"{ARCH}.rope.scaling.finetuned", True):  # llama.cpp's switch for RoPE (Granite-4 hybrids)
        raise ConfigError(f"{source}: '{ARCH}.rope.scaling.finetuned' is false (no RoPE): not supported")
    base = granite.config_from_gguf(meta, tensors, source, arch=ARCH)
    return replace(base, **qwen3moe.gguf_experts(meta, tensors, ARCH, source, expert_ffn_dim=base.ffn_dim, shared=True))


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    """model_type granitemoe or granitemoeshared (checkpoint.py sends both here)."""
    shared = int(cfg.get("shared_intermediate_size") or 0)
    if shared and cfg.get("model_type") != "granitemoeshared":
        raise ConfigError(f"{source}: granitemoe with shared experts (shared_intermediate_size {shared}) is not "
                          f"supported: transformers' GraniteMoe has none (model_type 'granitemoeshared' has)")
    base = granite.config_from_hf(cfg, source, arch=ARCH)
    return replace(base, n_experts=int(hf_field(cfg, "num_local_experts", source)),
                   n_experts_used=int(hf_field(cfg, "num_experts_per_tok", source)),
                   expert_ffn_dim=base.ffn_dim,  # every MLP is sparse: intermediate_size is the experts' width
                   expert_weights_norm=True,  # softmax over the top k logits
                   shared_expert_ffn_dim=shared)  # 0 (granitemoeshared's default): none


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return llama.tensors_from_gguf(cfg, tensors, source)  # Q/K rows back from llama.cpp's order


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    fused = {name: t for name, t in tensors.items() if name.endswith(("." + FUSED, "." + FUSED_SHARED))}
    out = rename_hf({n: t for n, t in tensors.items() if n not in fused}, HF_MOE_LAYER, cfg.n_layers,
                    cfg.tie_embeddings, source)
    for name, t in fused.items():
        index, _, rest = name.removeprefix("model.layers.").partition(".")
        if f"model.layers.{index}.{rest}" != name or not index.isdigit() or int(index) >= cfg.n_layers:
            raise WeightError(f"{t.source or source}: unexpected tensor {name!r}")
        if rest == FUSED:
            out |= split_gate_up(t, int(index), cfg, source)
        else:  # the shared expert's (2*shared, dim): gate rows, then up rows
            s, p = cfg.shared_expert_ffn_dim or t.shape[0] // 2, f"blk.{index}."  # none: an unexpected tensor later
            out |= split_rows(t, {p + "ffn_gate_shexp.weight": np.arange(s), p + "ffn_up_shexp.weight": np.arange(s, 2 * s)},
                              source)
    return out


def split_gate_up(t: Tensor, layer: int, cfg: ModelConfig, source: str) -> dict[str, Tensor]:
    """input_linear (n_experts, 2*ffn, dim) -> ffn_gate_exps, ffn_up_exps (n_experts, ffn, dim), each a copy of
    its rows, still in the stored type (rows are whole quant blocks)."""
    e, f = cfg.n_experts, cfg.expert_ffn_dim
    if tuple(t.shape) != (e, 2 * f, cfg.dim):
        raise WeightError(f"{t.source or source}: tensor {t.name!r} has shape {tuple(t.shape)}, "
                          f"expected {(e, 2 * f, cfg.dim)}")
    halves = t.raw.reshape(e, 2, -1)  # [expert, gate | up, f rows of bytes]
    return {f"blk.{layer}.ffn_{kind}_exps.weight": Tensor(f"blk.{layer}.ffn_{kind}_exps.weight", t.qtype, (e, f, cfg.dim),
                                                          np.ascontiguousarray(halves[:, i]).reshape(-1),
                                                          t.source or source)
            for i, kind in enumerate(("gate", "up"))}
