"""The wave-2 families on engine-cpu's fast path (numba, f32 activations) against HuggingFace: the same
random models and files as test_parity_families.py, the same bounds (claim 16's): logits max |Δ| <= 5e-5,
argmax equal at every position, cached decode equal to full recompute within 5e-5.

The six wave-1 families are proven on numba elsewhere (real checkpoints through tests/unit/enginecpu and
tests/unit/kv); this file covers the families whose blocks are new: OLMo2's post-norm and full-width q/k
norms, the routed experts of Qwen3-MoE, OLMoE and GraniteMoE, the classic decoders (GPT-NeoX, StableLM, Phi-3,
Granite, Falcon), the RoPE scalings (linear, YaRN, dynamic NTK) on Llama and Qwen2 blocks, and MPT's ALiBi
(the attention kernel's per-head position bias, power-of-two and other head counts) with clip_qkv, and gpt-oss
(the attention kernel's sinks, the swiglu_oai kernel, biased router and experts).
"""

from __future__ import annotations

import pytest

from .support import FAMILIES, FORMATS, SEQ, export, measure, tokens_for
from .test_parity_families import CACHED_BOUND, LOGITS_BOUND

WAVE2 = ("olmo2", "qwen3moe", "qwen3moe-mixed", "qwen3moe-unnormed", "qwen2moe-step2", "olmoe", "olmoe-normed", "granitemoe", "gpt_oss",
         "gpt_oss-clamped")
# the classic decoders: LayerNorm, partial RoPE, parallel residuals, the plain GELU MLP, Granite's multipliers
CLASSIC = ("gptneox", "gptneox-sequential", "gptneox-gelu-new", "stablelm", "stablelm-parallel", "phi3", "phi3-longrope",
           "granite", "falcon", "falcon-1ln", "falcon-7b", "falcon-sequential")
# RoPE scaling: linear, YaRN (the attention factor on cos/sin), dynamic NTK within its context
ROPE = ("llama-linear", "llama-yarn", "qwen2-yarn", "llama-yarn-mscale", "llama-dynamic")
# ALiBi instead of RoPE: 4, 6 and 5 heads, clip_qkv, a softmax_scale
ALIBI = ("mpt", "mpt-6heads", "mpt-softmax-scale")
CASES = [(name, fmt) for name in WAVE2 + CLASSIC + ROPE + ALIBI if name in FAMILIES for fmt in FORMATS
         if fmt == "safetensors" or FAMILIES[name].gguf_ok]


@pytest.mark.parametrize(("name", "fmt"), CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_numba_logits_match_huggingface(name, fmt, tmp_path):
    model, path = export(name, fmt, tmp_path)
    m = measure(f"{name} / {fmt} / numba", path, model, tokens_for(), backend="numba")
    assert m.logits_max_abs <= LOGITS_BOUND
    assert m.argmax_agree == m.positions == SEQ
    assert m.cached_max_abs <= CACHED_BOUND
