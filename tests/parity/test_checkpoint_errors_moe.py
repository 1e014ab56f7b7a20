"""OLMoE's and GraniteMoE's unsupported combinations and broken files are explicit errors naming the file and the
field or tensor: OLMoE with clamped q/k/v, with a head_dim its q/k norms do not span, with attention biases,
with an expert missing; GraniteMoE with shared experts (config.json, GraniteMoeShared's model_type, the keys and
tensors the converter writes for it), with fused experts of the wrong size, without RoPE; either with shared
experts, another gating function or a missing expert count in a GGUF."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from fakcore.models.checkpoint import load_checkpoint
from fakcore.models.config import ConfigError
from fakcore.models.shapes import WeightError

from .support import build_hf_model, save_hf, write_gguf
from .test_checkpoint_errors import edit_config, edit_safetensors, raises


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One saved checkpoint per family, built once."""
    root = tmp_path_factory.mktemp("moe")
    return {name: save_hf(build_hf_model(name), root / name) for name in ("olmoe", "granitemoe")}


@pytest.fixture
def olmoe(saved, tmp_path):
    """A fresh copy of the OLMoE checkpoint, to spoil."""
    return shutil.copytree(saved["olmoe"], tmp_path / "olmoe")


@pytest.fixture
def granitemoe(saved, tmp_path):
    """A fresh copy of the GraniteMoE checkpoint, to spoil."""
    return shutil.copytree(saved["granitemoe"], tmp_path / "granitemoe")


# -- OLMoE -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "says"), [(dict(clip_qkv=8.0), "clip_qkv"), (dict(head_dim=8), "head_dim 8"),
                                              (dict(attention_bias=True), "attention_bias")],
                         ids=["clip_qkv", "head_dim", "attention_bias"])
def test_olmoe_hf_unsupported(olmoe, change, says):
    edit_config(olmoe, lambda c: c.update(change))
    with raises(ConfigError, olmoe / "config.json", says):
        load_checkpoint(olmoe)


def test_olmoe_hf_missing_expert(olmoe):
    edit_safetensors(olmoe, lambda t: t.pop("model.layers.1.mlp.experts.5.up_proj.weight"))
    with raises(WeightError, olmoe, "missing tensor 'model.layers.1.mlp.experts.5.up_proj.weight'"):
        load_checkpoint(olmoe)


def test_olmoe_gguf_missing_q_norm(olmoe, tmp_path):
    path = write_gguf(olmoe, "olmoe", "F32", tmp_path / "m.gguf", edit=lambda t: t.pop("blk.1.attn_q_norm.weight"))
    with raises(WeightError, path, "missing tensor 'blk.1.attn_q_norm.weight'"):
        load_checkpoint(path)


# -- GraniteMoE ------------------------------------------------------------------------------------------


def test_granitemoe_hf_shared_experts(granitemoe):
    edit_config(granitemoe, lambda c: c.update(shared_intermediate_size=64))
    with raises(ConfigError, granitemoe / "config.json", "shared experts", "shared_intermediate_size"):
        load_checkpoint(granitemoe)


def test_granitemoeshared_is_another_architecture(granitemoe):
    edit_config(granitemoe, lambda c: c.update(model_type="granitemoeshared", shared_intermediate_size=64))
    with raises(ConfigError, granitemoe / "config.json", "model_type='granitemoeshared'"):
        load_checkpoint(granitemoe)


def test_granitemoe_hf_fused_experts_of_the_wrong_size(granitemoe):
    edit_config(granitemoe, lambda c: c.update(intermediate_size=16))
    with raises(WeightError, granitemoe, "'model.layers.0.block_sparse_moe.input_linear.weight' has shape (8, 64, 64)",
                "(8, 32, 64)"):
        load_checkpoint(granitemoe)


def test_granitemoe_hf_missing_fused_experts(granitemoe):
    edit_safetensors(granitemoe, lambda t: t.pop("model.layers.2.block_sparse_moe.input_linear.weight"))
    with raises(WeightError, granitemoe, "missing tensor 'blk.2.ffn_gate_exps.weight'"):
        load_checkpoint(granitemoe)


def test_granitemoe_gguf_shared_expert_tensors(granitemoe, tmp_path):
    def add_shared(t):
        t["blk.0.ffn_gate_shexp.weight"] = np.zeros((16, 64), np.float32)

    path = write_gguf(granitemoe, "granitemoe", "F32", tmp_path / "m.gguf", edit=add_shared)
    with raises(ConfigError, path, "shared experts"):
        load_checkpoint(path)


def test_granitemoe_gguf_without_rope(granitemoe, tmp_path):
    path = write_gguf(granitemoe, "granitemoe", "F32", tmp_path / "m.gguf",
                      add_keys={"granitemoe.rope.scaling.finetuned": 0})
    with raises(ConfigError, path, "'granitemoe.rope.scaling.finetuned'"):
        load_checkpoint(path)


# -- both: the GGUF expert keys --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["olmoe", "granitemoe"])
@pytest.mark.parametrize(("key", "value", "says"), [("expert_shared_feed_forward_length", 64, "shared experts"),
                                                    ("expert_shared_count", 1, "shared experts"),
                                                    ("expert_gating_func", 2, "expert_gating_func")],
                         ids=["shared_ffn", "shared_count", "gating"])
def test_gguf_unsupported_moe(saved, tmp_path, name, key, value, says):
    path = write_gguf(saved[name], name, "F32", tmp_path / "m.gguf", add_keys={f"{name}.{key}": value})
    with raises(ConfigError, path, says):
        load_checkpoint(path)


@pytest.mark.parametrize("name", ["olmoe", "granitemoe"])
@pytest.mark.parametrize("key", ["expert_count", "expert_used_count"])
def test_gguf_missing_expert_count(saved, tmp_path, name, key):
    path = write_gguf(saved[name], name, "F32", tmp_path / "m.gguf", drop_keys=(f"{name}.{key}",))
    with raises(ConfigError, path, f"'{name}.{key}'"):
        load_checkpoint(path)
