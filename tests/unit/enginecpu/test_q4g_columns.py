"""GPTQ act-order on engine-cpu: a Q4_G matrix whose stored columns are the inputs in another order
(Tensor.columns) multiplies x[:, columns] on both activation paths, embeds rows back in the model's order, and
fuses only with matrices of the same order."""

from __future__ import annotations

import numpy as np
import pytest

from fak_engine_cpu import vnni
from fak_engine_cpu.backend import NumbaBackend, QMatrix
from fakcore.engine.reference import ReferenceBackend
from fakcore.formats import gptq

ROWS, COLS = 40, 256
INT8_PATHS = [isa for isa in vnni.ISAS if not vnni.missing_features(isa)]


def act_order_tensor(seed: int):
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.2, (ROWS, COLS)).astype(np.float32)
    t, deq = gptq.quantize(w, 64, sym=False, act_order=rng.permutation(COLS))
    q4g = gptq.to_q4g("w", t["qweight"], t["qzeros"], t["scales"], t["g_idx"], 1, "test")
    assert q4g.columns is not None and np.array_equal(q4g.dequantize(), deq)
    return q4g, deq


@pytest.mark.parametrize("activations", ["f32", *(f"int8-{isa}" for isa in INT8_PATHS)])
def test_act_order_linear_matches_the_dequantized_weight(activations):
    nb = NumbaBackend() if activations == "f32" else NumbaBackend(activations="int8", isa=activations[5:])
    t, deq = act_order_tensor(0)
    w = nb.matrix(t)
    assert isinstance(w, QMatrix) and w.layout == "nib" and w.columns is not None
    x = np.random.default_rng(1).standard_normal((9, COLS)).astype(np.float32)
    y = nb.linear(x, w)
    expected = x.astype(np.float64) @ deq.astype(np.float64).T
    bound = 2e-5 if activations == "f32" else 0.02  # int8: activations rounded per 32-element block
    assert np.abs(y - expected).max() <= bound * np.abs(expected).max()
    for i in range(len(x)):  # batch-invariant
        assert np.array_equal(nb.linear(x[i:i + 1], w)[0], y[i])


def test_act_order_embedding_and_fusing():
    nb = NumbaBackend()
    t, deq = act_order_tensor(2)
    ids = np.array([3, 0, 39, 3])
    assert np.array_equal(nb.embed(nb.embedding(t), ids, 1.0), deq[ids])
    assert np.array_equal(ReferenceBackend().matrix(t), deq)
    w = nb.matrix(t)
    assert nb.fuse([w, w]) is not None  # the same order: one matmul
    other, _ = act_order_tensor(3)
    assert nb.fuse([w, nb.matrix(other)]) is None  # different orders: kept apart
