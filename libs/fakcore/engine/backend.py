"""The backend interface: the few operations a transformer forward pass needs, device-neutral.

Model families are written once against this (see engine/transformer.py); the reference backend
(numpy f32, engine/reference.py), the fast CPU backend (numba, services/engine-cpu) and the CUDA backend
(numba-cuda, services/engine-cuda) implement it. Activations are backend arrays (`Act`) that the family code
never touches directly except through these methods, `reshape`, and row indexing.

Determinism contract: every per-token result (a row of `linear`, a token's attention output) must not depend
on how many other tokens are in the call. Exact KV eviction (docs/architecture.md §3) relies on it; backends that cannot
promise it say so with `batch_invariant = False`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fakcore.models.config import ModelConfig, RopeScaling

if TYPE_CHECKING:
    from fakcore.engine.kvcache import KVCache
    from fakcore.formats.tensor import Tensor

Act = Any  # a backend's activation array: (rows, features) or (rows, heads, head_dim)
Weight = Any  # a backend's resident weight


class BackendError(Exception):
    """A backend cannot run what it was asked to (unsupported quant type, device missing…)."""


@dataclass(frozen=True)
class Segment:
    """The rows of a forward batch that belong to one sequence.

    Rows `rows.start … rows.stop-1` of the batch are that sequence's tokens at positions
    `cache.length … cache.length + n - 1`; their keys/values are appended to `cache`.
    """

    cache: KVCache  # the sequence's
    rows: slice


class Backend(Protocol):
    name: str  # "reference" | "numba" | "cuda"
    device: str  # "cpu" | "cuda:0" …
    batch_invariant: bool

    # -- weights ---------------------------------------------------------------------------------------
    def matrix(self, t: Tensor) -> Weight: ...  # a (out, in) projection, kept in its resident form
    def vector(self, t: Tensor, offset: float = 0.0) -> Weight: ...  # norm gains (+offset), biases
    def embedding(self, t: Tensor) -> Weight: ...  # (vocab, dim) lookup table
    # Optional: fuse(weights) -> one weight whose rows are the given matrices' rows stacked (same input
    # width), or None when they cannot be stacked (different quant layouts). Used for q/k/v and gate/up.

    # -- ops -------------------------------------------------------------------------------------------
    def embed(self, table: Weight, ids: np.ndarray, scale: float) -> Act: ...  # (T, dim)
    def linear(self, x: Act, w: Weight, bias: Weight | None = None) -> Act: ...  # (T, in) -> (T, out)
    def rmsnorm(self, x: Act, w: Weight, eps: float) -> Act: ...  # over the last axis
    def rope(self, x: Act, positions: np.ndarray, table: Any) -> Act: ...  # (T, heads, head_dim)
    def rope_table(self, head_dim: int, theta: float, scaling: RopeScaling) -> Any: ...  # head_dim: dims rotated
    def attention(self, q: Act, k_pre: Act, k: Act, v: Act, segments: list[Segment], layer: int,
                  window: int, scale: float, softcap: float) -> Act: ...  # appends to caches, (T, H, D) out
    def gated(self, gate: Act, up: Act, act: str) -> Act: ...  # act(gate) * up
    def add(self, x: Act, y: Act) -> Act: ...
    def softcap(self, x: Act, cap: float) -> Act: ...
    def take_rows(self, x: Act, rows: np.ndarray) -> Act: ...
    def to_host(self, x: Act) -> np.ndarray: ...
    # Optional, for the classic decoders (checked by transformer.check_backend when a model needs them):
    #   layernorm(x, w, b, eps) -> Act   (x - mean) / sqrt(var + eps) * w (+ b) over the last axis; w and b
    #                                    hold dim values, or heads*dim for (T, heads, dim) input (head h: row h)
    #   activation(x, act) -> Act        act(x) elementwise, act "gelu" (erf) | "gelu_tanh" (a plain MLP)
    #   scale(x, s) -> Act               x * s
    #   rope_features = {"partial",      `rope` with a table of rope_dim < head_dim rotates the leading
    #                                    rope_dim dims of each head (NEOX halves) and passes the rest;
    #                    "attention_factor"}  its tables multiply cos and sin by RopeScaling.attention_factor
    #   clamp(x, c) -> Act               x clipped to [-c, c] elementwise (MPT's clip_qkv)
    #   attention_features = {"alibi"}   `attention(…, alibi=slopes)` takes a (n_heads,) float32 array and adds
    #                                    slopes[h] * (j - i) to head h's score of the key in slot j from the query
    #                                    at slot i, after the scale (and softcap), before the softmax (ALiBi: the
    #                                    model's q and k then carry no RoPE)
    #                       "sinks"      `attention(…, sinks=logits)` takes a (n_heads,) float32 array: head h's
    #                                    softmax gets one more logit, sinks[h], with no value (gpt-oss)
    #   swiglu_oai(gate, up, alpha, limit) -> Act   gpt-oss's experts: g = min(gate, limit),
    #                                    (clip(up, -limit, limit) + 1) * g * sigmoid(alpha * g)
    #   recurrent_features = {"gated_deltanet"}   its activations are host numpy arrays, which it also takes as
    #                                    input: Qwen3-Next's linear layers and attention gates are host arithmetic
    #                                    between `linear` calls (engine/deltanet.py)

    # Optional: sample(logits, rows, draws) -> (tokens, statuses): engine/sampling.Sampler's choice for rows
    # `rows` of logits the backend holds, from each row's sampling.Draw (the host's generator draws), so that
    # only token ids leave the device; statuses are sampling.SAMPLED, NON_FINITE or NO_DRAW. The scheduler uses
    # it where the transformer can leave its logits on the backend (forward's `host`).

    # -- caches ----------------------------------------------------------------------------------------
    # A cache of this backend's kind (engine/kvcache.py's KVCache or a subclass) of config.n_kv_layers layers
    # (a hybrid model's linear layers keep none), handed this backend's `rope`. The cache moves its own memory with its metadata (drop, copy_prefix, rerotate): the backend
    # keeps the math only.
    def new_cache(self, config: ModelConfig) -> KVCache: ...


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling) -> np.ndarray:
    """Inverse frequencies (head_dim/2,) in float32, computed as HuggingFace does (incl. Llama-3 scaling, YaRN)."""
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv = (np.float32(1.0) / np.power(np.float32(theta), exponent)).astype(np.float32)
    if scaling.kind == "linear":
        inv = (inv / np.float32(scaling.factor)).astype(np.float32)
    elif scaling.kind == "llama3":
        # transformers' _compute_llama3_parameters: long wavelengths slowed by `factor`, short ones kept,
        # a smooth blend between the two cut-offs.
        low_wavelen = scaling.original_context / scaling.low_freq_factor
        high_wavelen = scaling.original_context / scaling.high_freq_factor
        wavelen = 2 * np.pi / inv
        scaled = np.where(wavelen > low_wavelen, inv / scaling.factor, inv)
        smooth = (scaling.original_context / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
        smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv = np.where(medium, smoothed, scaled).astype(np.float32)
    elif scaling.kind in ("factors", "longrope"):
        # llama.cpp's freq_factors: the angle of pair i is divided by factors[i].
        if len(scaling.factors) != len(inv):
            raise BackendError(f"RoPE scaling has {len(scaling.factors)} factors for {len(inv)} frequencies")
        if scaling.kind == "longrope":  # transformers' order: 1 / (factor * theta ** exponent)
            inv = (np.float32(1.0) / (np.asarray(scaling.factors, np.float32) *
                                      np.power(np.float32(theta), exponent))).astype(np.float32)
        else:
            inv = (inv / np.asarray(scaling.factors, np.float32)).astype(np.float32)
    elif scaling.kind == "yarn":
        inv = yarn_inv_freq(head_dim, theta, scaling)
    elif scaling.kind not in ("none", "dynamic"):  # dynamic NTK is the plain RoPE within the context fak serves
        raise BackendError(f"unsupported RoPE scaling {scaling.kind!r}")
    return inv


def yarn_inv_freq(head_dim: int, theta: float, scaling: RopeScaling) -> np.ndarray:
    """transformers' _compute_yarn_parameters, step for step in float32: each frequency a blend of itself
    (extrapolated) and itself / factor (interpolated), the blend a linear ramp over the dims between the
    correction range's ends (the attention factor is applied to cos/sin by the rope tables)."""

    def correction_dim(rotations: float) -> float:  # the dim whose frequency turns `rotations` times over the context
        return (head_dim * math.log(scaling.original_context / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(scaling.beta_fast), correction_dim(scaling.beta_slow)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # transformers: prevents a division by zero
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    # the power in float64, rounded once: torch's float32 pow is (nearly) correctly rounded, numpy's is not
    pos_freqs = np.power(np.float64(theta), exponent.astype(np.float64)).astype(np.float32)
    extrapolation = (np.float32(1.0) / pos_freqs).astype(np.float32)
    interpolation = (np.float32(1.0) / (np.float32(scaling.factor) * pos_freqs)).astype(np.float32)
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low),
                   np.float32(0.0), np.float32(1.0))
    keep = (np.float32(1.0) - ramp).astype(np.float32)  # 1: extrapolated (kept), 0: interpolated
    return (interpolation * (np.float32(1.0) - keep) + extrapolation * keep).astype(np.float32)
