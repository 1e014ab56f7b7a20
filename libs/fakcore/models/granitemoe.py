"""GraniteMoE (IBM Granite 3.x MoE): Granite's blocks and four multipliers (granite.py) with a sparse
mixture-of-experts MLP in every layer: softmax over the top `n_experts_used` router logits (the same weights as
a softmax over all of them renormalised over the top k, which is how fak computes them), SiLU-gated experts of
width `intermediate_size`. No shared expert (GraniteMoeShared, its own model_type, is not run).

    x = embed(ids) * embedding_multiplier
    x = x + attn(norm(x)) * residual_multiplier     softmax scale attention_multiplier
    x = x + moe(norm(x)) * residual_multiplier
    logits = head(norm(x)) / logits_scaling

HuggingFace stores each layer's experts fused (JetMoE's parallel experts): `block_sparse_moe.input_linear`
(n_experts, 2*ffn, dim) holds gate then up along its second axis, `output_linear` (n_experts, dim, ffn) is
down, `router.layer` (n_experts, dim) the router. They are split here into the canonical stacked
`ffn_gate_exps` / `ffn_up_exps` / `ffn_down_exps` and `ffn_gate_inp`.
GGUF (convert_hf_to_gguf's GraniteMoeModel, a GraniteModel): input_linear split the same way, the multipliers
as for granite under `granitemoe.*`, Q/K rows permuted as for Llama (put back by llama.py); expert counts in
`granitemoe.expert_count` / `expert_used_count`, no `expert_feed_forward_length` (llama.cpp sizes the experts
by `feed_forward_length`); llama.cpp always renormalises GraniteMoE's top-k weights.

Not supported, each an explicit ConfigError: shared experts (config.json `shared_intermediate_size`; a GGUF's
`expert_shared_feed_forward_length`, which the converter writes for GraniteMoeShared under this
architecture, or `ffn_*_shexp` tensors), a GGUF without RoPE (`rope.scaling.finetuned` false), attention
biases, other activations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models import granite, llama, qwen3moe
from fakcore.models.common import HF_LAYER, hf_field, rename_hf
from fakcore.models.config import ConfigError, ModelConfig
from fakcore.models.shapes import WeightError

ARCH = "granitemoe"
HF_MOE_LAYER = HF_LAYER | {"block_sparse_moe.router.layer.weight": "ffn_gate_inp.weight",
                           "block_sparse_moe.output_linear.weight": "ffn_down_exps.weight"}
FUSED = "block_sparse_moe.input_linear.weight"  # (n_experts, 2*ffn, dim): gate rows, then up rows


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    if not meta.get(f"{ARCH}.rope.scaling.finetuned", True):  # llama.cpp's switch for RoPE (Granite-4 hybrids)
        raise ConfigError(f"{source}: '{ARCH}.rope.scaling.finetuned' is false (no RoPE): not supported")
    base = granite.config_from_gguf(meta, tensors, source, arch=ARCH)
    return replace(base, **qwen3moe.gguf_experts(meta, tensors, ARCH, source, expert_ffn_dim=base.ffn_dim))


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    if cfg.get("shared_intermediate_size"):
        raise ConfigError(f"{source}: granitemoe with shared experts (shared_intermediate_size "
                          f"{cfg['shared_intermediate_size']}) is not supported")
    base = granite.config_from_hf(cfg, source, arch=ARCH)
    return replace(base, n_experts=int(hf_field(cfg, "num_local_experts", source)),
                   n_experts_used=int(hf_field(cfg, "num_experts_per_tok", source)),
                   expert_ffn_dim=base.ffn_dim,  # every MLP is sparse: intermediate_size is the experts' width
                   expert_weights_norm=True)  # softmax over the top k logits


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return llama.tensors_from_gguf(cfg, tensors, source)  # Q/K rows back from llama.cpp's order


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    fused = {name: t for name, t in tensors.items() if name.endswith("." + FUSED)}
    out = rename_hf({n: t for n, t in tensors.items() if n not in fused}, HF_MOE_LAYER, cfg.n_layers,
                    cfg.tie_embeddings, source)
    for name, t in fused.items():
        index = name.removeprefix("model.layers.").partition(".")[0]
        if f"model.layers.{index}.{FUSED}" != name or not index.isdigit() or int(index) >= cfg.n_layers:
            raise WeightError(f"{t.source or source}: unexpected tensor {name!r}")
        out |= split_gate_up(t, int(index), cfg, source)
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
