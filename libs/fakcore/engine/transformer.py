"""The decoder-only transformer, written once for every family against the backend interface.

Weights use llama.cpp's GGUF tensor names as the canonical names (`blk.3.attn_q.weight`); each family file
translates its checkpoint's names into these and says which optional parts it has (biases, qk-norm,
sandwich norms). Everything a family varies is a field of ModelConfig, so the block below reads like the
papers: x = x + attn(norm(x)); x = x + mlp(norm(x)).

The classic decoders vary that block in four places, each a config field: LayerNorm instead of RMSNorm
(`norm`), a parallel residual that feeds attention and the MLP the same input (`parallel_residual`), RoPE on
the leading `rope_dim` dims of each head only, and Granite's multipliers on block outputs and logits. The ops
they need beyond the common ones (`layernorm`, `activation`, `scale`, a partial `rope`) are checked on the
backend when the Transformer is built, so a backend without them fails there, by name, not mid-forward.

MPT puts positions into attention instead of the keys: ALiBi (ModelConfig.alibi_max_bias) skips RoPE and hands
the backend's `attention` each query head's slope (`alibi=`, ModelConfig.alibi_slopes); such a model has no
RoPE tables (`Transformer.rope` is empty), so a shift eviction has no key to re-rotate. Its `clip_qkv` clamps
the projections (`clamp`). Both are checked on the backend like the ops above.

gpt-oss adds a learned logit per query head to each softmax's denominator (attention sinks: `attention(…,
sinks=)`, backend feature "sinks"), biases on the router and on every expert, top-k before the softmax
(ModelConfig.moe_topk_softmax) and its clamped SwiGLU (`swiglu_oai`); a backend without them fails at build.

A mixture-of-experts MLP (ModelConfig.n_experts) keeps every expert as its own resident matrices (split from
llama.cpp's stacked `ffn_*_exps` tensors, zero-copy), so it runs on any backend's `matrix` / `linear`. The
router's top-k choice and the weighted sum of the experts' outputs are host arithmetic (numpy f32) on
`to_host` rows: the sum visits a token's experts in ascending expert order whatever else is in the batch, so
a batch-invariant backend stays batch-invariant. A shared expert (ModelConfig.shared_expert_ffn_dim: Qwen2-MoE,
GraniteMoeShared) is one more resident gated MLP every token runs, added after the routed sum, times
sigmoid(shared_gate @ h) where the family gates it (shared_expert_gate); row by row, so no less batch-invariant.
A model may mix dense and sparse layers (ModelConfig.dense_layers: Qwen-MoE's mlp_only_layers): a dense layer
has the plain MLP's tensors, no router.

Qwen3-Next is a hybrid: its linear layers (ModelConfig.linear_layers) replace attention with a Gated DeltaNet
(engine/deltanet.py), whose state per sequence lives in the cache's `recurrent` (with checkpoints every
`checkpoint_every` positions, what exact eviction restarts from); only the attention layers keep keys and values
(ModelConfig.layer_kv: their layer in the cache). Its attention layers gate their output per channel
(attn_gate: o * sigmoid(attn_gate @ x)). Both are host arithmetic on `to_host` rows, so a backend whose
activations are not host arrays says so by lacking `recurrent_features` and fails at build.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fakcore.engine import deltanet
from fakcore.engine.backend import Backend, BackendError, Segment
from fakcore.formats.tensor import Tensor
from fakcore.models.config import ModelConfig, RopeScaling
from fakcore.models.shapes import check_tensors


@dataclass
class Expert:
    """One expert of a mixture-of-experts MLP: a gated MLP of width expert_ffn_dim."""

    w_gate: Any  # (expert_ffn_dim, dim)
    w_up: Any  # (expert_ffn_dim, dim)
    w_down: Any  # (dim, expert_ffn_dim)
    w_gate_up: Any = None  # (2*expert_ffn_dim, dim), replaces w_gate, w_up where the backend fuses
    b_gate: Any = None  # (expert_ffn_dim,)  expert_bias (gpt-oss)
    b_up: Any = None  # (expert_ffn_dim,)    expert_bias
    b_down: Any = None  # (dim,)             expert_bias
    b_gate_up: Any = None  # (2*expert_ffn_dim,) with w_gate_up and expert_bias


@dataclass
class LayerWeights:
    attn_norm: Any  # (dim,)                   None with post_norm
    wq: Any  # (n_heads*head_dim, dim)
    wk: Any  # (n_kv_heads*head_dim, dim)
    wv: Any  # (n_kv_heads*head_dim, dim)
    wo: Any  # (dim, n_heads*head_dim)
    ffn_norm: Any  # (dim,)                    None with post_norm
    w_gate: Any  # (ffn_dim, dim)              None with n_experts or a plain MLP
    w_up: Any  # (ffn_dim, dim)                None with n_experts
    w_down: Any  # (dim, ffn_dim)              None with n_experts
    bq: Any = None  # (n_heads*head_dim,)      qkv_bias
    bk: Any = None  # (n_kv_heads*head_dim,)   qkv_bias
    bv: Any = None  # (n_kv_heads*head_dim,)   qkv_bias
    q_norm: Any = None  # (head_dim,)           qk_norm; (n_heads*head_dim,) with qk_norm_full
    k_norm: Any = None  # (head_dim,)           qk_norm; (n_kv_heads*head_dim,) with qk_norm_full
    post_attn_norm: Any = None  # (dim,)        sandwich_norm, post_norm
    post_ffn_norm: Any = None  # (dim,)         sandwich_norm, post_norm
    router: Any = None  # (n_experts, dim)      n_experts
    experts: list[Expert] | None = None  # (n_experts,)  n_experts
    shared: Expert | None = None  # width shared_expert_ffn_dim   shared_expert_ffn_dim: every token's expert
    shared_gate: Any = None  # (1, dim)           shared_expert_gate; None: the shared expert ungated
    # A backend that can (Backend.fuse) runs q/k/v and gate/up as one matmul each: rows stacked.
    wqkv: Any = None  # ((n_heads + 2*n_kv_heads)*head_dim, dim), replaces wq, wk, wv
    bqkv: Any = None
    w_gate_up: Any = None  # (2*ffn_dim, dim), replaces w_gate, w_up
    attn_norm_b: Any = None  # (dim,)           norm_bias
    ffn_norm_b: Any = None  # (dim,)            norm_bias
    bo: Any = None  # (dim,)                    attn_out_bias
    b_up: Any = None  # (ffn_dim,)              mlp_bias
    b_gate: Any = None  # (ffn_dim,)            none for a dense MLP (the field an Expert's bias shares)
    b_gate_up: Any = None  # (2*ffn_dim,)       none for a dense MLP
    b_down: Any = None  # (dim,)                mlp_bias
    sinks: Any = None  # (n_heads,) f32 host     attn_sinks (gpt-oss)
    router_b: Any = None  # (n_experts,)        router_bias (gpt-oss)
    wq_gate: Any = None  # (n_heads*head_dim, dim)  attn_gate (Qwen3-Next)
    linear: deltanet.DeltaNetWeights | None = None  # a linear layer's (ModelConfig.linear_layers); no wq…wo then


@dataclass
class Weights:
    tok_embd: Any  # (vocab, dim)
    output_norm: Any  # (dim,)
    output: Any  # (vocab, dim); the embedding table itself when tied
    layers: list[LayerWeights]
    output_norm_b: Any = None  # (dim,)  norm_bias


def load_weights(cfg: ModelConfig, tensors: Mapping[str, Tensor], backend: Backend, source: str) -> Weights:
    check_tensors(cfg, tensors, source)
    off = cfg.norm_offset

    def opt(name: str, kind: str) -> Any:
        if name not in tensors:
            return None
        return backend.matrix(tensors[name]) if kind == "m" else backend.vector(tensors[name], off if kind == "n" else 0.0)

    def experts(i: int, p: str) -> list[Expert] | None:
        if not cfg.sparse(i):
            return None
        gate, up, down = (split_experts(tensors[p + f"ffn_{n}_exps.weight"]) for n in ("gate", "up", "down"))
        out = [Expert(backend.matrix(g), backend.matrix(u), backend.matrix(d)) for g, u, d in zip(gate, up, down, strict=True)]
        if cfg.expert_bias:  # one (n_experts, width) tensor per kind: row e is expert e's bias
            for kind in ("gate", "up", "down"):
                for m, b in zip(out, split_experts(tensors[p + f"ffn_{kind}_exps.bias"]), strict=True):
                    setattr(m, f"b_{kind}", backend.vector(b))
        return out

    def shared(i: int, p: str) -> Expert | None:
        if not (cfg.shared_expert_ffn_dim and cfg.sparse(i)):
            return None
        return Expert(*(backend.matrix(tensors[p + f"ffn_{n}_shexp.weight"]) for n in ("gate", "up", "down")))

    def shared_gate(i: int, p: str) -> Any:
        if not (cfg.shared_expert_gate and cfg.sparse(i)):
            return None
        t = tensors[p + "ffn_gate_inp_shexp.weight"]  # (dim,) or (1, dim) in the file: one row of a matrix here
        return backend.matrix(Tensor(t.name, t.qtype, (1, cfg.dim), t.raw, t.source))

    layers = []
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        layers.append(LayerWeights(
            attn_norm=opt(p + "attn_norm.weight", "n"),
            wq=opt(p + "attn_q.weight", "m"), wk=opt(p + "attn_k.weight", "m"),  # none in a linear layer
            wv=opt(p + "attn_v.weight", "m"), wo=opt(p + "attn_output.weight", "m"),
            ffn_norm=opt(p + "ffn_norm.weight", "n"),
            w_gate=opt(p + "ffn_gate.weight", "m"), w_up=opt(p + "ffn_up.weight", "m"),
            w_down=opt(p + "ffn_down.weight", "m"),
            bq=opt(p + "attn_q.bias", "b"), bk=opt(p + "attn_k.bias", "b"), bv=opt(p + "attn_v.bias", "b"),
            q_norm=opt(p + "attn_q_norm.weight", "n"), k_norm=opt(p + "attn_k_norm.weight", "n"),
            post_attn_norm=opt(p + "post_attention_norm.weight", "n"), post_ffn_norm=opt(p + "post_ffw_norm.weight", "n"),
            router=opt(p + "ffn_gate_inp.weight", "m"), experts=experts(i, p), shared=shared(i, p),
            shared_gate=shared_gate(i, p),
            router_b=opt(p + "ffn_gate_inp.bias", "b"),
            sinks=tensors[p + "attn_sinks.weight"].dequantize().reshape(-1).astype(np.float32) if cfg.attn_sinks else None,
            attn_norm_b=opt(p + "attn_norm.bias", "b"), ffn_norm_b=opt(p + "ffn_norm.bias", "b"),
            bo=opt(p + "attn_output.bias", "b"), b_up=opt(p + "ffn_up.bias", "b"), b_down=opt(p + "ffn_down.bias", "b"),
            wq_gate=opt(p + "attn_gate.weight", "m") if cfg.layer_kv[i] >= 0 else None,  # a linear layer's: its z
            linear=deltanet.load_layer(tensors, p, backend) if cfg.layer_kv[i] < 0 else None,
        ))
    fuse = getattr(backend, "fuse", None)
    if fuse is not None:
        for L in layers:
            L.wqkv = None if L.linear is not None else fuse([L.wq, L.wk, L.wv])
            if L.wqkv is not None:
                L.wq = L.wk = L.wv = None
                if L.bq is not None:
                    L.bqkv = np.concatenate([L.bq, L.bk, L.bv])
            for m in [L] if L.experts is None else L.experts + ([L.shared] if L.shared is not None else []):
                if m.w_gate is None:  # a plain MLP: nothing to fuse
                    continue
                m.w_gate_up = fuse([m.w_gate, m.w_up])
                if m.w_gate_up is not None and m.b_gate is not None:
                    m.b_gate_up = np.concatenate([m.b_gate, m.b_up])
                if m.w_gate_up is not None:
                    m.w_gate = m.w_up = None
    tok_embd = backend.embedding(tensors["token_embd.weight"])
    output = backend.matrix(tensors["token_embd.weight"] if cfg.tie_embeddings else tensors["output.weight"])
    return Weights(tok_embd=tok_embd, output_norm=backend.vector(tensors["output_norm.weight"], off), output=output,
                   layers=layers, output_norm_b=opt("output_norm.bias", "b"))


def split_experts(t: Tensor) -> list[Tensor]:
    """A stacked (n_experts, rows, cols) tensor as n_experts (rows, cols) tensors: views of its bytes, still in
    its quant type (quant blocks run along the last axis, so each expert is whole blocks)."""
    n = t.shape[0]
    size = t.raw.size // n
    return [Tensor(f"{t.name}[{e}]", t.qtype, t.shape[1:], t.raw[e * size:(e + 1) * size], t.source) for e in range(n)]


class Transformer:
    """A config, its weights resident on a backend, and the forward pass."""

    def __init__(self, cfg: ModelConfig, weights: Weights, backend: Backend,
                 checkpoint_every: int = deltanet.CHECKPOINT_EVERY):
        """checkpoint_every: a hybrid model's caches copy their linear layers' state every this many positions;
        exact eviction restarts from the latest copy at or before the span (smaller: less recompute, more memory)."""
        self.cfg, self.w, self.be = cfg, weights, backend
        self.checkpoint_every = checkpoint_every
        # a linear layer's index among the linear layers: its slot in the cache's RecurrentState
        self.linear_index = [sum(cfg.linear_layers[:i]) if cfg.linear_layers else -1 for i in range(cfg.n_layers)]
        check_backend(cfg, backend)
        tables: dict[tuple[float, bool], Any] = {}
        self.rope = []  # one table per layer; none with ALiBi (no RoPE)
        # ALiBi: the (n_heads,) slopes the attention adds m_h * (j - i) with
        self.alibi = np.asarray(cfg.alibi_slopes, np.float32) if cfg.alibi_max_bias else None
        for i in range(cfg.n_layers if self.alibi is None else 0):
            theta = cfg.layer_rope_theta[i]
            # Gemma3 scales RoPE only on its global layers; local layers keep the plain base.
            scaled = not (cfg.layer_window[i] and cfg.rope_local_theta)
            key = (theta, scaled)
            if key not in tables:
                tables[key] = backend.rope_table(cfg.rotary_dim, theta, cfg.rope_scaling if scaled else RopeScaling("none"))
            self.rope.append(tables[key])
        # dynamic NTK rotates every token by a base that depends on the sequence's current length once it
        # passes the original context: no cached key would stay valid, so fak serves the original context only
        dynamic = cfg.rope_scaling.kind == "dynamic"
        self.max_positions = cfg.rope_scaling.original_context if dynamic else 0  # 0: no limit here

    def new_cache(self) -> Any:
        cache = self.be.new_cache(self.cfg)
        if any(self.cfg.linear_layers):
            cache.recurrent = deltanet.RecurrentState.for_model(self.cfg, self.checkpoint_every)
        return cache

    def forward(self, tokens: np.ndarray, segments: list[Segment], logit_rows: np.ndarray | None = None,
                capture: list | None = None, host: bool = True) -> Any:
        """Run `tokens` (T,) through every layer, appending to each segment's cache.

        Returns host logits (len(logit_rows), vocab) for the requested rows (default: every row); with
        `host` False the backend's own array of them (for Backend.sample: only token ids leave a device).
        Caches are committed here. `capture`, if a list, receives the hidden state after the embedding and
        each layer."""
        cfg, be, w = self.cfg, self.be, self.w
        positions = self.positions(len(tokens), segments)

        x = be.embed(w.tok_embd, tokens, cfg.embed_scale)  # (T, dim)
        if capture is not None:
            capture.append(be.to_host(x))
        for i, L in enumerate(w.layers):
            x = self.block(x, L, i, segments, positions)
            if capture is not None:
                capture.append(be.to_host(x))

        for seg in segments:
            seg.cache.commit(tokens[seg.rows].tolist())
        if logit_rows is not None:
            x = be.take_rows(x, logit_rows)
        logits = be.linear(self.norm(x, w.output_norm, w.output_norm_b), w.output)  # (R, vocab)
        if cfg.logit_scale != 1.0:  # Granite: logits / logits_scaling
            logits = be.scale(logits, 1.0 / cfg.logit_scale)
        if cfg.final_softcap:
            logits = be.softcap(logits, cfg.final_softcap)
        return be.to_host(logits) if host else logits

    def positions(self, T: int, segments: list[Segment]) -> np.ndarray:
        """Each of the batch's T rows' position in its sequence (T,)."""
        positions = np.empty(T, np.int64)
        for seg in segments:
            positions[seg.rows] = np.arange(seg.cache.length, seg.cache.length + seg.rows.stop - seg.rows.start)
        if self.max_positions and T and int(positions.max()) >= self.max_positions:
            raise BackendError(f"{self.cfg.arch}: position {int(positions.max())} is past the {self.max_positions} positions "
                               f"dynamic NTK RoPE keeps the plain rotation for; beyond them its base grows with the "
                               f"sequence length, which re-rotates every cached key (not supported)")
        return positions

    def block(self, x: Any, L: LayerWeights, i: int, segments: list[Segment], positions: np.ndarray) -> Any:
        """Layer i: (T, dim) residual stream in, (T, dim) out."""
        cfg, be = self.cfg, self.be
        block_in = x
        # -- attention: x = x + attn(norm(x))
        h = x if cfg.post_norm else self.norm(x, L.attn_norm, L.attn_norm_b)
        if L.linear is not None:  # Qwen3-Next: a Gated DeltaNet in place of attention
            o = deltanet.gated_deltanet(be, cfg, h, L.linear, segments, self.linear_index[i])  # (T, dim)
        else:
            o = self.attend(h, L, i, segments, positions)  # (T, dim)
        if cfg.sandwich_norm or cfg.post_norm:
            o = be.rmsnorm(o, L.post_attn_norm, cfg.norm_eps)
        x = be.add(x, self.residual(o))
        # -- MLP: x = x + down(act(gate(norm(x))) * up(norm(x)))
        if cfg.parallel_residual:  # x = x + attn(norm(x)) + mlp(ffn_norm(x)): the MLP reads the block's input
            h = h if cfg.shared_ffn_norm else self.norm(block_in, L.ffn_norm, L.ffn_norm_b)
        else:
            h = x if cfg.post_norm else self.norm(x, L.ffn_norm, L.ffn_norm_b)
        m = self.moe(h, L) if L.experts is not None else self.mlp(h, L)
        if cfg.sandwich_norm or cfg.post_norm:
            m = be.rmsnorm(m, L.post_ffn_norm, cfg.norm_eps)
        return be.add(x, self.residual(m))

    def hidden(self, sequences: list[np.ndarray], layer: int) -> list[np.ndarray]:
        """The residual stream after `layer` layers (0: the embedding) of each token sequence, read in one batch,
        each on a cache of its own that is thrown away: [(T_i, dim) host arrays]. What screening's probe reads."""
        if not 0 <= layer <= self.cfg.n_layers:
            raise BackendError(f"{self.cfg.arch} has {self.cfg.n_layers} layers: there is no hidden state after layer {layer}")
        if not sequences:
            return []
        cuts = np.cumsum([0] + [len(s) for s in sequences])
        segments = [Segment(self.new_cache(), slice(int(a), int(b))) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        positions = self.positions(int(cuts[-1]), segments)
        x = self.be.embed(self.w.tok_embd, np.concatenate(sequences).astype(np.int64), self.cfg.embed_scale)  # (T, dim)
        for i, L in enumerate(self.w.layers[:layer]):
            x = self.block(x, L, i, segments, positions)
        h = self.be.to_host(x)
        return [h[seg.rows] for seg in segments]

    def attend(self, h: Any, L: LayerWeights, i: int, segments: list[Segment], positions: np.ndarray) -> Any:
        """Layer i's attention over h (T, dim), normed: q/k/v, their norms, RoPE, the cache (appended to),
        the output projection. (T, dim) out."""
        cfg, be, T = self.cfg, self.be, h.shape[0]
        if L.wqkv is not None:
            qkv = be.linear(h, L.wqkv, L.bqkv)  # (T, (H + 2*Hkv) * D)
            qd, kd = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
            q, k, v = qkv[:, :qd], qkv[:, qd:qd + kd], qkv[:, qd + kd:]
        else:
            q, k, v = be.linear(h, L.wq, L.bq), be.linear(h, L.wk, L.bk), be.linear(h, L.wv, L.bv)
        if cfg.clip_qkv:  # MPT: every projection clamped to [-clip, clip]
            q, k, v = (be.clamp(t, cfg.clip_qkv) for t in (q, k, v))
        if cfg.qk_norm_full:  # OLMo2: one norm over all heads, before the split into heads
            q, k = be.rmsnorm(q, L.q_norm, cfg.norm_eps), be.rmsnorm(k, L.k_norm, cfg.norm_eps)
        q = q.reshape(T, cfg.n_heads, cfg.head_dim)  # (T, H, D)
        k = k.reshape(T, cfg.n_kv_heads, cfg.head_dim)  # (T, Hkv, D)
        v = v.reshape(T, cfg.n_kv_heads, cfg.head_dim)  # (T, Hkv, D)
        if cfg.qk_norm and not cfg.qk_norm_full:  # over each head (StableLM: gains of its own per head)
            q = self.norm(q, L.q_norm, None)
            k = self.norm(k, L.k_norm, None)
        k_pre = k
        if self.alibi is None:
            q = be.rope(q, positions, self.rope[i])
            k = be.rope(k, positions, self.rope[i])
        positional = {} if self.alibi is None else {"alibi": self.alibi}  # ALiBi: the bias inside attention
        if L.sinks is not None:  # gpt-oss: each head's sink logit in the softmax denominator
            positional["sinks"] = L.sinks
        a = be.attention(q, k_pre, k, v, segments, cfg.layer_kv[i], cfg.layer_window[i], cfg.scale,
                         cfg.attn_softcap, **positional)  # (T, H, D)
        a = a.reshape(T, cfg.n_heads * cfg.head_dim)
        if L.wq_gate is not None:  # Qwen3-Next: each output channel gated, a * sigmoid(gate(h))
            a = deltanet.output_gate(be.to_host(a), be.to_host(be.linear(h, L.wq_gate)))
        return be.linear(a, L.wo, L.bo)  # (T, dim)

    def norm(self, x: Any, w: Any, b: Any) -> Any:
        """The model's norm over the last axis: RMSNorm, or LayerNorm (with bias b, if any)."""
        if self.cfg.norm == "layer":
            return self.be.layernorm(x, w, b, self.cfg.norm_eps)
        return self.be.rmsnorm(x, w, self.cfg.norm_eps)

    def residual(self, y: Any) -> Any:
        """A block output on its way into the residual stream (Granite scales it)."""
        return y if self.cfg.residual_scale == 1.0 else self.be.scale(y, self.cfg.residual_scale)

    def mlp(self, h: Any, m: LayerWeights | Expert) -> Any:
        """down(act(gate(h)) * up(h)): (T, dim) -> (T, dim), a dense layer's MLP or one expert;
        down(act(up(h))) with biases for a plain one (GPT-NeoX)."""
        be = self.be
        if not self.cfg.gated_mlp:
            return be.linear(be.activation(be.linear(h, m.w_up, m.b_up), self.cfg.act), m.w_down, m.b_down)
        if m.w_gate_up is not None:
            gu = be.linear(h, m.w_gate_up, m.b_gate_up)  # (T, 2 * width): ffn_dim, expert or shared expert width
            width = gu.shape[1] // 2
            gate, up = gu[:, :width], gu[:, width:]
        else:
            gate, up = be.linear(h, m.w_gate, m.b_gate), be.linear(h, m.w_up, m.b_up)
        if self.cfg.act == "swiglu_oai":  # gpt-oss: clamped, (up + 1) * gate * sigmoid(alpha * gate)
            act = be.swiglu_oai(gate, up, self.cfg.swiglu_alpha, self.cfg.swiglu_limit)
        else:
            act = be.gated(gate, up, self.cfg.act)
        return be.linear(act, m.w_down, m.b_down)

    def moe(self, h: Any, L: LayerWeights) -> np.ndarray:
        """Sparse MoE, as HuggingFace's Qwen3-MoE block: softmax over the router's logits, the top k kept
        (renormalised to sum 1 with expert_weights_norm), each chosen expert's MLP on its tokens, the outputs
        summed weighted (gpt-oss, moe_topk_softmax: the top k logits first, a softmax over them). (T, dim) ->
        (T, dim) host array (see the module note)."""
        cfg, be = self.cfg, self.be
        logits = be.to_host(be.linear(h, L.router, L.router_b))  # (T, n_experts)
        if cfg.moe_topk_softmax:  # gpt-oss: the top k logits, then a softmax over those k
            top = np.argsort(-logits, axis=-1, kind="stable")[:, :cfg.n_experts_used]  # (T, k), highest first
            chosen = np.take_along_axis(logits, top, axis=-1)
            weights = np.exp(chosen - chosen[:, :1])  # the first is the largest
            return self.mix(h, L, top, weights / weights.sum(axis=-1, keepdims=True))
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        top = np.argsort(-probs, axis=-1, kind="stable")[:, :cfg.n_experts_used]  # (T, k), highest first
        weights = np.take_along_axis(probs, top, axis=-1)  # (T, k)
        if cfg.expert_weights_norm:
            weights /= weights.sum(axis=-1, keepdims=True)
        return self.mix(h, L, top, weights)

    def mix(self, h: Any, L: LayerWeights, top: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """sum_k weights[t, k] * expert top[t, k](h[t]), plus the shared expert's mlp(h[t]) (times
        sigmoid(shared_gate . h[t]) where gated): top, weights (T, k) -> (T, dim) host array."""
        be = self.be
        out = np.zeros((len(top), self.cfg.dim), np.float32)
        for e in np.unique(top):  # ascending: every token sums its experts in the same order
            rows, slot = np.nonzero(top == e)
            y = be.to_host(self.mlp(be.take_rows(h, rows), L.experts[e]))  # (len(rows), dim)
            out[rows] += y * weights[rows, slot, None]
        if L.shared is not None:  # every token's shared expert, after the routed sum (HuggingFace's order)
            y = be.to_host(self.mlp(h, L.shared))  # (T, dim)
            if L.shared_gate is not None:  # Qwen2-MoE: one sigmoid gate per token
                g = be.to_host(be.linear(h, L.shared_gate))  # (T, 1)
                y = y * (np.float32(1) / (np.float32(1) + np.exp(-g)))
            out += y
        return out


def check_backend(cfg: ModelConfig, backend: Backend) -> None:
    """The ops beyond the common ones that `cfg` needs, present on `backend` (else BackendError naming them)."""
    needs = {"layernorm": cfg.norm == "layer", "activation": not cfg.gated_mlp,
             "scale": cfg.residual_scale != 1.0 or cfg.logit_scale != 1.0, "clamp": cfg.clip_qkv > 0}
    missing = [op for op, needed in needs.items() if needed and not hasattr(backend, op)]
    if cfg.alibi_max_bias and "alibi" not in getattr(backend, "attention_features", frozenset()):
        missing.append("alibi attention bias")
    if cfg.attn_sinks and "sinks" not in getattr(backend, "attention_features", frozenset()):
        missing.append("attention sinks (gpt-oss)")
    if cfg.act == "swiglu_oai" and not hasattr(backend, "swiglu_oai"):
        missing.append("swiglu_oai (gpt-oss's clamped SwiGLU experts)")
    hybrid = any(cfg.linear_layers) or cfg.attn_gate
    if hybrid and "gated_deltanet" not in getattr(backend, "recurrent_features", frozenset()):
        missing.append("Gated DeltaNet linear attention and attention output gates (host arithmetic on its activations)")
    features = getattr(backend, "rope_features", frozenset())
    if cfg.rotary_dim != cfg.head_dim and "partial" not in features:
        missing.append(f"partial rope (rope_dim {cfg.rotary_dim} of head_dim {cfg.head_dim})")
    if cfg.rope_scaling.attention_factor != 1.0 and "attention_factor" not in features:
        missing.append(f"rope attention factor ({cfg.rope_scaling.kind})")
    if missing:
        raise BackendError(f"the {backend.name} backend cannot run {cfg.arch}: it has no {', '.join(missing)}")
