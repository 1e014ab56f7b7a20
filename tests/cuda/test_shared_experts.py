"""A mixture of experts with a shared expert on "cuda" against "reference": the shared expert is one more resident
gated MLP and its gate one more (1, dim) matrix, so the cuda backend runs them with the kernels it has (host
arithmetic for the routing and the sums, as for routed experts: engine/transformer.py). A Qwen2-MoE-shaped layer
(q/k/v biases, the sigmoid-gated shared expert) and a GraniteMoeShared-shaped one (ungated): logits within
test_forward's LOGIT_TOL, argmax-exact.
"""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.engine.backend import Segment
from fakcore.engine.reference import ReferenceBackend
from fakcore.formats.tensor import Tensor
from fakcore.models.config import ModelConfig
from fakcore.models.shapes import expected_shapes
from tests.cuda.support import MODEL_LANES, cuda_backend, transformer
from tests.cuda.test_forward import LOGIT_TOL

TOKENS = np.array([1, 5, 7, 11, 3], np.int64)


def shared_moe(gated: bool) -> tuple[ModelConfig, dict[str, Tensor]]:
    """One layer, 4 experts of width 32 (top 2), a shared expert of width 32; random F32 weights."""
    cfg = ModelConfig(arch="qwen2moe" if gated else "granitemoe", vocab_size=48, dim=32, n_layers=1, n_heads=2,
                      n_kv_heads=1, head_dim=16, ffn_dim=64, norm_eps=1e-5, rope_theta=10000.0, context_length=256,
                      qkv_bias=gated, n_experts=4, n_experts_used=2, expert_ffn_dim=32, expert_weights_norm=not gated,
                      shared_expert_ffn_dim=32, shared_expert_gate=gated)
    rng = np.random.default_rng(3)
    tensors = {}
    for name, shape in expected_shapes(cfg).items():
        values = rng.standard_normal(shape) * (0.3 if len(shape) > 1 else 0.1) + name.endswith("norm.weight")
        tensors[name] = Tensor.from_array(name, values.astype(np.float32), "F32", "shared-moe")
    return cfg, tensors


@pytest.mark.parametrize("gated", [True, False], ids=["qwen2moe-gated", "granitemoeshared-ungated"])
def test_shared_expert_logits_match_the_reference(gated):
    cfg, tensors = shared_moe(gated)
    logits = []
    for be in (cuda_backend(MODEL_LANES), ReferenceBackend()):
        tf = transformer(be, tensors, cfg)
        assert tf.w.layers[0].shared is not None and (tf.w.layers[0].shared_gate is not None) == gated
        logits.append(tf.forward(TOKENS, [Segment(tf.new_cache(), slice(0, len(TOKENS)))]))
    ours, theirs = logits
    err = np.abs(ours - theirs).max()
    print(f"\nshared experts ({'gated' if gated else 'ungated'}): logits max|Δ| vs reference {err:.3g}")
    assert err <= LOGIT_TOL and (ours.argmax(-1) == theirs.argmax(-1)).all()
