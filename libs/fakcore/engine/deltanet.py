"""Gated DeltaNet, the linear-attention layer of Qwen3-Next's hybrid decoder, and the state it keeps per sequence.

A linear layer keeps no keys and values. Its memory of the sequence is a fixed-size state:
- the causal depthwise conv's last K-1 inputs (K = linear_conv), (K-1, C) with C = 2*Hk*dk + Hv*dv;
- per value head a (dk, dv) matrix S, updated by the gated delta rule at every token.

One token of one layer, as HuggingFace's Qwen3NextGatedDeltaNet (its torch_recurrent_gated_delta_rule):

    q, k, v = attn_qkv @ x       all heads' q (Hk*dk), then k (Hk*dk), then v (Hv*dv); r = Hv / Hk
    z = attn_gate @ x            (Hv*dv) the output gate
    b, a = ssm_beta @ x, ssm_alpha @ x                   (Hv) each
    q, k, v = silu(conv1d([conv state; q k v]))          the conv over the last K inputs of each channel
    q, k = l2norm(q), l2norm(k); q /= sqrt(dk)            value head j reads key head j // r (key_heads)
    g = A * softplus(a + dt_bias), A = -exp(A_log);  beta = sigmoid(b)
    S = exp(g) S;  S += k (beta (v - k^T S))^T;  o = q^T S                                per value head
    y = ssm_out @ (rmsnorm(o) * w * silu(z))             RMSNormGated over dv, its gains w plain (not 1 + w)

The projections run on the backend (`linear`: the numba backend's resident matrices). The rest is host float32
(`delta_scan` in numpy; the numba backend's `deltanet_scan`, engine-cpu's deltanet.py, the same in compiled
kernels, 29x faster at Qwen3-Next-80B's layer shape, T=512, on 2 Xeon cores), token by token in a fixed order, every array the same shape at every step, so what a token gets never
depends on how the prompt was split into forward passes or what else is in the batch: the condition exact
eviction needs (docs/architecture.md §3). HuggingFace's prefill runs the chunked algorithm
(torch_chunk_gated_delta_rule), the same sums in another order: parity with it is to a tolerance, not bits.

The state sums up every position before it, so no span of it can be cut out. Exact eviction restores a
checkpoint instead, the state of every linear layer after a position that is a multiple of `every`, at or
before the span, and recomputes from there (engine/eviction.py); shift eviction has nothing it could shift.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models.config import ModelConfig

if TYPE_CHECKING:
    from fakcore.engine.backend import Act, Backend, Segment

# The default spacing of state checkpoints, in positions (Transformer's checkpoint_every). Each checkpoint copies
# every linear layer's conv state and S (Qwen3-Next-80B: 36 layers x 32 heads x 128 x 128 f32, about 75 MB); an
# exact eviction recomputes up to this many positions more than the span's suffix. KVCache.nbytes counts them, so
# the pool's budget does.
CHECKPOINT_EVERY = 256
L2_EPS = np.float32(1e-6)  # HuggingFace's (and FLA's) l2norm epsilon, fixed


@dataclass
class DeltaNetWeights:
    """One linear layer's weights: the three projections on the backend, the small rest on the host (f32)."""

    w_in: Any  # (C + Hv*dv, dim) attn_qkv and attn_gate stacked (one matmul where the backend fuses), else attn_qkv
    w_z: Any  # (Hv*dv, dim) attn_gate, or None when w_in holds it
    w_ba: Any  # (2*Hv, dim) ssm_beta and ssm_alpha stacked, else ssm_beta
    w_a: Any  # (Hv, dim) ssm_alpha, or None when w_ba holds it
    conv: np.ndarray  # (K, C) ssm_conv1d transposed: row j holds tap j of every channel (oldest input first)
    a: np.ndarray  # (Hv,) ssm_a: A = -exp(A_log), each value head's decay rate
    dt_bias: np.ndarray  # (Hv,) ssm_dt.bias
    norm: np.ndarray  # (dv,) ssm_norm: RMSNormGated gains
    w_out: Any  # (dim, Hv*dv) ssm_out


def conv_channels(cfg: ModelConfig) -> int:
    """C: the conv runs over q, k and v (not z)."""
    return 2 * cfg.linear_k_heads * cfg.linear_k_dim + cfg.linear_v_heads * cfg.linear_v_dim


