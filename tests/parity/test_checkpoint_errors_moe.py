"""The mixture-of-experts families' unsupported combinations and broken files are explicit errors naming the file
and the field or tensor: OLMoE with clamped q/k/v, with a head_dim its q/k norms do not span, with attention
biases, with an expert missing, with shared experts in a GGUF; GraniteMoE with a shared expert under its own
model_type (only granitemoeshared has one), with fused experts of the wrong size, without RoPE; GraniteMoeShared
with its shared expert's tensors missing, misshapen or unannounced (no `expert_shared_feed_forward_length`), more
than one shared expert; Qwen2-MoE with dense layers among the sparse ones, without its shared expert, with sliding
windows, with a shared expert gate or shared tensor of the wrong shape or missing; any of them with another gating
function or a missing expert count in a GGUF."""

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
    return {name: save_hf(build_hf_model(name), root / name) for name in ("olmoe", "granitemoe", "granitemoeshared",
                                                                           "qwen2moe")}


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


def test_granitemoeshared_without_its_shared_tensors(granitemoe):
    edit_config(granitemoe, lambda c: c.update(model_type="granitemoeshared", shared_intermediate_size=64))
    with raises(WeightError, granitemoe, "missing tensor 'blk.0.ffn_down_shexp.weight'"):
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


def test_granitemoe_gguf_shared_expert_tensors_without_their_width(granitemoe, tmp_path):
    """llama.cpp loads a shared expert only with `expert_shared_feed_forward_length`: unannounced, it is extra."""
    def add_shared(t):
        t["blk.0.ffn_gate_shexp.weight"] = np.zeros((16, 64), np.float32)

    path = write_gguf(granitemoe, "granitemoe", "F32", tmp_path / "m.gguf", edit=add_shared)
    with raises(WeightError, path, "unexpected tensor 'blk.0.ffn_gate_shexp.weight' for granitemoe"):
        load_checkpoint(path)


def test_granitemoe_gguf_shared_width_without_its_tensors(saved, tmp_path):
    path = write_gguf(saved["granitemoe"], "granitemoe", "F32", tmp_path / "m.gguf",
                      add_keys={"granitemoe.expert_shared_feed_forward_length": 64})
    with raises(WeightError, path, "missing tensor 'blk.0.ffn_down_shexp.weight'"):
        load_checkpoint(path)


# -- GraniteMoeShared ------------------------------------------------------------------------------------


def test_granitemoeshared_gguf_misshapen_shared_tensor(saved, tmp_path):
    def shrink(t):
        t["blk.1.ffn_up_shexp.weight"] = t["blk.1.ffn_up_shexp.weight"][:32]

    path = write_gguf(saved["granitemoeshared"], "granitemoeshared", "F32", tmp_path / "m.gguf", edit=shrink)
    with raises(WeightError, path, "tensor 'blk.1.ffn_up_shexp.weight' has shape (32, 64), expected (64, 64)"):
        load_checkpoint(path)


def test_granitemoeshared_hf_fused_shared_expert_of_the_wrong_size(saved, tmp_path):
    hf = shutil.copytree(saved["granitemoeshared"], tmp_path / "granitemoeshared")
    edit_config(hf, lambda c: c.update(shared_intermediate_size=48))
    with raises(WeightError, hf, "'model.layers.0.shared_mlp.input_linear.weight' has 128 rows, expected 96"):
        load_checkpoint(hf)


def test_granitemoeshared_gguf_two_shared_experts(saved, tmp_path):
    path = write_gguf(saved["granitemoeshared"], "granitemoeshared", "F32", tmp_path / "m.gguf",
                      add_keys={"granitemoe.expert_shared_count": 2})
    with raises(ConfigError, path, "'granitemoe.expert_shared_count' = 2"):
        load_checkpoint(path)


# -- Qwen2-MoE -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "says"), [(dict(shared_expert_intermediate_size=0), "shared_expert_intermediate_size 0"),
                                              (dict(use_sliding_window=True), "use_sliding_window")],
                         ids=["no_shared_expert", "sliding_window"])
def test_qwen2moe_hf_unsupported(saved, tmp_path, change, says):
    hf = shutil.copytree(saved["qwen2moe"], tmp_path / "qwen2moe")
    edit_config(hf, lambda c: c.update(change))
    with raises(ConfigError, hf / "config.json", says):
        load_checkpoint(hf)


def test_qwen2moe_hf_dense_layer_the_file_does_not_hold(saved, tmp_path):
    """decoder_sparse_step 2 makes layers 0 and 2 dense: the file has their experts, not their MLPs."""
    hf = shutil.copytree(saved["qwen2moe"], tmp_path / "qwen2moe")
    edit_config(hf, lambda c: c.update(decoder_sparse_step=2))
    with raises(WeightError, hf, "missing tensor 'blk.0.ffn_down.weight'"):
        load_checkpoint(hf)


