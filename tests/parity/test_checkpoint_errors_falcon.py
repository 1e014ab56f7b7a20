"""Falcon's unsupported combinations and broken files are explicit errors naming the file and the field or
tensor (alibi, a new-architecture block without parallel_attn, key/value heads the original architecture
does not have, another activation, another GGUF qkv layout, a fused qkv of the wrong size), and an original
config.json that leaves FalconConfig's defaults out (Falcon-7B's: n_embed, no num_kv_heads, no flags) reads
as transformers reads it."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from fakcore.models.checkpoint import load_checkpoint
from fakcore.models.config import ConfigError
from fakcore.models.shapes import WeightError

from .support import build_hf_model, fak_full, fak_transformer, hf_logits, save_hf, tokens_for, write_gguf
from .test_checkpoint_errors import edit_config, edit_safetensors, raises
from .test_parity_families import LOGITS_BOUND


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("falcon")
    return {name: save_hf(build_hf_model(name), root / name) for name in ("falcon", "falcon-7b")}


@pytest.fixture
def copy(saved, tmp_path):
    return lambda name: shutil.copytree(saved[name], tmp_path / name)


@pytest.mark.parametrize(("name", "change", "says"), [
    ("falcon-7b", dict(alibi=True), "alibi"),
    ("falcon", dict(parallel_attn=False), "parallel_attn false"),
    ("falcon-7b", dict(multi_query=False, num_kv_heads=2), "num_kv_heads 2"),
    ("falcon", dict(activation="relu"), "activation 'relu'"),
], ids=["alibi", "new-sequential", "original-gqa", "act"])
def test_unsupported_falcon_fields(copy, name, change, says):
    hf = copy(name)
    edit_config(hf, lambda c: c.update(change))
    with raises(ConfigError, hf / "config.json", says):
        load_checkpoint(hf)


def test_falcon_fused_qkv_of_the_wrong_size(copy):
    hf = copy("falcon-7b")  # 4 query heads + one key + one value head of 16 rows
    name = "transformer.h.1.self_attention.query_key_value.weight"
    edit_safetensors(hf, lambda t: t.update({name: t[name][:-16].contiguous()}))
    with raises(WeightError, hf / "model.safetensors", name, "80 rows, expected 96"):
        load_checkpoint(hf)


def test_falcon_gguf_with_another_qkv_layout(saved, tmp_path):
    path = write_gguf(saved["falcon"], "falcon", "F32", tmp_path / "f.gguf", drop_keys=("falcon.tensor_data_layout",),
                      add_keys={"falcon.tensor_data_layout": "interleaved"})
    with raises(ConfigError, path, "falcon.tensor_data_layout", "interleaved"):
        load_checkpoint(path)


def test_falcon_gguf_with_half_the_second_norms(saved, tmp_path):
    path = write_gguf(saved["falcon"], "falcon", "F32", tmp_path / "f.gguf",
                      edit=lambda t: [t.pop(f"blk.2.attn_norm_2.{k}") for k in ("weight", "bias")])
    with pytest.raises(WeightError, match=f"{path}.*ffn_norm"):  # layer 2's one norm left is the MLP's, not shared
        load_checkpoint(path)


def test_falcon_7b_original_config_reads_as_transformers_does(copy):
    full = copy("falcon-7b")
    bare = full.parent / "bare"
    shutil.copytree(full, bare)
    defaults = ("new_decoder_architecture", "multi_query", "parallel_attn", "bias", "alibi", "activation",
                "num_kv_heads", "ffn_hidden_size", "layer_norm_epsilon", "max_position_embeddings",
                "num_ln_in_parallel_attn", "intermediate_size", "num_key_value_heads", "rms_norm_eps")

    def original(c):
        for key in defaults:
            c.pop(key, None)
        c["n_embed"] = c.pop("hidden_size")
        c["max_position_embeddings"] = 256  # FalconConfig's default is 2048; kept so the configs compare equal

    edit_config(bare, original)
    assert load_checkpoint(bare).config == load_checkpoint(full).config
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(bare, attn_implementation="eager", dtype=torch.float32).eval()
    assert (model.config.num_kv_heads, model.config.hidden_size) == (4, 64)  # transformers' defaults, unused: MQ
    tokens = tokens_for()
    got = fak_full(fak_transformer(load_checkpoint(bare)), tokens)
    np.testing.assert_allclose(got, hf_logits(model, tokens), atol=LOGITS_BOUND, rtol=0)
