"""gpt-oss's unsupported options and broken files are explicit errors naming the file and the field or tensor:
from config.json a layer type other than sliding / full, sliding layers without a window, a non-positive
swiglu_limit, MXFP4 (the quantization_config and the `_blocks` / `_scales` tensors), a missing or misshapen
expert parameter, a missing sink; from GGUF the fused `ffn_gate_up_exps`, another gating function, a missing
expert or window key, a missing sink. A backend without attention sinks or the clamped SwiGLU (engine-cuda today)
refuses the model when it is built, naming both."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from fakcore.models.checkpoint import load_checkpoint
from fakcore.models.config import ConfigError
from fakcore.models.shapes import WeightError

from .support import build_hf_model, save_hf, write_gguf
from .test_checkpoint_errors import edit_config, edit_safetensors, raises

NAME = "gpt_oss"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_hf(build_hf_model(NAME), tmp_path_factory.mktemp("gptoss") / NAME)


@pytest.fixture
def hf(saved, tmp_path):
    """A fresh copy of the checkpoint, to spoil."""
    return shutil.copytree(saved, tmp_path / NAME)


# -- config.json and safetensors ---------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "exc", "says"), [
    (dict(layer_types=["sliding_attention", "chunked_attention"] * 2), ConfigError, "'layer_types' has unsupported"),
    (dict(sliding_window=None), ConfigError, "'sliding_window'"),
    (dict(swiglu_limit=0.0), ConfigError, "'swiglu_limit'"),
    (dict(quantization_config={"quant_method": "mxfp4"}), ConfigError, "'mxfp4'"),
], ids=["layer_types", "no_window", "swiglu_limit", "mxfp4_config"])
def test_hf_unsupported(hf, change, exc, says):
    edit_config(hf, lambda c: c.update(change))
    with raises(exc, hf / "config.json", says):
        load_checkpoint(hf)


def test_hf_mxfp4_tensors(hf):
    def to_blocks(t):  # the name is what tells: the bytes are not repacked
        t["model.layers.1.mlp.experts.down_proj_blocks"] = t.pop("model.layers.1.mlp.experts.down_proj")

    edit_safetensors(hf, to_blocks)
    with raises(WeightError, hf, "'model.layers.1.mlp.experts.down_proj_blocks'", "MXFP4"):
        load_checkpoint(hf)


def test_hf_missing_expert_bias(hf):
    edit_safetensors(hf, lambda t: t.pop("model.layers.2.mlp.experts.gate_up_proj_bias"))
    with raises(WeightError, hf, "missing tensor 'model.layers.2.mlp.experts.gate_up_proj_bias'"):
        load_checkpoint(hf)


def test_hf_experts_of_the_wrong_width(hf):
    edit_config(hf, lambda c: c.update(intermediate_size=16))
    with raises(WeightError, hf, "'model.layers.0.mlp.experts.gate_up_proj' has shape (4, 64, 64)", "(4, 64, 32)"):
        load_checkpoint(hf)


def test_hf_missing_sinks(hf):
    edit_safetensors(hf, lambda t: t.pop("model.layers.3.self_attn.sinks"))
    with raises(WeightError, hf, "missing tensor 'blk.3.attn_sinks.weight'"):
        load_checkpoint(hf)


# -- GGUF --------------------------------------------------------------------------------------------------


def test_gguf_fused_gate_up(saved, tmp_path):
    def fuse(t):
        t["blk.0.ffn_gate_up_exps.weight"] = np.concatenate([t.pop("blk.0.ffn_gate_exps.weight"),
                                                             t.pop("blk.0.ffn_up_exps.weight")], axis=1)

    path = write_gguf(saved, NAME, "F32", tmp_path / "m.gguf", edit=fuse)
    with raises(ConfigError, path, "'ffn_gate_up_exps'"):
        load_checkpoint(path)


def test_gguf_other_gating(saved, tmp_path):
    path = write_gguf(saved, NAME, "F32", tmp_path / "m.gguf", add_keys={"gpt-oss.expert_gating_func": 1})
    with raises(ConfigError, path, "'gpt-oss.expert_gating_func' = 1"):
        load_checkpoint(path)


@pytest.mark.parametrize("key", ["expert_feed_forward_length", "expert_used_count", "attention.sliding_window"])
def test_gguf_missing_key(saved, tmp_path, key):
    path = write_gguf(saved, NAME, "F32", tmp_path / "m.gguf", drop_keys=(f"gpt-oss.{key}",))
    with raises(ConfigError, path, f"'gpt-oss.{key}'"):
        load_checkpoint(path)


def test_gguf_missing_sinks(saved, tmp_path):
    path = write_gguf(saved, NAME, "F32", tmp_path / "m.gguf", edit=lambda t: t.pop("blk.1.attn_sinks.weight"))
    with raises(WeightError, path, "missing tensor 'blk.1.attn_sinks.weight'"):
        load_checkpoint(path)


