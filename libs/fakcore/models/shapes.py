"""The tensors a ModelConfig implies, under canonical (llama.cpp) names, and the check a checkpoint passes.

Every family file turns its checkpoint's names into these; `check_tensors` then fails loudly, naming the
file and the tensor, on anything missing, extra or misshapen, before a single weight reaches a backend.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fakcore.formats.tensor import FormatError, Tensor
from fakcore.models.config import ModelConfig


class WeightError(FormatError):
    """A checkpoint's tensors do not match its architecture (missing, extra, or wrong shape)."""


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every canonical tensor the config implies, with its row-major shape."""
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (cfg.vocab_size, cfg.dim), "output_norm.weight": (cfg.dim,)}
    if cfg.norm_bias:
        shapes["output_norm.bias"] = (cfg.dim,)
    if not cfg.tie_embeddings:
        shapes["output.weight"] = (cfg.vocab_size, cfg.dim)
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        if cfg.layer_kv[i] < 0:  # a linear layer (Qwen3-Next): a Gated DeltaNet in place of attention
            shapes |= linear_shapes(cfg, p)
        else:
            shapes |= {p + "attn_q.weight": (q, cfg.dim), p + "attn_k.weight": (kv, cfg.dim),
                       p + "attn_v.weight": (kv, cfg.dim), p + "attn_output.weight": (cfg.dim, q)}
            if cfg.attn_gate:
                shapes[p + "attn_gate.weight"] = (q, cfg.dim)
        norms = [] if cfg.post_norm else ["attn_norm"] if cfg.shared_ffn_norm else ["attn_norm", "ffn_norm"]
        for norm in norms:
            shapes[p + norm + ".weight"] = (cfg.dim,)
            if cfg.norm_bias:
                shapes[p + norm + ".bias"] = (cfg.dim,)
        if cfg.sparse(i):  # experts stacked on a first axis, as llama.cpp stores them
            e, f = cfg.n_experts, cfg.expert_ffn_dim
            shapes |= {p + "ffn_gate_inp.weight": (e, cfg.dim), p + "ffn_gate_exps.weight": (e, f, cfg.dim),
                       p + "ffn_up_exps.weight": (e, f, cfg.dim), p + "ffn_down_exps.weight": (e, cfg.dim, f)}
            if cfg.shared_expert_ffn_dim:  # the shared expert, a gated MLP of its own width
                s = cfg.shared_expert_ffn_dim
                shapes |= {p + "ffn_gate_shexp.weight": (s, cfg.dim), p + "ffn_up_shexp.weight": (s, cfg.dim),
                           p + "ffn_down_shexp.weight": (cfg.dim, s)}
            if cfg.shared_expert_gate:  # (dim,) as llama.cpp loads it; a (1, dim) file passes too (the check below)
                shapes[p + "ffn_gate_inp_shexp.weight"] = (cfg.dim,)
        else:
            shapes |= {p + "ffn_up.weight": (cfg.ffn_dim, cfg.dim), p + "ffn_down.weight": (cfg.dim, cfg.ffn_dim)}
            if cfg.gated_mlp:
                shapes[p + "ffn_gate.weight"] = (cfg.ffn_dim, cfg.dim)
        if cfg.mlp_bias:
            shapes |= {p + "ffn_up.bias": (cfg.ffn_dim,), p + "ffn_down.bias": (cfg.dim,)}
        if cfg.qkv_bias:
            shapes |= {p + "attn_q.bias": (q,), p + "attn_k.bias": (kv,), p + "attn_v.bias": (kv,)}
        if cfg.attn_out_bias:
            shapes[p + "attn_output.bias"] = (cfg.dim,)
        if cfg.qk_norm and cfg.layer_kv[i] >= 0:
            qn, kn = ((q,), (kv,)) if cfg.qk_norm_full else ((cfg.head_dim,), (cfg.head_dim,))
            if cfg.qk_norm_per_head:  # one row of gains per head
                qn, kn = (cfg.n_heads, cfg.head_dim), (cfg.n_kv_heads, cfg.head_dim)
            shapes |= {p + "attn_q_norm.weight": qn, p + "attn_k_norm.weight": kn}
        if cfg.sandwich_norm or cfg.post_norm:
            shapes |= {p + "post_attention_norm.weight": (cfg.dim,), p + "post_ffw_norm.weight": (cfg.dim,)}
        if cfg.attn_sinks:
            shapes[p + "attn_sinks.weight"] = (cfg.n_heads,)
        if cfg.router_bias:
            shapes[p + "ffn_gate_inp.bias"] = (cfg.n_experts,)
        if cfg.expert_bias:
            e, f = cfg.n_experts, cfg.expert_ffn_dim
            shapes |= {p + "ffn_gate_exps.bias": (e, f), p + "ffn_up_exps.bias": (e, f), p + "ffn_down_exps.bias": (e, cfg.dim)}
    return shapes


def linear_shapes(cfg: ModelConfig, p: str) -> dict[str, tuple[int, ...]]:
    """A Gated DeltaNet layer's tensors (engine/deltanet.py), llama.cpp's names; `p` the layer's prefix ("blk.0.")."""
    hk, hv, dk, dv = cfg.linear_k_heads, cfg.linear_v_heads, cfg.linear_k_dim, cfg.linear_v_dim
    channels = 2 * hk * dk + hv * dv  # the conv runs over q, k and v
    return {p + "attn_qkv.weight": (channels, cfg.dim), p + "attn_gate.weight": (hv * dv, cfg.dim),
            p + "ssm_beta.weight": (hv, cfg.dim), p + "ssm_alpha.weight": (hv, cfg.dim),
            p + "ssm_conv1d.weight": (channels, cfg.linear_conv), p + "ssm_a": (hv,), p + "ssm_dt.bias": (hv,),
            p + "ssm_norm.weight": (dv,), p + "ssm_out.weight": (cfg.dim, hv * dv)}


def check_tensors(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> None:
    """Fail loudly, naming the file and the tensor, on a missing, extra or wrongly shaped tensor."""
    shapes = expected_shapes(cfg)
    missing = sorted(set(shapes) - set(tensors))
    if missing:
        raise WeightError(f"{source}: missing tensor {missing[0]!r}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    extra = sorted(set(tensors) - set(shapes))
    if extra:
        raise WeightError(f"{source}: unexpected tensor {extra[0]!r} for {cfg.arch}" + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))
    for name, shape in shapes.items():
        got = tuple(tensors[name].shape)
        if got != shape and not (len(shape) == 1 and int(np.prod(got)) == shape[0]):
            raise WeightError(f"{source}: tensor {name!r} has shape {got}, expected {shape}")