def key_heads(cfg: ModelConfig) -> np.ndarray:
    """(Hv,) the key head each value head reads: j // r as HuggingFace orders the value heads (grouped by key
    head), j % Hk in a qwen35 GGUF (llama.cpp's converter tiles them: ModelConfig.linear_v_tiled)."""
    hk, hv = cfg.linear_k_heads, cfg.linear_v_heads
    return np.arange(hv, dtype=np.int64) % hk if cfg.linear_v_tiled else grouped_heads(hk, hv)


def grouped_heads(hk: int, hv: int) -> np.ndarray:
    """(Hv,) value head j reads key head j // (Hv / Hk): HuggingFace's order, a scan's default."""
    return np.arange(hv, dtype=np.int64) // (hv // hk)


def load_layer(tensors: Mapping[str, Tensor], p: str, backend: Backend) -> DeltaNetWeights:
    def host(name: str) -> np.ndarray:
        return np.ascontiguousarray(tensors[p + name].dequantize(), np.float32)

    channels = tensors[p + "ssm_conv1d.weight"].shape[0]
    w_in, w_z, w_ba, w_a = (backend.matrix(tensors[p + n + ".weight"]) for n in ("attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha"))
    fuse = getattr(backend, "fuse", None)
    if fuse is not None and (fused := fuse([w_in, w_z])) is not None:
        w_in, w_z = fused, None
    if fuse is not None and (fused := fuse([w_ba, w_a])) is not None:
        w_ba, w_a = fused, None
    return DeltaNetWeights(w_in=w_in, w_z=w_z, w_ba=w_ba, w_a=w_a,
                           conv=np.ascontiguousarray(host("ssm_conv1d.weight").reshape(channels, -1).T),
                           a=host("ssm_a").reshape(-1), dt_bias=host("ssm_dt.bias").reshape(-1),
                           norm=host("ssm_norm.weight").reshape(-1), w_out=backend.matrix(tensors[p + "ssm_out.weight"]))


