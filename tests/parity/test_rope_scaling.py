"""RoPE scaling beyond the families' defaults: YaRN and dynamic NTK (and linear on Llama), read from config.json
and from GGUF files as convert_hf_to_gguf writes them. The logits are compared with HuggingFace in
test_parity_families.py / test_parity_numba.py (the llama-linear, llama-yarn, qwen2-yarn, llama-yarn-mscale and
llama-dynamic families); this file checks that the scaling reaches the model as transformers computes it,
that dynamic NTK past its context is an explicit error (its rotation would change with every new token), and
that the GGUF keys YaRN has no counterpart for are refused by name.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fakcore.engine.backend import BackendError, Segment, rope_inv_freq
from fakcore.models.checkpoint import load_checkpoint
from fakcore.models.common import hf_rope
from fakcore.models.config import ConfigError

from . import support
from .support import (
    build_hf_model,
    export,
    fak_full,
    fak_transformer,
    hf_logits,
    save_hf,
    tokens_for,
    write_gguf,
)
from .test_checkpoint_errors import raises
from .test_parity_families import LOGITS_BOUND

YARNS = [
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32, "beta_fast": 8.0, "beta_slow": 0.5,
     "attention_factor": 1.25, "rope_theta": 1e6},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": 1.0, "mscale_all_dim": 0.5,
     "truncate": False, "rope_theta": 10000.0},
    {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "rope_theta": 500000.0},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0,
     "partial_rotary_factor": 0.5},
]


@pytest.mark.parametrize("head_dim", [16, 64, 128])
@pytest.mark.parametrize("params", YARNS, ids=range(len(YARNS)))
def test_yarn_frequencies_and_attention_factor_are_transformers(params, head_dim):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = dict(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim, max_position_embeddings=256,
               rope_parameters=dict(params))
    inv, attention = ROPE_INIT_FUNCTIONS["yarn"](LlamaConfig(**cfg))
    theta, scaling = hf_rope(cfg, None, "config.json", allow_partial=True)
    rotary = int(head_dim * params.get("partial_rotary_factor", 1.0))
    ours = rope_inv_freq(rotary, theta, scaling)
    np.testing.assert_array_max_ulp(ours, inv.numpy(), maxulp=1)  # torch's float32 pow vs a rounded float64 one
    assert scaling.attention_factor == attention
    assert not np.allclose(ours, rope_inv_freq(rotary, theta, dataclasses.replace(scaling, kind="none")))


@pytest.mark.parametrize("name", ["llama-linear", "llama-yarn", "qwen2-yarn", "llama-yarn-mscale"])
def test_the_scaling_reaches_the_model_from_both_formats(name, tmp_path):
    model, st = export(name, "safetensors", tmp_path / "st")
    rotary = model.model.rotary_emb
    formats = [st] + ([export(name, "gguf-f32", tmp_path / "gg")[1]] if support.FAMILIES[name].gguf_ok else [])
    for path in formats:
        cfg = load_checkpoint(path).config
        assert cfg.rope_scaling.kind == name.split("-")[1]
        np.testing.assert_array_max_ulp(rope_inv_freq(cfg.rotary_dim, cfg.rope_theta, cfg.rope_scaling),
                                        rotary.inv_freq.numpy(), maxulp=1)
        assert cfg.rope_scaling.attention_factor == pytest.approx(rotary.attention_scaling, rel=1e-7)  # GGUF: float32


def test_yarn_reads_transformers_defaults():
    base = dict(hidden_size=64, num_attention_heads=4, max_position_embeddings=256)
    # a top-level original_max_position_embeddings wins (standardize_rope_params); factor from max / original
    _, s = hf_rope(base | {"original_max_position_embeddings": 32,
                           "rope_parameters": {"rope_type": "yarn", "original_max_position_embeddings": 64}}, None, "c")
    assert (s.original_context, s.factor, s.beta_fast, s.beta_slow, s.truncate) == (32, 8.0, 32.0, 1.0, True)
    assert s.attention_factor == pytest.approx(0.1 * np.log(8.0) + 1)
    # the old `rope_scaling` spelling, no original: max_position_embeddings, factor 1 -> attention factor 1
    _, s = hf_rope(base | {"rope_scaling": {"type": "yarn", "factor": 1.0}}, None, "c")
    assert (s.kind, s.original_context, s.attention_factor) == ("yarn", 256, 1.0)


@pytest.fixture(scope="module")
def short_dynamic(tmp_path_factory):
    """A dynamic-NTK Llama whose context (16) the 40 test positions pass."""
    name = "llama-dynamic-16"
    fam = support.FAMILIES["llama-dynamic"]
    support.FAMILIES[name] = dataclasses.replace(fam, config=fam.config | {"max_position_embeddings": 16})
    try:
        model = build_hf_model(name)
        return model, save_hf(model, tmp_path_factory.mktemp("dynamic") / "hf")
    finally:
        del support.FAMILIES[name]


def test_dynamic_ntk_within_its_context_is_the_plain_rope(short_dynamic):
    model, path = short_dynamic
    tf = fak_transformer(load_checkpoint(path))
    tokens = tokens_for()[:16]
    np.testing.assert_allclose(fak_full(tf, tokens), hf_logits(model, tokens), atol=LOGITS_BOUND, rtol=0)


def test_dynamic_ntk_past_its_context_is_an_error_not_a_fallback(short_dynamic):
    model, path = short_dynamic
    ckpt = load_checkpoint(path)
    assert (ckpt.config.rope_scaling.kind, ckpt.config.context_length) == ("dynamic", 16)
    tf = fak_transformer(ckpt)
    tokens = tokens_for()
    with pytest.raises(BackendError, match="dynamic NTK.*re-rotates every cached key"):
        fak_full(tf, tokens)
    cache = tf.new_cache()
    tf.forward(tokens[:16], [Segment(cache, slice(0, 16))])
    with pytest.raises(BackendError, match="position 16 is past the 16 positions"):
        tf.forward(tokens[16:17], [Segment(cache, slice(0, 1))])
    assert cache.length == 16  # refused before anything was written
    # transformers does rotate differently there: the plain rotation would be a silent wrong answer
    plain = build_hf_model("llama-dynamic")
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert np.abs(hf_logits(model, tokens) - hf_logits(plain, tokens)).max() > 1e-3


@pytest.fixture(scope="module")
def yarn_hf(tmp_path_factory):
    return save_hf(build_hf_model("llama-yarn"), tmp_path_factory.mktemp("yarn") / "hf")


@pytest.mark.parametrize(("key", "value", "words"), [
    ("llama.rope.scaling.yarn_ext_factor", 0.5, "yarn_ext_factor"),
    ("llama.rope.scaling.yarn_log_multiplier", 0.1, "yarn_log_multiplier"),
    ("llama.rope.scaling.attn_factor", 1.5, "attn_factor"),
])
def test_gguf_yarn_keys_without_a_transformers_meaning_are_refused(yarn_hf, tmp_path, key, value, words):
    path = write_gguf(yarn_hf, "llama-yarn", "F32", tmp_path / "y.gguf", add_keys={key: value})
    with raises(ConfigError, path, words):
        load_checkpoint(path)


def test_gguf_yarn_without_its_original_context_is_refused(yarn_hf, tmp_path):
    key = "llama.rope.scaling.original_context_length"
    path = write_gguf(yarn_hf, "llama-yarn", "F32", tmp_path / "y.gguf", drop_keys=(key,))
    with raises(ConfigError, path, key):
        load_checkpoint(path)


def test_an_unknown_rope_type_is_refused_by_name(yarn_hf, tmp_path):
    path = write_gguf(yarn_hf, "llama-yarn", "F32", tmp_path / "y.gguf", drop_keys=("llama.rope.scaling.type",),
                      add_keys={"llama.rope.scaling.type": "ntk-by-parts"})
    with raises(ConfigError, path, "llama.rope.scaling.type", "ntk-by-parts"):
        load_checkpoint(path)
