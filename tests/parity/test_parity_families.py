"""Every family against HuggingFace transformers: a random tiny model with the family's special features
switched on, loaded by fak from safetensors and from GGUF files written as llama.cpp writes them (f32, f16,
Q8_0), must give the same logits (max |Δ| <= LOGITS_BOUND), the same argmax at every position, and the same
logits decoding token by token through the KV cache as in one full pass (max |Δ| <= CACHED_BOUND).

For f16 and Q8_0 the HuggingFace model runs the same rounded weights (support.build_hf_model), so what is
compared is the arithmetic, not the storage format's precision.
"""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.engine.loader import load_model
from fakcore.engine.reference import ReferenceBackend

from .support import FAMILIES, FORMATS, SEQ, export, hf_logits, measure, tokens_for

# qwen3next's GGUFs are judged in test_parity_qwen3next.py, against HuggingFace in float64: on those weights
# HuggingFace's own float32 logits lie up to 9e-5 from its float64 ones, more than this bound; Qwen3.5's every format
# and backend in test_parity_qwen35.py
CASES = [(name, fmt) for name, fam in FAMILIES.items() for fmt in FORMATS
         if not fam.model_type.startswith("qwen3_5") and
         (fmt == "safetensors" or (fam.gguf_ok and fam.model_type != "qwen3_next"))]
# The bounds CLAIMS.md states (claim 16). The largest measured is 2.03e-5 on logits, 1.28e-5 cached (AMD EPYC); the
# rest is room for another CPU's BLAS (torch's and numpy's) to sum in another order.
LOGITS_BOUND = 5e-5
CACHED_BOUND = 5e-5


@pytest.mark.parametrize(("name", "fmt"), CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_logits_match_huggingface(name, fmt, tmp_path):
    model, path = export(name, fmt, tmp_path)
    m = measure(f"{name} / {fmt}", path, model, tokens_for())
    assert m.logits_max_abs <= LOGITS_BOUND
    assert m.argmax_agree == m.positions == SEQ
    assert m.cached_max_abs <= CACHED_BOUND


@pytest.mark.parametrize("name", [n for n, fam in FAMILIES.items() if fam.gguf_ok])
def test_gguf_and_safetensors_give_the_same_architecture(name, tmp_path):
    """Apart from where the formats store things differently, both sources describe one model."""
    from fakcore.models.checkpoint import load_checkpoint

    _, st = export(name, "safetensors", tmp_path / "st")
    _, gg = export(name, "gguf-f32", tmp_path / "gg")
    a, b = load_checkpoint(st).config, load_checkpoint(gg).config
    same = ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "qkv_bias", "qk_norm",
            "sandwich_norm", "act", "embed_scale", "attn_softcap", "final_softcap", "layer_window",
            "layer_rope_theta", "tie_embeddings", "eos_ids", "post_norm", "qk_norm_full", "n_experts",
            "n_experts_used", "expert_ffn_dim", "expert_weights_norm", "norm", "norm_bias", "rotary_dim",
            "parallel_residual", "shared_ffn_norm", "gated_mlp", "attn_out_bias", "mlp_bias", "qk_norm_per_head",
            "residual_scale", "logit_scale", "alibi_max_bias", "alibi_slopes", "clip_qkv", "shared_expert_ffn_dim",
            "shared_expert_gate")
    assert {f: getattr(a, f) for f in same} == {f: getattr(b, f) for f in same}
    assert a.scale == pytest.approx(b.scale, rel=1e-7)
    # Gemma's, Qwen3-Next's and Qwen3.5's converters add the offset into the GGUF's gains
    assert (a.norm_offset, b.norm_offset) == ((1.0, 0.0) if name.startswith(("gemma", "qwen3next", "qwen35")) else (0.0, 0.0))


def test_load_model_runs_a_safetensors_directory(tmp_path):
    model, path = export("qwen3", "safetensors", tmp_path)
    loaded = load_model(str(path), ReferenceBackend())
    assert (loaded.config.arch, loaded.source, loaded.template) == ("qwen3", str(path), None)
    assert loaded.tokenizer.decode(loaded.tokenizer.encode("the shared tree")) == "the shared tree"
    tokens = tokens_for(2)
    from fakcore.engine.backend import Segment

    tf = loaded.transformer
    got = tf.forward(tokens, [Segment(tf.new_cache(), slice(0, len(tokens)))])
    np.testing.assert_allclose(got, hf_logits(model, tokens), atol=LOGITS_BOUND, rtol=0)  # claim 16's bound


def test_load_model_from_the_huggingface_cache(tmp_path, monkeypatch):
    """hf://org/repo: a snapshot of links into blobs named by sha256, verified, then loaded."""
    import hashlib
    import os

    model, path = export("gemma3", "safetensors", tmp_path / "export")
    folder = tmp_path / "hub" / "models--fak--tiny-gemma3"
    snapshot, blobs = folder / "snapshots" / "c0ffee", folder / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for f in path.iterdir():
        blob = blobs / hashlib.sha256(f.read_bytes()).hexdigest()
        f.rename(blob)
        (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("c0ffee")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))

    loaded = load_model("hf://fak/tiny-gemma3", ReferenceBackend())
    assert (loaded.config.arch, loaded.source) == ("gemma3", str(snapshot))
    tokens = tokens_for(3)
    from fakcore.engine.backend import Segment

    tf = loaded.transformer
    got = tf.forward(tokens, [Segment(tf.new_cache(), slice(0, len(tokens)))])
    np.testing.assert_allclose(got, hf_logits(model, tokens), atol=LOGITS_BOUND, rtol=0)  # claim 16's bound
