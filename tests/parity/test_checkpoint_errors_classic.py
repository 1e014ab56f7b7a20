"""The classic decoders' unsupported combinations and broken files are explicit errors naming the file and the
field or tensor: Phi-3 longrope factor sets of the wrong length or only one of them, biases where the family file supports
none, activations it does not run, a partial rotary factor that leaves an odd number of dims, a StableLM GGUF
whose parallel-residual key contradicts its tensors, a fused qkv of the wrong size, a backend without partial
RoPE. And both config lineages of GPT-NeoX and StableLM (the original keys and transformers 5's) read alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fakcore.engine.backend import BackendError
from fakcore.engine.reference import ReferenceBackend
from fakcore.engine.transformer import Transformer, load_weights
from fakcore.models.checkpoint import load_checkpoint
from fakcore.models.config import ConfigError
from fakcore.models.shapes import WeightError

from .support import build_hf_model, save_hf, write_gguf
from .test_checkpoint_errors import edit_config, edit_safetensors, raises

LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
            "short_factor": [1.0] * 6, "long_factor": [2.0] * 6, "original_max_position_embeddings": 64}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One safetensors checkpoint per family, built once; tests spoil copies."""
    root = tmp_path_factory.mktemp("classic")
    return {name: save_hf(build_hf_model(name), root / name) for name in ("gptneox", "stablelm", "phi3", "granite")}


@pytest.fixture
def copy(saved, tmp_path):
    import shutil

    return lambda name: shutil.copytree(saved[name], tmp_path / name)


def test_phi3_longrope_factors_of_the_wrong_length(copy):
    hf = copy("phi3")  # 12 rotated dims: 6 factors per set
    edit_config(hf, lambda c: c.update(rope_parameters=LONGROPE | {"long_factor": [2.0] * 8}))
    with raises(ConfigError, hf / "config.json", "long_factor", "6 factors"):
        load_checkpoint(hf)


def test_phi3_gguf_with_one_longrope_set(saved, tmp_path):
    path = write_gguf(saved["phi3"], "phi3", "F32", tmp_path / "p.gguf",
                      edit=lambda t: t.update({"rope_factors_long.weight": np.ones(6, np.float32)}))
    with raises(ConfigError, path, "rope_factors_short", "rope_factors_long"):
        load_checkpoint(path)


def test_phi3_longrope_serves_the_original_context(copy):
    hf = copy("phi3")
    edit_config(hf, lambda c: c.update(rope_parameters=LONGROPE))
    cfg = load_checkpoint(hf).config
    assert (cfg.rope_scaling.kind, cfg.rope_scaling.factors, cfg.context_length) == ("longrope", (1.0,) * 6, 64)
    assert cfg.rope_scaling.attention_factor == pytest.approx((1 + np.log(256 / 64) / np.log(64)) ** 0.5)


@pytest.mark.parametrize(("name", "change", "says"), [
    ("gptneox", dict(hidden_act="relu"), "hidden_act"),
    ("stablelm", dict(hidden_act="gelu"), "hidden_act"),
    ("phi3", dict(hidden_act="gelu"), "hidden_act"),
    ("granite", dict(hidden_act="gelu"), "hidden_act"),
    ("granite", dict(attention_bias=True), "attention_bias"),
    ("phi3", dict(mlp_bias=True), "mlp_bias"),
], ids=["gptneox-act", "stablelm-act", "phi3-act", "granite-act", "granite-bias", "phi3-bias"])
def test_unsupported_hf_fields(copy, name, change, says):
    hf = copy(name)
    edit_config(hf, lambda c: c.update(change))
    with raises(ConfigError, hf / "config.json", says):
        load_checkpoint(hf)


def test_odd_rotary_dims(copy):
    hf = copy("gptneox")  # head_dim 16: 0.3 of it is 4.8, int 4 (even, fine); 0.2 is 3 (odd)
    edit_config(hf, lambda c: c["rope_parameters"].update(partial_rotary_factor=0.2))
    with raises(ConfigError, hf / "config.json", "partial_rotary_factor 0.2", "3 rotated dims"):
        load_checkpoint(hf)


