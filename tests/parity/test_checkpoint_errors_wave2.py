"""The wave-2 families' unsupported combinations and broken files are explicit errors naming the file and the
field or tensor: Qwen3-MoE with shared experts, with dense layers the file does not hold or the model does not
have, with every layer dense, with another gating
function, with an expert missing; OLMo2 with attention biases."""

from __future__ import annotations

import pytest

from fakcore.models.checkpoint import load_checkpoint
from fakcore.models.config import ConfigError
from fakcore.models.shapes import WeightError

from .support import build_hf_model, save_hf, write_gguf
from .test_checkpoint_errors import edit_config, edit_safetensors, raises


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return save_hf(build_hf_model("qwen3moe"), tmp_path_factory.mktemp("moe") / "hf")


@pytest.fixture
def moe(moe_dir, tmp_path):
    """A fresh copy of the MoE checkpoint, to spoil."""
    import shutil

    return shutil.copytree(moe_dir, tmp_path / "hf")


def test_hf_shared_experts(moe):
    edit_config(moe, lambda c: c.update(shared_expert_intermediate_size=64))
    with raises(ConfigError, moe / "config.json", "shared experts"):
        load_checkpoint(moe)


@pytest.mark.parametrize(("change", "says"), [(dict(mlp_only_layers=[1]), "missing tensor 'blk.1.ffn_down.weight'"),
                                              (dict(decoder_sparse_step=2), "missing tensor 'blk.0.ffn_down.weight'")],
                         ids=["mlp_only", "step"])
def test_hf_dense_layers_the_file_does_not_hold(moe, change, says):
    """A config that makes a layer dense (mlp_only_layers, decoder_sparse_step) where the file has its experts."""
    edit_config(moe, lambda c: c.update(change))
    with raises(WeightError, moe, says):
        load_checkpoint(moe)


@pytest.mark.parametrize(("change", "says"), [
    (dict(mlp_only_layers=[7]), "mlp_only_layers [7] names layers the model does not have (3)"),
    (dict(decoder_sparse_step=0), "decoder_sparse_step 0 is not positive"),
    (dict(mlp_only_layers=[0, 1, 2]), "every layer is dense"),
], ids=["no_such_layer", "step_0", "all_dense"])
def test_hf_dense_layer_settings_that_name_no_model(moe, change, says):
    edit_config(moe, lambda c: c.update(change))
    with raises(ConfigError, moe / "config.json", says):
        load_checkpoint(moe)


def test_hf_missing_expert(moe):
    edit_safetensors(moe, lambda t: t.pop("model.layers.1.mlp.experts.5.up_proj.weight"))
    with raises(WeightError, moe, "missing tensor 'model.layers.1.mlp.experts.5.up_proj.weight'"):
        load_checkpoint(moe)


def test_hf_expert_out_of_range(moe):
    edit_config(moe, lambda c: c.update(num_local_experts=4))
    with raises(WeightError, moe / "model.safetensors", "unexpected tensor 'model.layers.0.mlp.experts.4."):
        load_checkpoint(moe)


@pytest.mark.parametrize(("key", "value", "says"), [("qwen3moe.expert_shared_count", 1, "shared experts"),
                                                    ("qwen3moe.expert_gating_func", 2, "expert_gating_func")])
def test_gguf_unsupported_moe(moe, tmp_path, key, value, says):
    path = write_gguf(moe, "qwen3moe", "F32", tmp_path / "m.gguf", add_keys={key: value})
    with raises(ConfigError, path, says):
        load_checkpoint(path)


def test_gguf_missing_expert_tensor(moe, tmp_path):
    path = write_gguf(moe, "qwen3moe", "F32", tmp_path / "m.gguf", edit=lambda t: t.pop("blk.2.ffn_down_exps.weight"))
    with raises(WeightError, path, "missing tensor 'blk.2.ffn_down_exps.weight'"):
        load_checkpoint(path)


def test_gguf_missing_expert_count(moe, tmp_path):
    path = write_gguf(moe, "qwen3moe", "F32", tmp_path / "m.gguf", drop_keys=("qwen3moe.expert_used_count",))
    with raises(ConfigError, path, "qwen3moe.expert_used_count"):
        load_checkpoint(path)


def test_olmo2_attention_bias(tmp_path):
    hf = save_hf(build_hf_model("olmo2"), tmp_path / "hf")
    edit_config(hf, lambda c: c.update(attention_bias=True))
    with raises(ConfigError, hf / "config.json", "attention_bias"):
        load_checkpoint(hf)