def test_qwen2moe_hf_missing_shared_expert_gate(saved, tmp_path):
    hf = shutil.copytree(saved["qwen2moe"], tmp_path / "qwen2moe")
    edit_safetensors(hf, lambda t: t.pop("model.layers.2.mlp.shared_expert_gate.weight"))
    with raises(WeightError, hf, "missing tensor 'blk.2.ffn_gate_inp_shexp.weight'"):
        load_checkpoint(hf)


@pytest.mark.parametrize(("tensor", "shape"), [("blk.1.ffn_gate_inp_shexp.weight", (32,)),
                                               ("blk.0.ffn_down_shexp.weight", (64, 32))],
                         ids=["gate", "down"])
def test_qwen2moe_gguf_misshapen_shared_tensor(saved, tmp_path, tensor, shape):
    def spoil(t):
        t[tensor] = np.zeros(shape, np.float32)

    path = write_gguf(saved["qwen2moe"], "qwen2moe", "F32", tmp_path / "m.gguf", edit=spoil)
    expected = {"gate": (64,), "down": (64, 64)}[tensor.split("_")[1]]
    with raises(WeightError, path, f"tensor {tensor!r} has shape {shape}, expected {expected}"):
        load_checkpoint(path)


def test_qwen2moe_gguf_missing_shared_tensor(saved, tmp_path):
    path = write_gguf(saved["qwen2moe"], "qwen2moe", "F32", tmp_path / "m.gguf",
                      edit=lambda t: t.pop("blk.2.ffn_up_shexp.weight"))
    with raises(WeightError, path, "missing tensor 'blk.2.ffn_up_shexp.weight'"):
        load_checkpoint(path)


def test_qwen2moe_gguf_two_shared_experts(saved, tmp_path):
    path = write_gguf(saved["qwen2moe"], "qwen2moe", "F32", tmp_path / "m.gguf",
                      add_keys={"qwen2moe.expert_shared_count": 2})
    with raises(ConfigError, path, "'qwen2moe.expert_shared_count' = 2"):
        load_checkpoint(path)


def test_qwen2moe_gguf_without_shared_width_sizes_it_by_feed_forward_length(saved, tmp_path):
    """llama.cpp's fallback: no `expert_shared_feed_forward_length`, the shared expert is feed_forward_length wide."""
    path = write_gguf(saved["qwen2moe"], "qwen2moe", "F32", tmp_path / "m.gguf",
                      drop_keys=("qwen2moe.expert_shared_feed_forward_length",))
    with raises(WeightError, path, "tensor 'blk.0.ffn_gate_shexp.weight' has shape (64, 64), expected (128, 64)"):
        load_checkpoint(path)


def test_granitemoe_gguf_without_rope(granitemoe, tmp_path):
    path = write_gguf(granitemoe, "granitemoe", "F32", tmp_path / "m.gguf",
                      add_keys={"granitemoe.rope.scaling.finetuned": 0})
    with raises(ConfigError, path, "'granitemoe.rope.scaling.finetuned'"):
        load_checkpoint(path)


# -- all: the GGUF expert keys ---------------------------------------------------------------------------

ARCH = {"olmoe": "olmoe", "granitemoe": "granitemoe", "granitemoeshared": "granitemoe", "qwen2moe": "qwen2moe"}


@pytest.mark.parametrize(("key", "value", "says"), [("expert_shared_feed_forward_length", 64, "shared experts"),
                                                    ("expert_shared_count", 1, "shared experts")],
                         ids=["shared_ffn", "shared_count"])
def test_olmoe_gguf_shared_experts(saved, tmp_path, key, value, says):
    path = write_gguf(saved["olmoe"], "olmoe", "F32", tmp_path / "m.gguf", add_keys={f"olmoe.{key}": value})
    with raises(ConfigError, path, says):
        load_checkpoint(path)


@pytest.mark.parametrize("name", list(ARCH))
def test_gguf_another_gating_function(saved, tmp_path, name):
    path = write_gguf(saved[name], name, "F32", tmp_path / "m.gguf", add_keys={f"{ARCH[name]}.expert_gating_func": 2})
    with raises(ConfigError, path, f"'{ARCH[name]}.expert_gating_func' = 2"):
        load_checkpoint(path)


@pytest.mark.parametrize("name", list(ARCH))
@pytest.mark.parametrize("key", ["expert_count", "expert_used_count"])
def test_gguf_missing_expert_count(saved, tmp_path, name, key):
    path = write_gguf(saved[name], name, "F32", tmp_path / "m.gguf", drop_keys=(f"{ARCH[name]}.{key}",))
    with raises(ConfigError, path, f"'{ARCH[name]}.{key}'"):
        load_checkpoint(path)
