"""How the numba backend holds the types a Q4_K_M GGUF mixes (Q4_K, Q5_0, Q6_K, Q8_0), and the vectorized
elementwise pieces Gemma's layers run: types without offsets keep none (no bytes, no work) on both
activation paths, int8 activations multiply their signed bytes directly, and the fast exp behind GELU,
SiLU and the softmax stays within a few ulp of the real one."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from fak_engine_cpu import kernels, vnni
from fak_engine_cpu.backend import NumbaBackend
from fakcore.engine.reference import ReferenceBackend
from tests.unit.enginecpu.test_numba_kernels import quantized

INT8_PATHS = [isa for isa in vnni.ISAS if not vnni.missing_features(isa)]
NO_OFFSETS = ("Q8_0", "Q5_0", "Q6_K", "Q3_K")


@pytest.mark.parametrize("activations", ["f32", "int8"])
@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_0", "Q6_K", "Q8_0", "Q3_K", "Q4_1"])
def test_types_without_offsets_store_none(activations, qtype):
    if activations == "int8" and not INT8_PATHS:
        pytest.skip("this CPU runs no int8 path")
    be = NumbaBackend(activations=activations)
    t = quantized(qtype, 24, 512, seed=1)
    w = be.matrix(t)
    assert (w.offset is None) == (qtype in NO_OFFSETS)
    if activations == "int8" and qtype in NO_OFFSETS:  # signed bytes as they are: no +128 shift to undo, the
        # narrowest signed kind that holds them (Q5_0, Q3_K: -16..15; Q6_K: -32..31)
        assert w.layout == {"Q8_0": "i8", "Q6_K": "i6", "Q5_0": "i5", "Q3_K": "i5"}[qtype] and w.q.dtype == np.int8
    x = np.random.default_rng(2).standard_normal((5, 512)).astype(np.float32)
    expected = x.astype(np.float64) @ ReferenceBackend().matrix(t).astype(np.float64).T
    y = be.linear(x, w)
    tol = 0.02 if activations == "int8" else 2e-5
    assert np.abs(y - expected).max() <= tol * np.abs(expected).max()
    for i in range(len(x)):  # batch-invariant
        assert np.array_equal(be.linear(x[i:i + 1], w)[0], y[i])


@pytest.mark.parametrize("activations", ["f32", "int8"])
def test_fused_q_k_v_of_mixed_types_equal_the_separate_matmuls(activations):
    """Gemma's attention: q and k Q5_0, v Q8_0 on some layers, fused into one matmul."""
    if activations == "int8" and not INT8_PATHS:
        pytest.skip("this CPU runs no int8 path")
    be = NumbaBackend(activations=activations)
    parts = [be.matrix(quantized(q, n, 640, seed=i)) for i, (q, n) in enumerate((("Q5_0", 32), ("Q5_0", 8), ("Q8_0", 8)))]
    fused = be.fuse(parts)
    assert fused is not None and fused.offset is None
    x = np.random.default_rng(0).standard_normal((3, 640)).astype(np.float32)
    assert np.array_equal(be.linear(x, fused), np.concatenate([be.linear(x, p) for p in parts], axis=1))


def test_embedding_rows_of_a_table_without_offsets():
    for activations in ["f32"] + (["int8"] if INT8_PATHS else []):
        be = NumbaBackend(activations=activations)
        t = quantized("Q8_0", 50, 64)
        ids = np.array([3, 0, 49, 3])
        np.testing.assert_allclose(be.embed(be.embedding(t), ids, 2.0), 2.0 * t.dequantize()[ids], rtol=1e-6, atol=1e-6)


@njit(fastmath=kernels.FAST)
def _exp_all(x, out):
    for i in range(x.shape[0]):
        out[i] = kernels._exp(x[i])


def test_fast_exp_within_a_few_ulp():
    x = np.concatenate([np.linspace(-87, 88, 200001, dtype=np.float32),
                        np.random.default_rng(0).standard_normal(10000).astype(np.float32) * 10])
    out = np.empty_like(x)
    _exp_all(x, out)
    exact = np.exp(x.astype(np.float64))
    assert (np.abs(out - exact) / exact).max() < 3 * 2.0 ** -23


def test_gated_activations_match_reference_on_wide_inputs():
    rng = np.random.default_rng(4)
    g, u = (rng.standard_normal((2, 7, 2048)) * [[[8.0]], [[1.0]]]).astype(np.float32)
    be, ref = NumbaBackend(), ReferenceBackend()
    for act in ("silu", "gelu_tanh"):
        np.testing.assert_allclose(be.gated(g, u, act), ref.gated(g, u, act), rtol=1e-5, atol=1e-5)
