"""The real SmolLM2-135M Q4_1 GGUF (Q4_1, Q8_0 and F32 tensors, GPT-2 BPE tokenizer): every tensor and
metadata value must equal what the `gguf` package reads. Needs `fak model pull smollm2-135m` first; a missing
file is a failure, not a skip, so that CI cannot go green without having looked at real weights."""

import time

import gguf
import numpy as np
import pytest

from fakcore.formats import GGUFFile
from fakcore.models.sources import pulled_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_path():
    path = pulled_path("smollm2-135m")
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `fak model pull smollm2-135m` first")
    return path


@pytest.fixture(scope="module")
def reader(model_path):
    return gguf.GGUFReader(model_path)  # slow to open (seconds): shared


def test_every_tensor_matches_gguf_reader(model_path, reader):
    started = time.perf_counter()
    f = GGUFFile(model_path)
    opened = time.perf_counter()
    decoded = {name: t.dequantize() for name, t in f.tensors.items()}
    finished = time.perf_counter()
    n_params = sum(values.size for values in decoded.values())
    print(f"\nSmolLM2-135M Q4_1: open {opened - started:.3f}s, dequantize {n_params / 1e6:.1f}M params "
          f"{finished - opened:.2f}s")

    assert list(f.tensors) == [t.name for t in reader.tensors]
    assert {t.qtype for t in f.tensors.values()} == {"Q4_1", "Q8_0", "F32"}
    for ref in reader.tensors:
        expected = np.ascontiguousarray(gguf.quants.dequantize(ref.data, ref.tensor_type), np.float32)
        got = decoded[ref.name]
        assert got.shape == expected.shape == f.tensors[ref.name].shape, ref.name
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32)), ref.name
    assert f.tensor("token_embd.weight").shape == (49152, 576)
    f.close()


def test_metadata_matches_gguf_reader(model_path, reader):
    with GGUFFile(model_path) as f:
        for key, field in reader.fields.items():
            if not key.startswith("GGUF."):
                assert f.metadata[key] == field.contents(), key
        assert f.architecture == "llama" and f.get("tokenizer.ggml.model") == "gpt2"
        assert len(f.get("tokenizer.ggml.tokens")) == 49152 == len(f.get("tokenizer.ggml.token_type"))
        assert f.get("llama.block_count") == 30 and f.get("llama.attention.head_count_kv") == 3