class RecurrentState:
    """Every linear layer's state of one sequence, and its checkpoints; held by the sequence's KVCache
    (`KVCache.recurrent`), which moves it with its keys and values.

    A forward pass reads the committed state and sets the next one aside (`write`); the cache's `commit` makes
    it current, as committing makes the pass's new KV rows part of the cache. A checkpoint is a copy of every
    linear layer's state after a position that is a multiple of `every` (position 0, the zero state, is always
    there); checkpoint arrays are never changed in place, so copies of a cache share them."""

    def __init__(self, n_layers: int, conv_shape: tuple[int, int], ssm_shape: tuple[int, int, int], every: int):
        if every < 1:
            raise ValueError(f"state checkpoints every {every} positions: must be >= 1")
        self.every = every
        self.length = 0  # positions the committed state has seen
        self.conv = np.zeros((n_layers, *conv_shape), np.float32)  # (Lr, K-1, C) each conv's last K-1 inputs
        self.ssm = np.zeros((n_layers, *ssm_shape), np.float32)  # (Lr, Hv, dk, dv) each value head's S
        self.checkpoints: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # position -> (conv, ssm) of every layer
        self._next: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # layer -> its state after the pass in flight
        self._next_checkpoints: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    @classmethod
    def for_model(cls, cfg: ModelConfig, every: int) -> RecurrentState:
        k, hv, dk, dv = cfg.linear_conv, cfg.linear_v_heads, cfg.linear_k_dim, cfg.linear_v_dim
        return cls(sum(cfg.linear_layers), (k - 1, conv_channels(cfg)), (hv, dk, dv), every)

    # -- the forward pass ----------------------------------------------------------------------------
    def write(self, layer: int, conv: np.ndarray, ssm: np.ndarray,
              checkpoints: Mapping[int, tuple[np.ndarray, np.ndarray]]) -> None:
        """Linear layer `layer`'s state after the pass in flight, and its states at the checkpoints it passed."""
        self._next[layer] = (conv, ssm)
        for pos, (c, s) in checkpoints.items():
            if pos not in self._next_checkpoints:
                self._next_checkpoints[pos] = (np.zeros_like(self.conv), np.zeros_like(self.ssm))
            self._next_checkpoints[pos][0][layer], self._next_checkpoints[pos][1][layer] = c, s

    def commit(self, length: int) -> None:
        for layer, (c, s) in self._next.items():
            self.conv[layer], self.ssm[layer] = c, s
        self.checkpoints.update(self._next_checkpoints)
        self._next, self._next_checkpoints = {}, {}
        self.length = length

    # -- the KV-MMU's moves --------------------------------------------------------------------------
    def restorable(self, n: int) -> int:
        """The longest prefix of at most n positions this state can go back to: its own length, else the
        latest checkpoint (0 at worst)."""
        if n >= self.length:
            return self.length
        return max((p for p in self.checkpoints if p <= n), default=0)

    def restore(self, n: int) -> None:
        """Go back to the state after position n: a checkpoint, 0 or the current length (else ValueError).
        Later checkpoints go."""
        if n == self.length:
            return
        if n != 0 and n not in self.checkpoints:
            raise ValueError(f"no state checkpoint at position {n} (checkpoints every {self.every}; restorable: "
                             f"{self.restorable(n)})")
        if n == 0:
            self.conv, self.ssm = np.zeros_like(self.conv), np.zeros_like(self.ssm)
        else:
            self.conv, self.ssm = (a.copy() for a in self.checkpoints[n])
        self.checkpoints = {p: c for p, c in self.checkpoints.items() if p <= n}
        self.length = n

    def copy_prefix(self, src: RecurrentState, n: int) -> None:
        """Take src's state after position n (its length or a checkpoint) and its checkpoints up to n."""
        assert self.conv.shape == src.conv.shape and self.ssm.shape == src.ssm.shape
        self.every = src.every
        self.checkpoints = {p: c for p, c in src.checkpoints.items() if p <= n}
        self.length = src.length
        self.conv, self.ssm = src.conv.copy(), src.ssm.copy()
        self.restore(n)

    # -- views ---------------------------------------------------------------------------------------
    def update_digest(self, h: Any) -> None:
        """Add the committed state and every checkpoint to the hash `h` (KVCache.digest)."""
        h.update(self.conv.tobytes())
        h.update(self.ssm.tobytes())
        for p in sorted(self.checkpoints):
            h.update(p.to_bytes(8, "little"))
            for a in self.checkpoints[p]:
                h.update(a.tobytes())

    def digest(self) -> str:
        h = hashlib.sha256()
        self.update_digest(h)
        return h.hexdigest()

    def layer_dev(self, other: RecurrentState) -> list[float]:
        """Per linear layer, max |Δ| over its conv state and S against `other`'s."""
        return [float(max(np.abs(self.conv[i] - other.conv[i]).max(initial=0.0),
                          np.abs(self.ssm[i] - other.ssm[i]).max(initial=0.0))) for i in range(len(self.conv))]

    @property
    def nbytes(self) -> int:
        return self.conv.nbytes + self.ssm.nbytes + sum(c.nbytes + s.nbytes for c, s in self.checkpoints.values())


# -- the layer ---------------------------------------------------------------------------------------


def gated_deltanet(be: Backend, cfg: ModelConfig, h: Act, w: DeltaNetWeights, segments: list[Segment],
                   layer: int) -> Act:
    """Linear layer `layer` (its index among the linear layers) on every segment's rows: (T, dim) -> (T, dim).
    Each segment's cache gets its next state (RecurrentState.write), made current by the cache's commit."""
    hk, hv, dk, dv = cfg.linear_k_heads, cfg.linear_v_heads, cfg.linear_k_dim, cfg.linear_v_dim
    T, C = h.shape[0], 2 * hk * dk + hv * dv
    qkvz = be.to_host(be.linear(h, w.w_in))  # (T, C [+ Hv*dv])
    ba = be.to_host(be.linear(h, w.w_ba))  # (T, Hv [+ Hv])
    mixed = np.ascontiguousarray(qkvz[:, :C])  # (T, C): q, k, v
    z = np.ascontiguousarray((qkvz[:, C:] if w.w_z is None else be.to_host(be.linear(h, w.w_z))).reshape(T, hv, dv))
    b = np.ascontiguousarray(ba[:, :hv])
    a = np.ascontiguousarray(ba[:, hv:] if w.w_a is None else be.to_host(be.linear(h, w.w_a)))
    out = np.empty((T, hv, dv), np.float32)
    scan = getattr(be, "deltanet_scan", delta_scan)
    heads = key_heads(cfg)
    for seg in segments:
        state: RecurrentState = seg.cache.recurrent
        rows = seg.rows
        out[rows], conv, S, passed = scan(mixed[rows], z[rows], b[rows], a[rows], w.conv, w.a, w.dt_bias, w.norm,
                                          state.conv[layer], state.ssm[layer], hk, np.float32(cfg.norm_eps),
                                          seg.cache.length, state.every, heads)
        state.write(layer, conv, S, passed)
    return be.linear(out.reshape(T, hv * dv), w.w_out)


