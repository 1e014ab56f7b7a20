"""The ternary GGUF types (TQ1_0, TQ2_0) and MXFP4 end to end: a random Llama (and a gpt-oss) whose every matrix is stored in
the type, loaded by fak from the GGUF file, against HuggingFace running the same rounded weights (claim 16's
bounds), on the reference backend and on engine-cpu's fast path, where the weights stay resident as int8
values with a scale per 32 (the resident form is checked too).

The ternary types block 256 values, so this Llama is wider than the parity harness's (hidden 256, MLP 512,
its init scaled down to keep the logits as large as theirs, so the same absolute bounds mean the same);
llama.cpp's converter writes the same files for such a model (`--outtype tq1_0 / tq2_0`), and gpt-oss's
converter writes its experts as MXFP4.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from fakcore.models.checkpoint import load_checkpoint

from . import support
from .support import SEQ, Family, export, measure, tokens_for
from .test_parity_families import CACHED_BOUND, LOGITS_BOUND

WIDE = Family("llama", "llama", dict(num_hidden_layers=2, hidden_size=256, intermediate_size=512, num_attention_heads=4,
                                     num_key_value_heads=2, head_dim=64, tie_word_embeddings=False,
                                     initializer_range=0.1,  # 0.2 / sqrt(256 / 64): activations as large as the harness's
                                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
FILE_TYPES = {"TQ1_0": gguf.LlamaFileType.MOSTLY_TQ1_0, "TQ2_0": gguf.LlamaFileType.MOSTLY_TQ2_0,
              "MXFP4": gguf.LlamaFileType.MOSTLY_MXFP4_MOE}
CASES = [(qtype, backend) for qtype in FILE_TYPES for backend in ("reference", "numba")]


@pytest.fixture
def wide_llama(monkeypatch):
    monkeypatch.setitem(support.FAMILIES, "llama-wide", WIDE)
    for qtype, file_type in FILE_TYPES.items():
        monkeypatch.setitem(support.FILE_TYPE, qtype, file_type)
        monkeypatch.setitem(support.ROUNDING, f"gguf-{qtype.lower()}", qtype)
    return "llama-wide"


@pytest.mark.parametrize(("qtype", "backend"), CASES, ids=[f"{q}-{b}" for q, b in CASES])
def test_lowbit_gguf_matches_huggingface(wide_llama, qtype, backend, tmp_path):
    model, path = export(wide_llama, f"gguf-{qtype.lower()}", tmp_path)
    ckpt = load_checkpoint(path)
    assert ckpt.tensors["blk.0.attn_q.weight"].qtype == qtype and ckpt.tensors["token_embd.weight"].qtype == qtype
    m = measure(f"llama-wide / {qtype} / {backend}", path, model, tokens_for(), backend=backend)
    assert m.logits_max_abs <= LOGITS_BOUND
    assert m.argmax_agree == m.positions == SEQ
    assert m.cached_max_abs <= CACHED_BOUND


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_gpt_oss_with_mxfp4_matrices_matches_huggingface(wide_llama, backend, tmp_path):
    """gpt-oss as its GGUFs ship it, experts in MXFP4 (here every matrix; its widths are multiples of 32)."""
    model, path = export("gpt_oss", "gguf-mxfp4", tmp_path)
    ckpt = load_checkpoint(path)
    assert ckpt.tensors["blk.0.ffn_gate_exps.weight"].qtype == "MXFP4"
    m = measure(f"gpt_oss / MXFP4 / {backend}", path, model, tokens_for(), backend=backend)
    assert m.logits_max_abs <= LOGITS_BOUND
    assert m.argmax_agree == m.positions == SEQ
    assert m.cached_max_abs <= CACHED_BOUND


@pytest.mark.parametrize("qtype", list(FILE_TYPES))
def test_lowbit_weights_stay_resident_as_int8(wide_llama, qtype, tmp_path):
    from fak_engine_cpu.backend import QMatrix

    _, path = export(wide_llama, f"gguf-{qtype.lower()}", tmp_path)
    t = load_checkpoint(path).tensors["blk.0.ffn_down.weight"]
    w = support.fak_backend("numba").matrix(t)
    assert isinstance(w, QMatrix) and (w.layout, w.sub, w.offset) == ("i8", 32, None)
    assert w.q.dtype == np.int8 and w.q.nbytes == t.shape[0] * t.shape[1]  # one byte a weight, not four
    values = w.q.astype(np.float32) * w.scale.astype(np.float32)[:, :, None]
    assert np.array_equal(values.reshape(t.shape), t.dequantize())
    limit = 1 if qtype != "MXFP4" else 12  # trits, or doubled e2m1 values
    assert np.abs(w.q).max() <= limit