def test_stablelm_gguf_parallel_key_contradicts_tensors(saved, tmp_path):
    path = write_gguf(saved["stablelm"], "stablelm", "F32", tmp_path / "s.gguf",
                      drop_keys=("stablelm.use_parallel_residual",), add_keys={"stablelm.use_parallel_residual": 1})
    with raises(ConfigError, path, "stablelm.use_parallel_residual", "ffn_norm"):
        load_checkpoint(path)


def test_gptneox_fused_qkv_of_the_wrong_size(copy):
    hf = copy("gptneox")
    name = "gpt_neox.layers.1.attention.query_key_value.weight"
    edit_safetensors(hf, lambda t: t.update({name: t[name][:-16].contiguous()}))
    with raises(WeightError, hf / "model.safetensors", name, "176 rows, expected 192"):
        load_checkpoint(hf)


def test_stablelm_missing_head_norm(copy):
    hf = copy("stablelm")
    edit_safetensors(hf, lambda t: t.pop("model.layers.2.self_attn.q_layernorm.norms.3.weight"))
    with raises(WeightError, hf, "missing tensor 'model.layers.2.self_attn.q_layernorm.norms.3.weight'"):
        load_checkpoint(hf)


def test_backend_without_partial_rope_is_refused(saved):
    class FullRopeOnly(ReferenceBackend):
        name = "full-rope-only"
        rope_features = frozenset()

    ckpt = load_checkpoint(saved["gptneox"])
    be = FullRopeOnly()
    with pytest.raises(BackendError, match="full-rope-only backend cannot run gptneox.*partial rope"):
        Transformer(ckpt.config, load_weights(ckpt.config, ckpt.tensors, be, ckpt.source), be)


# -- config lineages --------------------------------------------------------------------------------------


def test_gptneox_original_keys_read_as_transformers_5_writes_them(copy):
    """Pythia's config.json: rotary_pct and rotary_emb_base, no rope_parameters."""
    new = copy("gptneox")
    old = new.parent / "old"
    import shutil

    shutil.copytree(new, old)

    def original(c):
        rope = c.pop("rope_parameters")
        c.update(rotary_pct=rope["partial_rotary_factor"], rotary_emb_base=rope["rope_theta"])

    edit_config(old, original)
    assert load_checkpoint(old).config == load_checkpoint(new).config
    assert load_checkpoint(old).config.rotary_dim == 8


def test_gptneox_original_keys_match_huggingface(copy):
    """The same file through HuggingFace (which converts the old keys itself) and fak: same logits."""
    from transformers import AutoModelForCausalLM

    from .support import hf_logits, tokens_for
    from .test_parity_families import LOGITS_BOUND

    hf = copy("gptneox")

    def original(c):
        rope = c.pop("rope_parameters")
        c.update(rotary_pct=rope["partial_rotary_factor"], rotary_emb_base=rope["rope_theta"])

    edit_config(hf, original)
    model = AutoModelForCausalLM.from_pretrained(hf, attn_implementation="eager", dtype=torch.float32).eval()
    ckpt = load_checkpoint(hf)
    be = ReferenceBackend()
    tf = Transformer(ckpt.config, load_weights(ckpt.config, ckpt.tensors, be, ckpt.source), be)
    tokens = tokens_for()
    from fakcore.engine.backend import Segment

    got = tf.forward(tokens, [Segment(tf.new_cache(), slice(0, len(tokens)))])
    np.testing.assert_allclose(got, hf_logits(model, tokens), atol=LOGITS_BOUND, rtol=0)


def test_stablelm_original_keys(copy):
    """StableLM-3B-4E1T's config.json: rope_pct and norm_eps."""
    new = copy("stablelm")
    old = new.parent / "old"
    import shutil

    shutil.copytree(new, old)

    def original(c):
        rope = c.pop("rope_parameters")
        c.update(rope_pct=rope["partial_rotary_factor"], rope_theta=rope["rope_theta"], norm_eps=c.pop("layer_norm_eps"))

    edit_config(old, original)
    assert load_checkpoint(old).config == load_checkpoint(new).config
