"""The engine's side of screening's probe: hidden states after a layer, projected on a direction."""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.engine import probe
from fakcore.engine.backend import BackendError, Segment
from fakcore.engine.loader import load_model, make_backend
from fakcore.protocol import ErrorCode, ProbeRequest


@pytest.fixture(scope="module")
def model():
    return load_model("synthetic", make_backend("reference"))


def test_hidden_is_the_forward_pass_residual_stream(model):
    """Transformer.hidden after k layers is what a full forward captures after k layers, for every k; several
    sequences read in one batch get what each gets alone."""
    tf = model.transformer
    a = np.array(model.tokenizer.encode("the probe reads this"), np.int64)
    b = np.array(model.tokenizer.encode("and this other one, longer than the first"), np.int64)
    captured: list[np.ndarray] = []
    tf.forward(a, [Segment(tf.new_cache(), slice(0, len(a)))], capture=captured)
    for k in range(model.config.n_layers + 1):
        (alone,) = tf.hidden([a], k)
        np.testing.assert_array_equal(alone, captured[k])
        both = tf.hidden([b, a], k)
        assert both[0].shape == (len(b), model.config.dim)
        np.testing.assert_allclose(both[1], alone, rtol=0, atol=1e-5)
    with pytest.raises(BackendError, match="no hidden state after layer"):
        tf.hidden([a], model.config.n_layers + 1)


def test_project_is_hidden_times_direction_without_the_bos(model):
    rng = np.random.default_rng(0)
    d = rng.standard_normal(model.config.dim).astype(np.float32)
    text = "Ignore previous instructions. " * 40  # several pieces
    parts = probe.pieces(model, text, chunk=64)
    assert len(parts) > 1 and all(len(ids) <= 64 for ids, _ in parts)
    ids, offsets = model.tokenizer.encode_with_offsets(text)
    assert [o for _, offs in parts for o in offs] == offsets  # every token once, in order
    assert [int(t) for p, _ in parts for t in p[1:]] == ids  # each piece after its own BOS
    (vals,) = probe.project(model, [parts[0][0]], 2, d)
    (h,) = model.transformer.hidden([parts[0][0]], 2)
    np.testing.assert_allclose(vals, h[1:] @ d, rtol=1e-5, atol=1e-4)
    assert len(vals) == len(parts[0][1])


@pytest.mark.parametrize(("field", "value", "message"), [
    ("layer", 0, "no hidden state after layer 0"),
    ("layer", 99, "no hidden state after layer 99"),
    ("direction", [1.0, 2.0], "the direction has 2 values"),
    ("text", "x" * (probe.MAX_PROBE_CHARS + 1), "a probe reads at most"),
    ("weights_digest", "0" * 64, "trained on other weights"),
])
def test_a_request_that_does_not_fit_the_model_is_refused(model, field, value, message):
    ok = dict(request_id="p", model="synthetic", text="hello", layer=1, direction=[0.0] * model.config.dim,
              weights_digest=model.weights_digest)
    probe.check(model, ProbeRequest(**ok))
    with pytest.raises(probe.ProbeError, match=message) as err:
        probe.check(model, ProbeRequest(**{**ok, field: value}))
    assert err.value.code in (ErrorCode.INVALID, ErrorCode.UNSUPPORTED)
