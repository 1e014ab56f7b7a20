"""MPT's unsupported options and broken files are explicit errors naming the file and the field or tensor:
config.json options transformers would run differently from the model they describe (no ALiBi, q/k LayerNorms,
biases, logit_scale, another MLP width, norm or MLP type), attention fak does not run (a prefix LM, other
attention types), GGUF files without ALiBi or with tensors of those options, a fused Wqkv of the wrong size; a
backend without ALiBi or clamping refuses the model by name. The config reads MptConfig's defaults."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from fakcore.engine.backend import BackendError
from fakcore.engine.reference import ReferenceBackend
from fakcore.engine.transformer import Transformer, load_weights
from fakcore.models.checkpoint import load_checkpoint
from fakcore.models.config import ConfigError
from fakcore.models.shapes import WeightError

from .support import build_hf_model, save_hf, write_gguf
from .test_checkpoint_errors import edit_config, edit_safetensors, raises


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("mpt")
    return {name: save_hf(build_hf_model(name), root / name) for name in ("mpt", "mpt-6heads")}


@pytest.fixture
def copy(saved, tmp_path):
    return lambda name: shutil.copytree(saved[name], tmp_path / name)


def attn(**change):
    return lambda c: c["attn_config"].update(change)


def top(**change):
    return lambda c: c.update(change)


@pytest.mark.parametrize(("change", "says"), [
    (attn(alibi=False), "attn_config.alibi false"),
    (attn(alibi_bias_max=0), "attn_config.alibi_bias_max 0"),
    (attn(qk_ln=True), "attn_config.qk_ln true"),
    (attn(prefix_lm=True), "attn_config.prefix_lm true"),
    (attn(attn_type="multiquery_attention"), "attn_config.attn_type 'multiquery_attention'"),
    (attn(attn_type="grouped_query_attention", kv_n_heads=2), "attn_config.attn_type 'grouped_query_attention'"),
    (top(no_bias=False), "no_bias false"),
    (top(logit_scale=2.0), "logit_scale 2.0"),
    (top(expansion_ratio=2), "expansion_ratio 2"),
    (top(norm_type="rmsnorm"), "norm_type 'rmsnorm'"),
    (top(ffn_config={"ffn_type": "mptglu"}), "ffn_config.ffn_type 'mptglu'"),
    (top(n_heads=5), "d_model 64 is not a multiple of n_heads 5"),
    (lambda c: c.pop("d_model"), "no 'd_model'"),
], ids=["alibi", "bias-max", "qk-ln", "prefix-lm", "multiquery", "gqa", "no-bias", "logit-scale", "expansion",
        "norm-type", "ffn-type", "heads", "no-d-model"])
def test_unsupported_mpt_fields(copy, change, says):
    hf = copy("mpt")
    edit_config(hf, change)
    with raises(ConfigError, hf / "config.json", says):
        load_checkpoint(hf)


def test_mptconfig_defaults_read_as_transformers_reads_them(copy):
    """A config.json without attn_config, max_seq_len, layer_norm_epsilon or tie_word_embeddings: ALiBi with 8,
    2048 positions, 1e-5, the tied head (MptConfig's defaults)."""
    hf = copy("mpt")
    edit_config(hf, lambda c: [c.pop(k) for k in ("attn_config", "max_seq_len", "layer_norm_epsilon", "tie_word_embeddings")])
    cfg = load_checkpoint(hf).config
    assert (cfg.alibi_max_bias, cfg.context_length, cfg.norm_eps, cfg.tie_embeddings) == (8.0, 2048, 1e-5, True)
    assert cfg.alibi_slopes == (0.25, 0.0625, 0.015625, 0.00390625) and cfg.clip_qkv == 0.0


def test_mpt_fused_wqkv_of_the_wrong_size(copy):
    hf = copy("mpt")  # 3 * 64 rows: q, k and v of 4 heads of 16
    name = "transformer.blocks.1.attn.Wqkv.weight"
    edit_safetensors(hf, lambda t: t.update({name: t[name][:-16].contiguous()}))
    with raises(WeightError, hf / "model.safetensors", name, "176 rows, expected 192"):
        load_checkpoint(hf)


def test_mpt_learned_positions_are_an_unexpected_tensor(copy):
    import torch

    hf = copy("mpt")
    edit_safetensors(hf, lambda t: t.update({"transformer.wpe.weight": torch.zeros(256, 64)}))
    with raises(WeightError, hf / "model.safetensors", "transformer.wpe.weight"):
        load_checkpoint(hf)


# -- GGUF ------------------------------------------------------------------------------------------------


def test_mpt_gguf_without_max_alibi_bias(saved, tmp_path):
    path = write_gguf(saved["mpt"], "mpt", "F32", tmp_path / "m.gguf", drop_keys=("mpt.attention.max_alibi_bias",))
    with raises(ConfigError, path, "mpt.attention.max_alibi_bias"):
        load_checkpoint(path)


def test_mpt_gguf_with_no_alibi(saved, tmp_path):
    path = write_gguf(saved["mpt"], "mpt", "F32", tmp_path / "m.gguf", drop_keys=("mpt.attention.max_alibi_bias",),
                      add_keys={"mpt.attention.max_alibi_bias": 0.0})
    with raises(ConfigError, path, "mpt.attention.max_alibi_bias", "no ALiBi"):
        load_checkpoint(path)


@pytest.mark.parametrize(("tensor", "says"), [
    ("position_embd.weight", "learned positions"), ("blk.0.attn_q_norm.weight", "qk_ln"),
    ("blk.0.attn_qkv.bias", "biases"), ("output_norm.bias", "biases"),
], ids=["positions", "qk-norm", "qkv-bias", "norm-bias"])
def test_mpt_gguf_tensors_of_unsupported_options(saved, tmp_path, tensor, says):
    def add(tensors):
        tensors[tensor] = np.ones((256, 64) if tensor == "position_embd.weight" else 64, np.float32)

    path = write_gguf(saved["mpt"], "mpt", "F32", tmp_path / "m.gguf", edit=add)
    with raises(ConfigError, path, tensor, says):
        load_checkpoint(path)


def test_mpt_gguf_clamp_and_bias_max_are_read(saved, tmp_path):
    path = write_gguf(saved["mpt-6heads"], "mpt-6heads", "F32", tmp_path / "m.gguf")
    cfg = load_checkpoint(path).config
    assert (cfg.alibi_max_bias, cfg.clip_qkv, cfg.n_heads) == (4.0, 1.5, 6)
    assert cfg.alibi_slopes == (0.5, 0.25, 0.125, 0.0625, np.float32(2 ** -0.5), np.float32(2 ** -1.5))


# -- backends --------------------------------------------------------------------------------------------


class NoAlibi(ReferenceBackend):
    name = "no-alibi"
    attention_features = frozenset()


class NoClamp(ReferenceBackend):
    name = "no-clamp"
    clamp = property()  # hasattr(...) is False


@pytest.mark.parametrize(("backend", "name", "says"), [
    (NoAlibi, "mpt", "no-alibi backend cannot run mpt: it has no alibi attention bias"),
    (NoClamp, "mpt-6heads", "no-clamp backend cannot run mpt: it has no clamp"),
], ids=["alibi", "clamp"])
def test_a_backend_without_alibi_or_clamp_refuses_mpt(saved, backend, name, says):
    ckpt = load_checkpoint(saved[name])
    be = backend()
    with pytest.raises(BackendError, match=says):
        Transformer(ckpt.config, load_weights(ckpt.config, ckpt.tensors, be, ckpt.source), be)
