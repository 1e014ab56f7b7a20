"""The classic decoders and gpt-oss on engine-cuda, against the reference backend on the same checkpoint.

The ops they add beyond a Llama's run as kernels: LayerNorm with and without bias (per-head gains for
StableLM's qk-norm), plain GELU (erf and tanh), partial rotary, the longrope / YaRN attention factor, the
residual and logit scales (Granite), MPT's ALiBi and clip_qkv clamp, gpt-oss's attention sinks and clamped
SwiGLU. Each family is a random-init HuggingFace model (tests/parity/support.py) saved as safetensors:

- logits within LOGIT_TOL of the reference backend's (relative to their largest magnitude) and argmax-exact;
- cached decode (a prefill, then a token a call) has the bits of the full recompute on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from fakcore.engine.transformer import Transformer, load_weights
from fakcore.models.checkpoint import load_checkpoint
from tests.cuda.support import MODEL_LANES, cuda_backend
from tests.parity.support import build_hf_model, fak_cached, fak_full, fak_transformer, save_hf, tokens_for

LOGIT_TOL = 1e-4  # max |Δ| against the reference, over the largest logit magnitude (at least 1)
TOKENS = tokens_for(3)[:10]
PREFILL = 6
FAMILIES = {  # what each adds on the device
    "gptneox": "LayerNorm with bias, erf GELU, partial rotary, parallel residual",
    "stablelm": "per-head qk LayerNorm, partial rotary, qkv bias",
    "phi3-longrope": "longrope's attention factor, fused qkv / gate_up",
    "falcon-7b": "multi-query, parallel attention, LayerNorm",
    "mpt-6heads": "ALiBi over 6 heads, clip_qkv, LayerNorm without bias",
    "granite": "residual, embedding and logit multipliers",
    "gpt_oss-clamped": "attention sinks, the clamped SwiGLU, sliding layers, YaRN",
    "llama-yarn-mscale": "YaRN's attention factor",
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    name = request.param
    path = save_hf(build_hf_model(name), tmp_path_factory.mktemp(name) / "hf")
    ckpt = load_checkpoint(path)
    be = cuda_backend(MODEL_LANES)
    return Family(name, Transformer(ckpt.config, load_weights(ckpt.config, ckpt.tensors, be, ckpt.source), be),
                  fak_transformer(ckpt, "reference"))


@dataclass
class Family:
    name: str
    cuda_tf: Transformer
    ref_tf: Transformer
    _full: np.ndarray | None = None

    def full(self) -> np.ndarray:
        """The device's full forward of TOKENS, computed once for both tests (~20 s a family in the simulator),
        in the first test that asks: run in a fixture's setup, the simulator takes ~5x as long (not understood)."""
        if self._full is None:
            self._full = fak_full(self.cuda_tf, TOKENS)
        return self._full


def test_logits_match_the_reference_backend(family):
    name, ref_tf = family.name, family.ref_tf
    ours, theirs = family.full(), fak_full(ref_tf, TOKENS)
    err = float(np.abs(ours - theirs).max())
    print(f"\n{name} ({FAMILIES[name]}): cuda logits max|Δ| vs reference {err:.3g}")
    assert err <= LOGIT_TOL * max(1.0, float(np.abs(theirs).max()))
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()


def test_cached_decode_has_the_bits_of_a_full_recompute(family):
    assert np.array_equal(fak_cached(family.cuda_tf, TOKENS, PREFILL), family.full())
