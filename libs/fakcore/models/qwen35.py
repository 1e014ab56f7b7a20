"""Qwen3.5: Qwen3-Next's hybrid (qwen3next.py: Gated DeltaNet linear layers, every `full_attention_interval`-th
layer Qwen3's attention gated per channel, a quarter of each head rotated, zero-centred norms) with three changes:
- the linear layer's projections are four plain matrices, in_proj_qkv (all q, all k, all v: the conv's channels),
  in_proj_z, in_proj_b and in_proj_a, which are the engine's attn_qkv, attn_gate, ssm_beta and ssm_alpha as they
  stand (no regrouping by key head);
- the MLP is dense on every layer (qwen3_5) or the mixture of experts on every layer (qwen3_5_moe: softmax router,
  top `num_experts_per_tok` always renormalised, one shared expert gated by sigmoid(shared_expert_gate . x));
- RoPE is interleaved multimodal RoPE (mrope_section [11, 11, 10] over the rotated half-dims). fak serves text,
  whose three position streams (time, height, width) are the one position, so it is the plain partial RoPE of
  Qwen3-Next: the sections only choose which stream each frequency reads.

HuggingFace: `model_type` qwen3_5_text / qwen3_5_moe_text (a ...ForCausalLM, `model.layers.*`) or qwen3_5 /
qwen3_5_moe (the published ...ForConditionalGeneration: the decoder's config in `text_config`, its tensors under
`model.language_model.*`, the head tied or not as the outer config says). The vision tower (`model.visual.*`) and
the multi-token-prediction head (`mtp.*`) are not read: plain text decoding runs neither. Experts are per expert
(`mlp.experts.{e}.gate_proj.weight`…, what save_pretrained writes) or fused as the published MoE checkpoints store
them (`mlp.experts.gate_up_proj` (E, 2F, dim), gate rows first, and `mlp.experts.down_proj` (E, dim, F)).

GGUF (convert_hf_to_gguf's Qwen3_5TextModel / Qwen3_5MoeTextModel, `general.architecture` qwen35 / qwen35moe):
Qwen3-Next's keys and transforms (A_log as -exp, conv squeezed, every norm but the gated one + 1, so the file's
norm_offset is 0) plus two of its own. _LinearAttentionVReorderBase stores the value heads tiled rather than grouped
by key head (value head j reads key head j % Hk: ModelConfig.linear_v_tiled) in every per-value-head tensor, so
the file is read as it stands, no column of ssm_out moved (which no K-quant block would allow); and the MTP
layers, when kept, are extra blocks past the decoder's (`nextn_predict_layers` of `block_count`), not read here.
`rope.dimension_sections` ([11, 11, 10, 0]: which position stream each frequency reads) does not matter for text.
A qwen35moe file records no feed_forward_length (the config has no dense width): its experts' width stands in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models import qwen3moe, qwen3next
from fakcore.models.common import gguf_base, gguf_field, untie_gguf
from fakcore.models.config import ConfigError, ModelConfig
from fakcore.models.shapes import WeightError

ARCHS = ("qwen35", "qwen35moe")  # dense, MoE; the GGUF general.architecture and ModelConfig.arch alike
HF_35_LAYER = {n: c for n, c in qwen3next.HF_NEXT_LAYER.items() if "in_proj_" not in n} | {
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight", "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight", "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
}
COMPOSITE = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}  # outer model_type -> its text_config's
LANGUAGE_MODEL = "model.language_model."
NOT_READ = ("model.visual.", "mtp.", "model.mtp.")  # the vision tower, the multi-token-prediction head


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    text = dict(cfg)
    if cfg.get("model_type") in COMPOSITE:
        inner = cfg.get("text_config")
        if not isinstance(inner, Mapping):
            raise ConfigError(f"{source}: model_type {cfg['model_type']!r} without a 'text_config' object")
        # transformers ties the head as the outer model's config says (PreTrainedModel.tie_weights)
        text = dict(inner) | {"tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
                              "model_type": COMPOSITE[cfg["model_type"]]}
    moe = text.get("model_type") == "qwen3_5_moe_text"
    if moe:
        if text.get("mlp_only_layers") or text.get("decoder_sparse_step", 1) != 1:
            raise ConfigError(f"{source}: qwen3_5_moe has experts on every layer; mlp_only_layers / "
                              f"decoder_sparse_step are not its fields")
        # always renormalised (Qwen3_5MoeTopKRouter); no dense width: the experts' stands in for ffn_dim
        text |= {"norm_topk_prob": True, "intermediate_size": text.get("intermediate_size")
                 or text.get("moe_intermediate_size")}
    elif text.get("num_experts"):
        raise ConfigError(f"{source}: qwen3_5 with num_experts {text['num_experts']}: the MoE is model_type "
                          f"qwen3_5_moe(_text)")
    family = "qwen3_5_moe" if moe else "qwen3_5"
    return qwen3next.config_from_hf(text, source, arch=ARCHS[moe], family=family)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    named: dict[str, Tensor] = {}
    for name, t in tensors.items():
        if name.startswith(NOT_READ):
            continue
        named["model." + name[len(LANGUAGE_MODEL):] if name.startswith(LANGUAGE_MODEL) else name] = t
    fused = {n: t for n, t in named.items() if n.endswith((".mlp.experts.gate_up_proj", ".mlp.experts.down_proj"))}
    for name in fused:
        del named[name]
    out = qwen3next.tensors_from_hf(cfg, named, source, HF_35_LAYER)
    for name, t in fused.items():
        out |= unfuse_experts(cfg, name, t, source)
    return out


def unfuse_experts(cfg: ModelConfig, name: str, t: Tensor, source: str) -> dict[str, Tensor]:
    """A fused expert tensor of layer i as the canonical ones: gate_up_proj (E, 2F, dim) -> ffn_gate_exps (E, F, dim)
    (each expert's first F rows) and ffn_up_exps (the other F); down_proj (E, dim, F) -> ffn_down_exps as it is."""
    layer = int(name.split(".")[2])
    e, f, dim = cfg.n_experts, cfg.expert_ffn_dim, cfg.dim
    if layer >= cfg.n_layers or not cfg.sparse(layer):
        raise WeightError(f"{t.source or source}: unexpected tensor {name!r}")
    p = f"blk.{layer}."
    if name.endswith("down_proj"):
        if tuple(t.shape) != (e, dim, f):
            raise WeightError(f"{t.source or source}: tensor {name!r} has shape {tuple(t.shape)}, expected {(e, dim, f)}")
        return {p + "ffn_down_exps.weight": Tensor(p + "ffn_down_exps.weight", t.qtype, (e, dim, f), t.raw,
                                                   t.source or source)}
    if tuple(t.shape) != (e, 2 * f, dim):
        raise WeightError(f"{t.source or source}: tensor {name!r} has shape {tuple(t.shape)}, expected {(e, 2 * f, dim)}")
    rows = Tensor(name, t.qtype, (e * 2 * f, dim), t.raw, t.source or source)  # the same bytes, one row per row
    first = (np.arange(e)[:, None] * 2 * f + np.arange(f)).reshape(-1)  # each expert's gate rows
    out = {}
    for kind, index in (("gate", first), ("up", first + f)):
        part = rows.take_rows(index)
        out[p + f"ffn_{kind}_exps.weight"] = Tensor(p + f"ffn_{kind}_exps.weight", part.qtype, (e, f, dim), part.raw,
                                                    t.source or source)
    return out


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    arch = meta.get("general.architecture")
    moe = arch == "qwen35moe"
    fields = dict(meta)
    if moe and f"{arch}.feed_forward_length" not in fields:  # the converter writes none for the MoE
        fields[f"{arch}.feed_forward_length"] = gguf_field(meta, f"{arch}.expert_feed_forward_length", source)
    base = gguf_base(fields, arch, source, partial_rope=True)
    mtp = int(meta.get(f"{arch}.nextn_predict_layers", 0))
    if not 0 <= mtp < base["n_layers"]:
        raise ConfigError(f"{source}: '{arch}.nextn_predict_layers' = {mtp} of '{arch}.block_count' = {base['n_layers']}")
    base["n_layers"] -= mtp
    experts = {}
    if moe:
        experts = qwen3moe.gguf_experts(meta, tensors, arch, source, shared=True)
        if experts["shared_expert_ffn_dim"] <= 0:
            raise ConfigError(f"{source}: qwen35moe with no shared expert ('{arch}.expert_shared_feed_forward_length' "
                              f"absent or 0) is not supported")
        experts["shared_expert_gate"] = True
    elif any(n.endswith("_exps.weight") for n in tensors):
        raise ConfigError(f"{source}: a qwen35 file with expert tensors (the MoE is qwen35moe)")
    return ModelConfig(**base, qk_norm=True, attn_gate=True, tie_embeddings=untie_gguf(tensors), linear_v_tiled=True,
                       **qwen3next.gguf_linear(meta, arch, base["n_layers"], source), **experts)


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    """The decoder's blocks (an MTP block past them is dropped), post_attention_norm as ffn_norm, attn_q split."""
    kept = {n: t for n, t in tensors.items() if not (n.startswith("blk.") and int(n.split(".")[1]) >= cfg.n_layers)}
    return qwen3next.tensors_from_gguf(cfg, kept, source)
