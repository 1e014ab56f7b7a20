"""The sampling a checkpoint's makers recorded in the file: GGUF `general.sampling.*` (as llama.cpp's converter
writes them) and a safetensors checkpoint's generation_config.json; a malformed value names the file and key."""

from __future__ import annotations

import json

import pytest

from fakcore.engine.loader import load_model
from fakcore.engine.reference import ReferenceBackend
from fakcore.models.checkpoint import load_checkpoint
from fakcore.models.sources import ModelSourceError

from .support import build_hf_model, save_hf, write_gguf


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return save_hf(build_hf_model("llama"), tmp_path_factory.mktemp("hf") / "hf")


def test_a_gguf_carries_its_makers_sampling_and_the_engine_takes_it(hf_dir, tmp_path):
    keys = {"general.sampling.temp": 0.6, "general.sampling.top_p": 0.875, "general.sampling.top_k": -1}
    path = write_gguf(hf_dir, "llama", "F32", tmp_path / "m.gguf", add_keys=keys)
    assert load_checkpoint(path).sampling == {"temperature": 0.6, "top_p": 0.875, "top_k": 0}  # top_k -1: off
    assert load_model(str(path), ReferenceBackend()).sampling == {"temperature": 0.6, "top_p": 0.875, "top_k": 0}
    plain = write_gguf(hf_dir, "llama", "F32", tmp_path / "plain.gguf")
    assert load_checkpoint(plain).sampling == {}  # says nothing: the worker's fallback applies


def test_a_malformed_sampling_key_names_the_file_and_the_key(hf_dir, tmp_path):
    path = write_gguf(hf_dir, "llama", "F32", tmp_path / "bad.gguf", add_keys={"general.sampling.temp": "warm"})
    with pytest.raises(ModelSourceError, match=f"^{path}: GGUF metadata `general.sampling.temp` must be a number"):
        load_checkpoint(path)


def test_a_safetensors_checkpoint_reads_its_generation_config(hf_dir, tmp_path):
    (hf_dir / "generation_config.json").write_text(json.dumps({"do_sample": True, "temperature": 0.7, "top_k": 20}))
    try:
        assert load_checkpoint(hf_dir).sampling == {"temperature": 0.7, "top_k": 20}
    finally:
        (hf_dir / "generation_config.json").unlink()
