"""A checkpoint that does not match its architecture fails at load time, naming the file and the tensor or
field: unknown architecture, missing / extra / misshapen tensors, missing metadata."""

from __future__ import annotations

import json
import re

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from fakcore.models.checkpoint import load_checkpoint
from fakcore.models.config import ConfigError
from fakcore.models.shapes import WeightError

from .support import build_hf_model, save_hf, vocab_metadata, write_gguf


@pytest.fixture
def hf_dir(tmp_path):
    return save_hf(build_hf_model("llama"), tmp_path / "hf")


def edit_safetensors(hf_dir, edit) -> None:
    tensors = load_file(hf_dir / "model.safetensors")
    edit(tensors)
    save_file(tensors, hf_dir / "model.safetensors", metadata={"format": "pt"})


def edit_config(hf_dir, edit) -> None:
    config = json.loads((hf_dir / "config.json").read_text())
    edit(config)
    (hf_dir / "config.json").write_text(json.dumps(config))


def raises(exc, path, *names):
    """pytest.raises whose message must name the path and every one of `names`."""
    return pytest.raises(exc, match=".*".join(re.escape(str(x)) for x in (path, *names)))


# -- GGUF ------------------------------------------------------------------------------------------------


def test_unknown_gguf_architecture(tmp_path):
    path = tmp_path / "gpt2.gguf"
    w = gguf.GGUFWriter(path, "gpt2")
    for key, value in vocab_metadata().items():
        w.add_array(key, value) if isinstance(value, list) else w.add_string(key, value) if isinstance(
            value, str) else w.add_uint32(key, value)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with raises(ConfigError, path, "general.architecture='gpt2'"):
        load_checkpoint(path)


def test_gguf_missing_tensor(hf_dir, tmp_path):
    path = write_gguf(hf_dir, "llama", "F32", tmp_path / "m.gguf", edit=lambda t: t.pop("blk.1.ffn_up.weight"))
    with raises(WeightError, path, "missing tensor 'blk.1.ffn_up.weight'"):
        load_checkpoint(path)


def test_gguf_extra_tensor(hf_dir, tmp_path):
    def add(t):
        t["blk.0.attn_q.bias"] = np.zeros(64, np.float32)

    path = write_gguf(hf_dir, "llama", "F32", tmp_path / "m.gguf", edit=add)
    with raises(WeightError, path, "unexpected tensor 'blk.0.attn_q.bias'"):
        load_checkpoint(path)


def test_gguf_wrong_shape(hf_dir, tmp_path):
    def shrink(t):
        t["blk.2.ffn_down.weight"] = t["blk.2.ffn_down.weight"][:, :96]

    path = write_gguf(hf_dir, "llama", "F32", tmp_path / "m.gguf", edit=shrink)
    with raises(WeightError, path, "'blk.2.ffn_down.weight' has shape (64, 96), expected (64, 128)"):
        load_checkpoint(path)


def test_gguf_missing_metadata(hf_dir, tmp_path):
    path = write_gguf(hf_dir, "llama", "F32", tmp_path / "m.gguf", drop_keys=("llama.block_count",))
    with raises(ConfigError, path, "'llama.block_count'"):
        load_checkpoint(path)


def test_gguf_rope_freqs_of_the_wrong_length(hf_dir, tmp_path):
    def cut(t):
        t["rope_freqs.weight"] = t["rope_freqs.weight"][:4]

    path = write_gguf(hf_dir, "llama", "F32", tmp_path / "m.gguf", edit=cut)
    with raises(WeightError, path, "'rope_freqs.weight' has 4 values, expected 8"):
        load_checkpoint(path)


# -- HuggingFace directories -----------------------------------------------------------------------------


def test_unknown_model_type(hf_dir):
    edit_config(hf_dir, lambda c: c.update(model_type="bert"))
    with raises(ConfigError, hf_dir / "config.json", "model_type='bert'"):
        load_checkpoint(hf_dir)


def test_hf_missing_tensor(hf_dir):
    edit_safetensors(hf_dir, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with raises(WeightError, hf_dir, "missing tensor 'blk.1.ffn_up.weight'"):
        load_checkpoint(hf_dir)


def test_hf_extra_tensor(hf_dir):
    edit_safetensors(hf_dir, lambda t: t.update({"model.layers.0.mlp.extra.weight": torch.zeros(4, 4)}))
    with raises(WeightError, hf_dir / "model.safetensors", "unexpected tensor 'model.layers.0.mlp.extra.weight'"):
        load_checkpoint(hf_dir)


def test_hf_wrong_shape(hf_dir):
    edit_safetensors(hf_dir, lambda t: t.update({"model.norm.weight": torch.ones(48)}))
    with raises(WeightError, hf_dir, "'output_norm.weight' has shape (48,), expected (64,)"):
        load_checkpoint(hf_dir)


def test_hf_missing_config_field(hf_dir):
    edit_config(hf_dir, lambda c: c.pop("hidden_size"))
    with raises(ConfigError, hf_dir / "config.json", "'hidden_size'"):
        load_checkpoint(hf_dir)


def test_unsupported_rope_type(hf_dir):
    # longrope is Phi-3's (models/phi3.py); the shared reader of every other family refuses it by name
    edit_config(hf_dir, lambda c: c.update(rope_parameters={"rope_type": "longrope", "factor": 4.0, "rope_theta": 1e4}))
    with raises(ConfigError, hf_dir / "config.json", "rope type 'longrope'"):
        load_checkpoint(hf_dir)


def test_not_a_checkpoint(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    with raises(ConfigError, tmp_path, "neither a HuggingFace checkpoint"):
        load_checkpoint(tmp_path)


def test_a_directory_with_one_gguf_loads_it(hf_dir, tmp_path):
    (tmp_path / "only").mkdir()
    path = write_gguf(hf_dir, "llama", "F16", tmp_path / "only" / "m.gguf")
    assert load_checkpoint(tmp_path / "only").source == str(path)