def delta_scan(mixed: np.ndarray, z: np.ndarray, b: np.ndarray, a: np.ndarray, conv_w: np.ndarray, A: np.ndarray,
               dt_bias: np.ndarray, norm: np.ndarray, conv: np.ndarray, S: np.ndarray, hk: int, eps: np.float32,
               start: int, every: int, key_head: np.ndarray | None = None,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """One sequence's T tokens through one linear layer after its projections, token by token (host f32).

    mixed (T, C): the conv's input, [q (Hk*dk); k (Hk*dk); v (Hv*dv)]; z (T, Hv, dv): the output gate; b, a
    (T, Hv): beta's and the decay's logits; conv_w (K, C), A, dt_bias (Hv,), norm (dv,): the layer's weights;
    conv (K-1, C), S (Hv, dk, dv): the state before the first token (not modified); start: the positions before
    it; key_head (Hv,): the key head each value head reads (key_heads; None: j // r). Returns (out (T, Hv, dv),
    conv, S, passed): the gated, normed outputs, the state after the last token, and the state after every
    position p in start+1 … start+T with p % every == 0 (checkpoints), as copies.
    A backend may bring its own (`deltanet_scan`, the same signature and contract: engine-cpu's numba kernel)."""
    T, hv, dv = z.shape
    dk = S.shape[1]
    heads = grouped_heads(hk, hv) if key_head is None else np.asarray(key_head)
    q_scale = np.float32(dk ** -0.5)
    conv, S = conv.copy(), S.copy()
    out = np.empty((T, hv, dv), np.float32)
    passed = {}
    for t in range(T):
        window = np.concatenate([conv, mixed[t:t + 1]])  # (K, C): the last K inputs, oldest first
        conv = window[1:]
        y = silu((window * conv_w).sum(axis=0))  # (C,)
        q = l2norm(y[:hk * dk].reshape(hk, dk)) * q_scale
        k = l2norm(y[hk * dk:2 * hk * dk].reshape(hk, dk))
        v = y[2 * hk * dk:].reshape(hv, dv)
        q, k = q[heads], k[heads]  # (Hv, dk): value head j reads key head heads[j]
        g = A * softplus(a[t] + dt_bias)  # (Hv,) the log of each head's decay
        beta = sigmoid(b[t])  # (Hv,)
        S = S * np.exp(g)[:, None, None]
        delta = (v - (S * k[:, :, None]).sum(axis=1)) * beta[:, None]  # (Hv, dv): what S mispredicts for k
        S = S + k[:, :, None] * delta[:, None, :]
        o = (S * q[:, :, None]).sum(axis=1)  # (Hv, dv)
        var = np.mean(o * o, axis=-1, keepdims=True, dtype=np.float32)
        out[t] = o * (np.float32(1.0) / np.sqrt(var + eps)) * norm * silu(z[t])
        position = start + t + 1  # positions seen after this token
        if position % every == 0:
            passed[position] = (conv.copy(), S.copy())
    return out, conv, S, passed


def output_gate(x: np.ndarray, gate: np.ndarray) -> np.ndarray:
    """Qwen3-Next's gated attention: x * sigmoid(gate), elementwise (host f32)."""
    return x * sigmoid(gate)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-x))


def silu(x: np.ndarray) -> np.ndarray:
    return x * sigmoid(x)


def softplus(x: np.ndarray) -> np.ndarray:
    """torch's softplus (beta 1, threshold 20): x itself above 20."""
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, np.float32(20.0))))).astype(np.float32)


def l2norm(x: np.ndarray) -> np.ndarray:
    """x / sqrt(sum(x^2) + 1e-6) over the last axis, as HuggingFace's l2norm (rsqrt, then multiply)."""
    return x * (np.float32(1.0) / np.sqrt((x * x).sum(axis=-1, keepdims=True) + L2_EPS))
