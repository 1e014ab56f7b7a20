"""Mixture-of-experts models with a shared expert against HuggingFace transformers: Qwen2-MoE (the shared expert
behind its sigmoid gate, q/k/v biases, top-k weights not renormalised; renormalised in qwen2moe-normed, which a
GGUF cannot say) and GraniteMoeShared (the ungated shared expert with Granite's multipliers), from safetensors and
from GGUF files written as llama.cpp writes them (f32, f16, Q8_0), on the reference and the numba backends: the
logits within the bound every family meets (test_parity_families.LOGITS_BOUND), the same argmax everywhere, and
cached decode giving the logits of a full pass.

The shared expert is shown to matter: without it, or (Qwen2-MoE) with its gate taken away, the logits move by far
more than the bound, so a loader that dropped either could not pass. A GGUF whose shared gate is (1, dim), as a
converter that does not squeeze it writes it, runs as the (dim,) one llama.cpp loads.
"""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.models.checkpoint import load_checkpoint

from .support import (
    FAMILIES,
    FORMATS,
    SEQ,
    build_hf_model,
    export,
    fak_full,
    fak_transformer,
    measure,
    save_hf,
    tokens_for,
    write_gguf,
)
from .test_parity_families import CACHED_BOUND, LOGITS_BOUND

SHARED = ("qwen2moe", "qwen2moe-normed", "granitemoeshared")
CASES = [(name, fmt, backend) for name in SHARED for fmt in FORMATS if fmt == "safetensors" or FAMILIES[name].gguf_ok
         for backend in ("reference", "numba")]
MATTERS = 100 * LOGITS_BOUND  # what dropping a part of the shared expert must move the logits by, at least


@pytest.mark.parametrize(("name", "fmt", "backend"), CASES, ids=[f"{n}-{f}-{b}" for n, f, b in CASES])
def test_logits_match_huggingface(name, fmt, backend, tmp_path):
    model, path = export(name, fmt, tmp_path)
    m = measure(f"{name} / {fmt} / {backend}", path, model, tokens_for(), backend)
    assert m.logits_max_abs <= LOGITS_BOUND
    assert m.argmax_agree == m.positions == SEQ
    assert m.cached_max_abs <= CACHED_BOUND


@pytest.mark.parametrize("name", ["qwen2moe", "granitemoeshared"])
def test_the_shared_expert_matters(name, tmp_path):
    _, path = export(name, "gguf-f32", tmp_path)
    tf = fak_transformer(load_checkpoint(path))
    assert all(L.shared is not None for L in tf.w.layers)
    assert all((L.shared_gate is not None) == (name == "qwen2moe") for L in tf.w.layers)
    tokens = tokens_for()
    full = fak_full(tf, tokens)
    if name == "qwen2moe":  # the gate: sigmoid(g) far from 1 for many tokens
        gates = [L.shared_gate for L in tf.w.layers]
        for L in tf.w.layers:
            L.shared_gate = None
        assert np.abs(fak_full(tf, tokens) - full).max() > MATTERS
        for L, gate in zip(tf.w.layers, gates, strict=True):
            L.shared_gate = gate
    for L in tf.w.layers:
        L.shared = None
    assert np.abs(fak_full(tf, tokens) - full).max() > MATTERS


def test_a_one_row_shared_gate_runs_as_the_squeezed_one(tmp_path):
    """convert_hf_to_gguf squeezes shared_expert_gate (1, dim) to (dim,); a file that keeps its row reads the same."""
    hf = save_hf(build_hf_model("qwen2moe"), tmp_path / "hf")

    def unsqueeze(t):
        for name in [n for n in t if n.endswith("ffn_gate_inp_shexp.weight")]:
            t[name] = t[name].reshape(1, -1)

    squeezed = write_gguf(hf, "qwen2moe", "F32", tmp_path / "squeezed.gguf")
    one_row = write_gguf(hf, "qwen2moe", "F32", tmp_path / "one-row.gguf", edit=unsqueeze)
    ckpt = load_checkpoint(one_row)
    assert tuple(ckpt.tensors["blk.0.ffn_gate_inp_shexp.weight"].shape) == (1, 64)
    tokens = tokens_for()
    assert np.array_equal(fak_full(fak_transformer(ckpt), tokens),
                          fak_full(fak_transformer(load_checkpoint(squeezed)), tokens))
