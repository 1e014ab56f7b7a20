"""Parity fixtures: tiny random HuggingFace models of every family, written as a safetensors checkpoint and
as GGUF files the way llama.cpp's convert_hf_to_gguf writes them, and fak run on what was written.

The GGUF writer follows the converter step by step (names through `gguf.get_tensor_name_map`, Q/K row
permutation for llama, granite and granitemoe, +1 on Gemma norm gains, `rope_freqs` for Llama-3 scaling, MoE experts
stacked per layer into `ffn_*_exps` (Qwen2MoeModel / OlmoeModel.modify_tensors), GraniteMoE's fused input_linear split
into `ffn_gate_exps` / `ffn_up_exps` and GraniteMoeShared's shared_mlp.input_linear into `ffn_gate_shexp` /
`ffn_up_shexp` (GraniteMoeModel.modify_tensors), Qwen2-MoE's (1, dim) shared expert gate squeezed to (dim,) and kept
F32 (prepare_tensors), GPT-NeoX's per-head qkv rows regrouped into
[q; k; v] (GPTNeoXModel.modify_tensors), StableLM's per-head q/k norms stacked (StableLMModel._stack_qk_norm),
Phi-3's longrope factor tensors (Phi3MiniModel.generate_extra_tensors), Falcon's qkv rows regrouped from kv groups
into [q; k; v] (FalconModel.modify_tensors), MPT's config.json names read and its ALiBi / clamp keys written
(MPTModel.set_gguf_parameters), norms, biases and the MoE router kept
F32, metadata keys as its TextModel / LlamaModel / Gemma2Model / Gemma3Model / GPTNeoXModel / StableLMModel /
Phi3MiniModel / GraniteModel / OlmoeModel write them). Deliberate deviations: a Mistral file also gets
`llama.attention.sliding_window`, which the converter drops; the partial rotary factor is read from
transformers 5's `rope_parameters` where the converters read `rotary_pct` / `partial_rotary_factor` at the top
level of config.json (rotary_factor); a multi-query Falcon gets one key/value head (falcon_kv_heads); transformers'
MPT is made to build its ALiBi with the config's alibi_bias_max, as the original and llama.cpp do (mpt_alibi_bias_max).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from safetensors.torch import load_file

from fakcore.engine.backend import Segment
from fakcore.engine.reference import ReferenceBackend
from fakcore.engine.transformer import Transformer, load_weights
from fakcore.formats.quants import quantize
from fakcore.formats.tensor import Tensor
from fakcore.models.checkpoint import Checkpoint, load_checkpoint
from fakcore.text.tokenizer import Tokenizer, bytes_to_unicode

VOCAB = 320  # 256 bytes + 63 merges + <|endoftext|>
EOS = VOCAB - 1
SEQ = 40  # test sequence length; every sliding window below is shorter
PREFILL = SEQ // 2
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6,
              initializer_range=0.2, bos_token_id=EOS, eos_token_id=EOS, pad_token_id=None)


@dataclass(frozen=True)
class Family:
    model_type: str
    gguf_arch: str
    config: dict[str, Any]
    gguf_ok: bool = True  # False: the config cannot be written as GGUF (a field llama.cpp does not keep)
    extra_meta: dict[str, Any] = field(default_factory=dict)  # keys beyond the converter's (documented)
    unset: tuple[str, ...] = ()  # COMMON keys the family's config has no field for (Falcon's head_dim is derived)


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64, "rope_theta": 10000.0}
NEOX_ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
           rope_parameters={"rope_type": "default", "rope_theta": 1e6})
QWEN35_ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0],
               "mrope_interleaved": True}
FALCON_UNSET = ("head_dim", "intermediate_size", "num_key_value_heads", "rms_norm_eps")  # Falcon's own names below
MPT_UNSET = FALCON_UNSET + ("max_position_embeddings",)  # MptConfig: max_seq_len, 4 * d_model, no grouped query
FAMILIES: dict[str, Family] = {
    # tied head, Llama-3 RoPE scaling with low, medium and high frequency bands at head_dim 16
    "llama": Family("llama", "llama", dict(num_hidden_layers=3, tie_word_embeddings=True, rope_parameters=LLAMA3_ROPE)),
    "mistral": Family("mistral", "llama", dict(num_hidden_layers=3, tie_word_embeddings=False, sliding_window=8,
                                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
                      extra_meta={"llama.attention.sliding_window": 8}),
    "qwen2": Family("qwen2", "qwen2", dict(num_hidden_layers=3, tie_word_embeddings=False, use_sliding_window=False,
                                           rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    "qwen3": Family("qwen3", "qwen3", dict(num_hidden_layers=3, tie_word_embeddings=True,
                                           rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    # even layers local (window 8), softcaps that bite; query_pre_attn_scalar = head_dim as llama.cpp assumes
    "gemma2": Family("gemma2", "gemma2", dict(num_hidden_layers=3, sliding_window=8, query_pre_attn_scalar=16,
                                              attn_logit_softcapping=3.0, final_logit_softcapping=4.0,
                                              hidden_activation="gelu_pytorch_tanh")),
    # a query_pre_attn_scalar GGUF cannot carry: safetensors only
    "gemma2-scalar": Family("gemma2", "gemma2", dict(num_hidden_layers=2, sliding_window=8, query_pre_attn_scalar=40,
                                                     attn_logit_softcapping=3.0, final_logit_softcapping=4.0),
                            gguf_ok=False),
    # llama.cpp's default period: layers 0-4 local (base 10k, window 8), layer 5 global (base 50k, linear x4)
    "gemma3": Family("gemma3_text", "gemma3", dict(
        num_hidden_layers=6, sliding_window=8, query_pre_attn_scalar=16,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 50000.0}})),
    # post-norm, full-width q/k norms (64 and 32 wide: grouped-query)
    "olmo2": Family("olmo2", "olmo2", dict(num_hidden_layers=3, tie_word_embeddings=False,
                                           rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    # 8 experts of width 32, top 2 renormalised (what llama.cpp assumes of every qwen3moe GGUF)
    "qwen3moe": Family("qwen3_moe", "qwen3moe", dict(num_hidden_layers=3, tie_word_embeddings=False, **MOE)),
    # dense layers among the sparse ones: layer 0 in mlp_only_layers, a SiLU MLP of intermediate_size; llama.cpp's
    # qwen3moe has no dense layer, so safetensors only
    "qwen3moe-mixed": Family("qwen3_moe", "qwen3moe", dict(num_hidden_layers=3, tie_word_embeddings=False,
                                                           mlp_only_layers=[0], **MOE), gguf_ok=False),
    # top 3 of 8 without renormalising: the converter writes no flag for it, so safetensors only
    "qwen3moe-unnormed": Family("qwen3_moe", "qwen3moe", dict(num_hidden_layers=2, tie_word_embeddings=True,
                                                              **(MOE | dict(num_experts_per_tok=3, norm_topk_prob=False))),
                                  gguf_ok=False),
    # OLMoE: pre-norm, full-width q/k norms, 8 experts of width 32 (intermediate_size), top 2 not renormalised (HF's
    # default and what llama.cpp assumes of every olmoe GGUF); RMSNorm epsilon 1e-5, which the converter always writes
    "olmoe": Family("olmoe", "olmoe", dict(num_hidden_layers=3, tie_word_embeddings=False, num_experts=8,
                                           num_experts_per_tok=2, intermediate_size=32, norm_topk_prob=False,
                                           rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # top 3 of 8 renormalised, a tied head: the converter writes no flag for norm_topk_prob, so safetensors only
    "olmoe-normed": Family("olmoe", "olmoe", dict(num_hidden_layers=2, tie_word_embeddings=True, num_experts=8,
                                                  num_experts_per_tok=3, intermediate_size=32, norm_topk_prob=True,
                                                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
                           gguf_ok=False),
    # the classic decoders. RoPE base 10000 for GPT-NeoX and StableLM: their converters write no rope.freq_base.
    # LayerNorms with biases, parallel residual, half of each head rotated, fused per-head qkv, exact GELU
    "gptneox": Family("gpt_neox", "gptneox", dict(num_hidden_layers=3, use_parallel_residual=True, hidden_act="gelu",
                                                   rope_parameters=NEOX_ROPE | {"partial_rotary_factor": 0.5})),
    # the sequential block, a quarter rotated (HuggingFace's default)
    "gptneox-sequential": Family("gpt_neox", "gptneox", dict(num_hidden_layers=2, use_parallel_residual=False,
                                                              hidden_act="gelu", rope_parameters=NEOX_ROPE)),
    # the tanh GELU, which a GGUF cannot say (it records no activation): safetensors only
    "gptneox-gelu-new": Family("gpt_neox", "gptneox", dict(num_hidden_layers=2, hidden_act="gelu_new",
                                                            rope_parameters=NEOX_ROPE), gguf_ok=False),
    # grouped-query, q/k/v biases, per-head q/k LayerNorms (gains per head), a quarter rotated
    "stablelm": Family("stablelm", "stablelm", dict(num_hidden_layers=3, use_qkv_bias=True, qk_layernorm=True,
                                                    rope_parameters=NEOX_ROPE | {"partial_rotary_factor": 0.25})),
    # parallel residual: one LayerNorm feeds attention and the MLP
    "stablelm-parallel": Family("stablelm", "stablelm", dict(num_hidden_layers=2, use_parallel_residual=True,
                                                             rope_parameters=NEOX_ROPE | {"partial_rotary_factor": 0.5})),
    # fused qkv and gate/up, three quarters rotated (Phi-4-mini's factor), a sliding window on every layer
    "phi3": Family("phi3", "phi3", dict(num_hidden_layers=3, sliding_window=8, tie_word_embeddings=False,
                                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                         "partial_rotary_factor": 0.75})),
    # LongRoPE: per-frequency divisors (the short set: 40 positions fit the original 64) and the attention
    # factor transformers derives from max / original (256 / 64), cos and sin scaled by it
    "phi3-longrope": Family("phi3", "phi3", dict(num_hidden_layers=2, original_max_position_embeddings=64,
                                                 rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                                  "partial_rotary_factor": 0.75,
                                                                  "short_factor": [1.0, 1.5, 2.0, 3.0, 5.0, 8.0],
                                                                  "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
                                                                  "original_max_position_embeddings": 64})),
    # the four multipliers (exact in float32, as GGUF stores them), a tied head
    "granite": Family("granite", "granite", dict(num_hidden_layers=3, tie_word_embeddings=True, embedding_multiplier=12.0,
                                                 residual_multiplier=0.25, attention_multiplier=0.125, logits_scaling=8.0,
                                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # Granite's multipliers with 8 fused experts of width 32 (intermediate_size), top 2 (softmax over their logits)
    "granitemoe": Family("granitemoe", "granitemoe", dict(num_hidden_layers=3, tie_word_embeddings=True, num_local_experts=8,
                                                          num_experts_per_tok=2, intermediate_size=32,
                                                          embedding_multiplier=12.0, residual_multiplier=0.25,
                                                          attention_multiplier=0.125, logits_scaling=8.0,
                                                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # Qwen2-MoE: q/k/v biases, 8 experts of width 32, top 2 not renormalised (HF's default and what llama.cpp
    # assumes of every qwen2moe GGUF), a shared expert of width 64 behind its sigmoid gate
    "qwen2moe": Family("qwen2_moe", "qwen2moe", dict(num_hidden_layers=3, tie_word_embeddings=False, num_experts=8,
                                                     num_experts_per_tok=2, moe_intermediate_size=32,
                                                     shared_expert_intermediate_size=64, norm_topk_prob=False,
                                                     use_sliding_window=False,
                                                     rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    # decoder_sparse_step 2: the experts (and the shared expert) on layer 1 only, layers 0 and 2 dense
    "qwen2moe-step2": Family("qwen2_moe", "qwen2moe", dict(num_hidden_layers=3, tie_word_embeddings=False, num_experts=8,
                                                           num_experts_per_tok=2, moe_intermediate_size=32,
                                                           shared_expert_intermediate_size=64, norm_topk_prob=False,
                                                           use_sliding_window=False, decoder_sparse_step=2,
                                                           rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
                             gguf_ok=False),
    # top 3 of 8 renormalised, a tied head: the converter writes no flag for norm_topk_prob, so safetensors only
    "qwen2moe-normed": Family("qwen2_moe", "qwen2moe", dict(num_hidden_layers=2, tie_word_embeddings=True, num_experts=8,
                                                            num_experts_per_tok=3, moe_intermediate_size=32,
                                                            shared_expert_intermediate_size=64, norm_topk_prob=True,
                                                            use_sliding_window=False,
                                                            rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
                              gguf_ok=False),
    # GraniteMoE with its ungated shared expert (fused gate/up, width 64), written by the converter as granitemoe
    "granitemoeshared": Family("granitemoeshared", "granitemoe", dict(num_hidden_layers=3, tie_word_embeddings=True,
                                                                      num_local_experts=8, num_experts_per_tok=2,
                                                                      intermediate_size=32, shared_intermediate_size=64,
                                                                      embedding_multiplier=12.0, residual_multiplier=0.25,
                                                                      attention_multiplier=0.125, logits_scaling=8.0,
                                                                      rope_parameters={"rope_type": "default",
                                                                                       "rope_theta": 10000.0})),
    # RoPE scaling on Llama and Qwen2 blocks. Linear: every frequency / 4.
    "llama-linear": Family("llama", "llama", dict(num_hidden_layers=2, tie_word_embeddings=False,
                                                  rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0})),
    # YaRN does not depend on the position: the original contexts make head_dim 16 keep some frequencies,
    # divide others and blend between (original 64: the ramp over dims 0-3), the attention factor the default
    # 1 + 0.1 ln 4 here, explicit in qwen2-yarn (with other betas), from mscale / mscale_all_dim in -mscale
    "llama-yarn": Family("llama", "llama", dict(num_hidden_layers=2, tie_word_embeddings=True, rope_parameters={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0})),
    "qwen2-yarn": Family("qwen2", "qwen2", dict(num_hidden_layers=2, tie_word_embeddings=False, use_sliding_window=False,
                                                rope_parameters={"rope_type": "yarn", "factor": 8.0, "rope_theta": 1e6,
                                                                 "original_max_position_embeddings": 32, "beta_fast": 8.0,
                                                                 "beta_slow": 0.5, "attention_factor": 1.25})),
    # mscale, mscale_all_dim and truncate, which the converter does not write: safetensors only
    "llama-yarn-mscale": Family("llama", "llama", dict(num_hidden_layers=2, tie_word_embeddings=True, rope_parameters={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0,
        "mscale": 1.0, "mscale_all_dim": 0.5, "truncate": False}), gguf_ok=False),
    # dynamic NTK within max_position_embeddings (64 > the 40 test positions): the plain rotation, as in
    # transformers; the converter writes no scaling for it (test_rope_scaling.py: past 64 is an error)
    # Falcon: LayerNorms with biases, a parallel block, one fused qkv in its own layout, exact GELU, a plain MLP
    # of 4 * hidden (FalconConfig's default, what the converter writes). The new architecture (40B): grouped
    # query (2 key/value heads of 4), two LayerNorms (ln_attn, ln_mlp), the tied head
    "falcon": Family("falcon", "falcon", dict(num_hidden_layers=3, new_decoder_architecture=True, num_kv_heads=2,
                                              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
                     unset=FALCON_UNSET),
    # the new architecture with one shared LayerNorm (Falcon2-11B), a key/value head per query head
    "falcon-1ln": Family("falcon", "falcon", dict(num_hidden_layers=2, new_decoder_architecture=True, num_kv_heads=4,
                                                  num_ln_in_parallel_attn=1,
                                                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
                         unset=FALCON_UNSET),
    # the original (7B): multi-query, one LayerNorm feeding attention and the MLP, an untied head
    "falcon-7b": Family("falcon", "falcon", dict(num_hidden_layers=3, new_decoder_architecture=False, multi_query=True,
                                                 tie_word_embeddings=False,
                                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
                        unset=FALCON_UNSET),
    # the original without multi-query and without the parallel block, biases on every projection: llama.cpp's
    # falcon has neither a sequential block nor biases (the converter cannot split a fused bias): safetensors only
    "falcon-sequential": Family("falcon", "falcon", dict(num_hidden_layers=2, new_decoder_architecture=False,
                                                         multi_query=False, parallel_attn=False, bias=True,
                                                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
                                gguf_ok=False, unset=FALCON_UNSET),
    "llama-dynamic": Family("llama", "llama", dict(num_hidden_layers=2, tie_word_embeddings=True, max_position_embeddings=64,
                                                   rope_parameters={"rope_type": "dynamic", "factor": 4.0,
                                                                    "rope_theta": 10000.0})),
    # MPT: ALiBi (no RoPE), LayerNorms without bias, fused Wqkv, a plain GELU MLP of 4 * d_model. 4 heads: the
    # power-of-two slopes 2^-2, 2^-4, 2^-6, 2^-8 (alibi_bias_max 8), a tied head
    "mpt": Family("mpt", "mpt", dict(num_hidden_layers=3, max_seq_len=256, tie_word_embeddings=True), unset=MPT_UNSET),
    # 6 heads: the non-power-of-two slope rule (4 heads' slopes, then the odd steps of 8's), alibi_bias_max 4,
    # clip_qkv 1.5 (about a third of the projections' outputs clamped), an untied head
    "mpt-6heads": Family("mpt", "mpt", dict(num_hidden_layers=2, hidden_size=96, num_attention_heads=6, max_seq_len=256,
                                            tie_word_embeddings=False, attn_config={"alibi_bias_max": 4, "clip_qkv": 1.5}),
                         unset=MPT_UNSET),
    # 5 heads and a softmax_scale, which llama.cpp does not keep (its MPT scales by 1/sqrt(head_dim)): safetensors only
    "mpt-softmax-scale": Family("mpt", "mpt", dict(num_hidden_layers=2, hidden_size=80, num_attention_heads=5,
                                                   max_seq_len=256, attn_config={"softmax_scale": 0.2}),
                                gguf_ok=False, unset=MPT_UNSET),
    # gpt-oss: 4 experts of width 32 with biases, top 2 (softmax over the chosen logits), the clamped SwiGLU,
    # attention sinks, q/k/v/o biases, sliding (window 8) and full layers alternating, YaRN the converter writes
    # (no truncate key: the rounded ramp llama.cpp uses); every expert bias moved off zero (build_hf_model)
    "gpt_oss": Family("gpt_oss", "gpt-oss", dict(num_hidden_layers=4, tie_word_embeddings=False, num_local_experts=4,
                                                 num_experts_per_tok=2, intermediate_size=32, sliding_window=8,
                                                 layer_types=["sliding_attention", "full_attention"] * 2,
                                                 attention_bias=True, rope_parameters={
                                                     "rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                                     "original_max_position_embeddings": 64})),
    # the SwiGLU's clamps biting (limit 1.5: about a fifth of the gates and two fifths of the ups clamped) and another
    # alpha, a tied head, the default layer_types (even layers sliding): llama.cpp fixes alpha 1.702 and limit 7 (a
    # GGUF records neither), so safetensors only
    "gpt_oss-clamped": Family("gpt_oss", "gpt-oss", dict(num_hidden_layers=2, tie_word_embeddings=True,
                                                         num_local_experts=4, num_experts_per_tok=2, intermediate_size=32,
                                                         sliding_window=8, swiglu_limit=1.5, swiglu_alpha=1.2,
                                                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
                              gguf_ok=False),
    # Qwen3-Next, the hybrid: Gated DeltaNet layers (2 key heads of 16, 4 value heads of 8: grouped, a conv of 4)
    # around one gated attention layer (a quarter of each head rotated), zero-centred norms, the dense MLP on every
    # layer (mlp_only_layers). No GGUF: llama.cpp's tensor map has no dense MLP for qwen3next
    "qwen3next": Family("qwen3_next", "qwen3next", dict(num_hidden_layers=4, tie_word_embeddings=False,
                                                        layer_types=["linear_attention", "linear_attention",
                                                                     "full_attention", "linear_attention"],
                                                        linear_num_key_heads=2, linear_num_value_heads=4,
                                                        linear_key_head_dim=16, linear_value_head_dim=8,
                                                        linear_conv_kernel_dim=4, mlp_only_layers=[0, 1, 2, 3],
                                                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                         "partial_rotary_factor": 0.25}),
                        gguf_ok=False),
    # the hybrid's MoE on layers 1 and 2 only (mlp_only_layers [0, 3]): dense MLPs on a linear and an attention layer
    "qwen3next-mixed": Family("qwen3_next", "qwen3next", dict(num_hidden_layers=4, tie_word_embeddings=True,
                                                              full_attention_interval=2, linear_num_key_heads=2,
                                                              linear_num_value_heads=4, linear_key_head_dim=16,
                                                              linear_value_head_dim=8, linear_conv_kernel_dim=4,
                                                              num_experts=4, num_experts_per_tok=2,
                                                              moe_intermediate_size=32, shared_expert_intermediate_size=64,
                                                              norm_topk_prob=True, mlp_only_layers=[0, 3],
                                                              rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                               "partial_rotary_factor": 0.25}),
                              gguf_ok=False),
    # the same hybrid with Qwen3-Next's MoE on every layer: 4 experts of width 32, top 2 renormalised, a shared
    # expert of width 64 gated by sigmoid(shared_expert_gate . x); every second layer attends
    # (full_attention_interval 2, the one layout a GGUF can say)
    "qwen3next-moe": Family("qwen3_next", "qwen3next", dict(num_hidden_layers=4, tie_word_embeddings=True,
                                                            full_attention_interval=2,
                                                            linear_num_key_heads=2, linear_num_value_heads=4,
                                                            linear_key_head_dim=16, linear_value_head_dim=8,
                                                            linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
                                                            moe_intermediate_size=32, shared_expert_intermediate_size=64,
                                                            norm_topk_prob=True, mlp_only_layers=[],
                                                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                             "partial_rotary_factor": 0.25})),
    # Qwen3.5, the hybrid with plain projections (in_proj_qkv / z / b / a) and the dense MLP on every layer: every
    # second layer attends; 2 key heads, 4 value heads of 32 (a whole Q8_0 block: llama.cpp's converter moves the
    # value heads, so a head must not split a block); the multimodal RoPE's sections over the 2 rotated pairs
    "qwen35": Family("qwen3_5_text", "qwen35", dict(num_hidden_layers=4, tie_word_embeddings=False,
                                                    full_attention_interval=2, linear_num_key_heads=2,
                                                    linear_num_value_heads=4, linear_key_head_dim=16,
                                                    linear_value_head_dim=32, linear_conv_kernel_dim=4,
                                                    rope_parameters=QWEN35_ROPE)),
    # Qwen3.5's MoE: the experts (4 of width 32, top 2, always renormalised) and a gated shared expert on every
    # layer; no dense width in its config
    "qwen35-moe": Family("qwen3_5_moe_text", "qwen35moe", dict(num_hidden_layers=4, tie_word_embeddings=True,
                                                               full_attention_interval=2, linear_num_key_heads=2,
                                                               linear_num_value_heads=4, linear_key_head_dim=16,
                                                               linear_value_head_dim=32, linear_conv_kernel_dim=4,
                                                               num_experts=4, num_experts_per_tok=2,
                                                               moe_intermediate_size=32,
                                                               shared_expert_intermediate_size=64,
                                                               rope_parameters=QWEN35_ROPE),
                         unset=("intermediate_size",)),
}
FORMATS = ("safetensors", "gguf-f32", "gguf-f16", "gguf-q8_0")
ROUNDING = {"safetensors": "F32", "gguf-f32": "F32", "gguf-f16": "F16", "gguf-q8_0": "Q8_0"}


# -- the HuggingFace side --------------------------------------------------------------------------------


def build_hf_model(name: str, matrix_qtype: str = "F32", seed: int = 0) -> torch.nn.Module:
    """A random model of the family. Norm gains and biases are moved off their init (ones / zeros) so that
    offsets and biases matter; every matrix is rounded through `matrix_qtype` (what a GGUF of that type
    stores), so HuggingFace runs exactly the weights fak will read."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fam = FAMILIES[name]
    config = AutoConfig.for_model(fam.model_type, **{k: v for k, v in (COMMON | fam.config).items() if k not in fam.unset})
    torch.manual_seed(seed)
    # eager experts: HuggingFace's loop over experts, the textbook order (the default is a grouped matmul)
    moe = {"experts_implementation": "eager"} if {"num_experts", "num_local_experts"} & set(fam.config) else {}
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32, **moe).eval()
    if fam.model_type == "mpt":
        mpt_alibi_bias_max(model)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.ndim == 1 or pname.endswith("_proj_bias"):  # norm gains and biases (gpt-oss: per expert, 2-D)
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
            elif matrix_qtype != "F32" and "conv1d" not in pname:  # the converter keeps SSM_CONV1D in F32
                # gpt-oss's experts multiply from the right: GGUF quantizes their transpose (GptOssModel.modify_tensors)
                right = fam.model_type == "gpt_oss" and pname.endswith(("experts.gate_up_proj", "experts.down_proj"))
                w = p.numpy().swapaxes(-1, -2) if right else p.numpy()
                values = np.array(Tensor.from_array(pname, np.ascontiguousarray(w), matrix_qtype).dequantize())
                p.copy_(torch.from_numpy(np.ascontiguousarray(values.swapaxes(-1, -2) if right else values)))
    if fam.model_type in HYBRIDS:
        qwen3next_decay(model, torch.Generator().manual_seed(seed + 2))
    return model


HYBRIDS = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")  # model types with Gated DeltaNet layers


def qwen3next_decay(model: torch.nn.Module, gen: torch.Generator) -> None:
    """A deviation from transformers' init: every Gated DeltaNet's A = exp(A_log) drawn from [0.02, 0.3], not
    [0.01, 16]. With the init's rates (and this tiny model's large `a`), most heads forget their state within a
    token: the recurrence would go untested, and the gated norm would rescale the cancellation noise of q.k to
    unit size (fak and HuggingFace, each float32, then differ far beyond float32 rounding; so do HuggingFace's own
    chunked and recurrent forms). Here each token keeps 40-100% of the state."""
    with torch.no_grad():
        for layer in model.model.layers:
            if hasattr(layer, "linear_attn"):
                a_log = layer.linear_attn.A_log
                a_log.copy_(torch.empty(a_log.shape).uniform_(0.02, 0.3, generator=gen).log())


def mpt_alibi_bias_max(model: torch.nn.Module) -> None:
    """A deviation: transformers' MptModel builds its ALiBi with alibi_bias_max 8 whatever attn_config says; the
    original MPT (llm-foundry's build_alibi_bias) and llama.cpp (max_alibi_bias) use the config's value, and so
    does fak. The model is made to pass it to transformers' own build_mpt_alibi_tensor (a no-op at 8)."""
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    bias_max = model.config.attn_config.alibi_bias_max
    model.transformer.build_mpt_alibi_tensor = (
        lambda n_heads, length, alibi_bias_max=8, device=None: build_mpt_alibi_tensor(n_heads, length, bias_max, device))


def hf_logits(model: torch.nn.Module, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(tokens)[None]).logits[0].float().numpy()


def tokens_for(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, SEQ)


# -- a tiny GPT-2 style vocabulary -----------------------------------------------------------------------


def vocab_metadata() -> dict[str, Any]:
    """256 byte tokens, 63 two-letter merges, one control token: as GGUF `tokenizer.*` keys."""
    letters = "etaoinshrd"
    pairs = [(a, b) for a in letters for b in letters][: VOCAB - 257]
    tokens = [*bytes_to_unicode().values(), *(a + b for a, b in pairs), "<|endoftext|>"]
    types = [1] * (VOCAB - 1) + [3]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": [f"{a} {b}" for a, b in pairs],
            "tokenizer.ggml.bos_token_id": EOS, "tokenizer.ggml.eos_token_id": EOS}


def save_hf(model: torch.nn.Module, out: Path) -> Path:
    """save_pretrained plus the tokenizer files a HuggingFace checkpoint carries."""
    model.save_pretrained(out)
    config = model.config
    if config.model_type in HYBRIDS:  # transformers 5 consumes the interval into layer_types; the published
        types = config.layer_types  # checkpoints' config.json (what convert_hf_to_gguf reads) carries it too
        interval = types.index("full_attention") + 1
        if all((t == "full_attention") == ((i + 1) % interval == 0) for i, t in enumerate(types)):
            hp = json.loads((out / "config.json").read_text())
            (out / "config.json").write_text(json.dumps(hp | {"full_attention_interval": interval}, indent=2))
    meta = vocab_metadata()
    (out / "tokenizer.json").write_text(Tokenizer.from_gguf(meta, "test vocabulary").to_json())
    (out / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>", "bos_token": None,
                                                           "add_bos_token": False}))
    return out


# -- the GGUF side: convert_hf_to_gguf, step by step ------------------------------------------------------

FILE_TYPE = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
             "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}


def permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute, verbatim."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(hp: dict[str, Any]) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.generate_extra_tensors for rope_type llama3, verbatim."""
    rope = hp["rope_parameters"]
    base, dim = rope["rope_theta"], hp["head_dim"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old_context_len = rope["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_context_len / low, old_context_len / high
    rope_factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            rope_factors.append(1)
        elif wavelen > low_freq_wavelen:
            rope_factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low) / (high - low)
            rope_factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(rope_factors, dtype=torch.float32).numpy()


def n_experts(hp: dict[str, Any]) -> int:
    """The converter's find_hparam(["num_local_experts", "num_experts"]): transformers 5 writes the first."""
    return hp.get("num_local_experts") or hp["num_experts"]


def rotary_factor(hp: dict[str, Any]) -> float:
    """The converters read `rotary_pct` (GPT-NeoX) / `partial_rotary_factor` (StableLM, Phi-3) from config.json;
    transformers 5 keeps it in `rope_parameters` only, which is read here (a deviation: the real converter
    needs the older key)."""
    rope = hp.get("rope_parameters") or {}
    return float(hp.get("rotary_pct") or hp.get("partial_rotary_factor") or rope.get("partial_rotary_factor", 1.0))


def falcon_kv_heads(hp: dict[str, Any]) -> int:
    """FalconModel's n_head_kv: `num_kv_heads`, else 1. A deviation: transformers 5 writes num_kv_heads = the head
    count into every config.json, also for the original multi-query architecture, which ignores it (and on which
    the real converter then fails); Falcon-7B's own config.json has none, so 1, as used here."""
    if not hp.get("new_decoder_architecture") and hp.get("multi_query", True):
        return 1
    return hp.get("num_kv_heads") or hp.get("n_head_kv", 1)


def write_metadata(w: gguf.GGUFWriter, arch: str, hp: dict[str, Any], qtype: str, extra: dict[str, Any]) -> None:
    rope = hp.get("rope_parameters") or {}
    full = rope.get("full_attention", rope)
    head_dim = hp["hidden_size"] // hp["num_attention_heads"]
    if arch in ("gptneox", "stablelm"):  # GPTNeoXModel / StableLMModel.set_gguf_parameters (no super())
        w.add_context_length(hp["max_position_embeddings"])
        w.add_embedding_length(hp["hidden_size"])
        w.add_block_count(hp["num_hidden_layers"])
        w.add_feed_forward_length(hp["intermediate_size"])
        w.add_rope_dimension_count(int(rotary_factor(hp) * head_dim))
        w.add_head_count(hp["num_attention_heads"])
        if arch == "stablelm":
            w.add_head_count_kv(hp["num_key_value_heads"])
        w.add_parallel_residual(hp.get("use_parallel_residual", True))
        w.add_layer_norm_eps(hp["layer_norm_eps"])
    elif arch == "falcon":  # FalconModel.set_gguf_parameters
        w.add_context_length(2048)  # "not in config.json"
        w.add_tensor_data_layout("jploski")
        w.add_embedding_length(hp["hidden_size"])
        w.add_feed_forward_length(4 * hp["hidden_size"])
        w.add_block_count(hp["num_hidden_layers"])
        w.add_head_count(hp["num_attention_heads"])
        w.add_head_count_kv(falcon_kv_heads(hp))
        w.add_layer_norm_eps(hp["layer_norm_epsilon"])
    elif arch == "mpt":  # MPTModel.set_gguf_parameters
        attn = hp["attn_config"]
        w.add_context_length(hp["max_seq_len"])
        w.add_embedding_length(hp["d_model"])
        w.add_block_count(hp["n_layers"])
        w.add_feed_forward_length(4 * hp["d_model"])
        w.add_head_count(hp["n_heads"])
        if attn.get("kv_n_heads"):
            w.add_head_count_kv(attn["kv_n_heads"])
        w.add_layer_norm_eps(1e-5)
        if attn["clip_qkv"] is not None:
            w.add_clamp_kqv(attn["clip_qkv"])
        w.add_max_alibi_bias(attn["alibi_bias_max"] if attn["alibi"] else 0.0)
    elif arch == "phi3":  # Phi3MiniModel.set_gguf_parameters
        w.add_context_length(hp["max_position_embeddings"])
        w.add_rope_scaling_orig_ctx_len(hp["original_max_position_embeddings"])
        w.add_embedding_length(hp["hidden_size"])
        w.add_feed_forward_length(hp["intermediate_size"])
        w.add_block_count(hp["num_hidden_layers"])
        w.add_head_count(hp["num_attention_heads"])
        w.add_head_count_kv(hp["num_key_value_heads"])
        w.add_layer_norm_rms_eps(hp["rms_norm_eps"])
        w.add_rope_dimension_count(int(rotary_factor(hp) * hp["hidden_size"]) // hp["num_attention_heads"])
        w.add_rope_freq_base(full["rope_theta"])
        w.add_sliding_window(hp.get("sliding_window") or 0)
    elif arch == "gemma2":  # Gemma2Model.set_gguf_parameters (no super(): no RoPE base)
        w.add_context_length(hp["max_position_embeddings"])
        w.add_embedding_length(hp["hidden_size"])
        w.add_block_count(hp["num_hidden_layers"])
        w.add_feed_forward_length(hp["intermediate_size"])
        w.add_head_count(hp["num_attention_heads"])
        w.add_head_count_kv(hp["num_key_value_heads"])
        w.add_layer_norm_rms_eps(hp["rms_norm_eps"])
        w.add_key_length(hp["head_dim"])
        w.add_value_length(hp["head_dim"])
        w.add_attn_logit_softcapping(hp["attn_logit_softcapping"])
        w.add_final_logit_softcapping(hp["final_logit_softcapping"])
        w.add_sliding_window(hp["sliding_window"])
    else:  # TextModel.set_gguf_parameters
        w.add_block_count(hp["num_hidden_layers"])
        w.add_context_length(hp["max_position_embeddings"])
        w.add_embedding_length(hp["hidden_size"])
        if "intermediate_size" in hp:  # find_hparam(..., optional=True): a Qwen3.5-MoE config has none
            w.add_feed_forward_length(hp["intermediate_size"])
        w.add_head_count(hp["num_attention_heads"])
        w.add_head_count_kv(hp["num_key_value_heads"])
        if "mrope_section" in full:  # padded to 4 [time, height, width, extra]
            w.add_rope_dimension_sections([*full["mrope_section"], 0, 0, 0, 0][:4])
        if full.get("rope_type") == "linear":
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(full["factor"])
        elif full.get("rope_type") == "yarn":
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(full["factor"])
            w.add_rope_scaling_orig_ctx_len(full["original_max_position_embeddings"])
            if full.get("attention_factor") is not None:
                w.add_rope_scaling_yarn_attn_factor(full["attention_factor"])
            if full.get("beta_fast") is not None:
                w.add_rope_scaling_yarn_beta_fast(full["beta_fast"])
            if full.get("beta_slow") is not None:
                w.add_rope_scaling_yarn_beta_slow(full["beta_slow"])
        w.add_rope_freq_base(full["rope_theta"])
        if "sliding_attention" in rope:
            w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
        w.add_layer_norm_rms_eps(1e-5 if arch == "olmoe" else hp["rms_norm_eps"])  # OlmoeModel: always 1e-5
        w.add_key_length(hp["head_dim"])
        w.add_value_length(hp["head_dim"])
    if arch in ("llama", "granite", "granitemoe"):  # LlamaModel.set_gguf_parameters
        w.add_vocab_size(hp["vocab_size"])
        w.add_rope_dimension_count(hp["head_dim"])
    if arch in ("granite", "granitemoe"):  # GraniteModel.set_gguf_parameters: each multiplier only when set
        for key, add in (("attention_multiplier", w.add_attention_scale), ("embedding_multiplier", w.add_embedding_scale),
                         ("residual_multiplier", w.add_residual_scale), ("logits_scaling", w.add_logit_scale)):
            if hp.get(key):
                add(hp[key])
    if hp.get("num_local_experts") or hp.get("num_experts"):  # TextModel's expert keys
        w.add_expert_count(n_experts(hp))
        w.add_expert_used_count(hp["num_experts_per_tok"])
    if arch == "qwen3moe":  # Qwen2MoeModel.set_gguf_parameters
        w.add_expert_feed_forward_length(hp["moe_intermediate_size"])
    if arch in ("qwen3next", "qwen35", "qwen35moe"):  # Qwen3NextModel.set_gguf_parameters (after Qwen2MoeModel's)
        if "moe_intermediate_size" in hp:
            w.add_expert_feed_forward_length(hp["moe_intermediate_size"])
        if "shared_expert_intermediate_size" in hp:
            w.add_expert_shared_feed_forward_length(hp["shared_expert_intermediate_size"])
        w.add_ssm_conv_kernel(hp["linear_conv_kernel_dim"])
        w.add_ssm_state_size(hp["linear_key_head_dim"])
        w.add_ssm_group_count(hp["linear_num_key_heads"])
        w.add_ssm_time_step_rank(hp["linear_num_value_heads"])
        w.add_ssm_inner_size(hp["linear_value_head_dim"] * hp["linear_num_value_heads"])
        w.add_full_attention_interval(hp.get("full_attention_interval", 4))
        w.add_rope_dimension_count(int(hp["head_dim"] * rope.get("partial_rotary_factor", 0.25)))
    if arch in ("qwen35", "qwen35moe") and "mrope_section" not in full:  # _Qwen35MRopeMixin: always written
        w.add_rope_dimension_sections([11, 11, 10, 0])
    if arch == "qwen2moe":  # Qwen2MoeModel.set_gguf_parameters
        w.add_expert_feed_forward_length(hp["moe_intermediate_size"])
        w.add_expert_shared_feed_forward_length(hp["shared_expert_intermediate_size"])
    if arch == "granitemoe" and hp.get("shared_intermediate_size"):  # GraniteMoeModel: GraniteMoeShared's width
        w.add_expert_shared_feed_forward_length(hp["shared_intermediate_size"])
    if arch == "gpt-oss":  # GptOssModel.set_gguf_parameters
        w.add_sliding_window(hp["sliding_window"])
        w.add_expert_feed_forward_length(hp["intermediate_size"])
    if arch == "gemma3":  # Gemma3Model.set_gguf_parameters
        if hp.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(hp["final_logit_softcapping"])
        w.add_sliding_window(hp["sliding_window"])
    w.add_file_type(FILE_TYPE[qtype])
    for key, value in vocab_metadata().items():  # _set_vocab_gpt2 + SpecialVocab
        if isinstance(value, list):
            w.add_array(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_uint32(key, value)
    for key, value in extra.items():
        w.add_uint32(key, value)


def write_gguf(hf_dir: Path, name: str, qtype: str, out: Path, edit: Callable[[dict], None] | None = None,
               drop_keys: tuple[str, ...] = (), add_keys: dict[str, Any] | None = None) -> Path:
    """Convert the safetensors checkpoint in `hf_dir` to GGUF as convert_hf_to_gguf would (outtype f32 /
    f16 / q8_0), reading only what the converter reads: config.json and the safetensors file.
    `edit(tensors)` and `drop_keys` spoil the result on purpose, for the error tests; `add_keys` adds metadata
    (a float as float32, an int as int32, else a string)."""
    fam = FAMILIES[name]
    hp = json.loads((hf_dir / "config.json").read_text())
    arch = fam.gguf_arch
    if arch == "mpt":  # MptConfig's names, as the converter's find_hparam / block_count find them
        hp |= {"hidden_size": hp["d_model"], "num_attention_heads": hp["n_heads"], "num_hidden_layers": hp["n_layers"]}
    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    names = gguf.get_tensor_name_map(arch_id, hp["num_hidden_layers"])
    n_head, n_kv = hp["num_attention_heads"], hp.get("num_key_value_heads")
    tensors: dict[str, np.ndarray] = {}
    experts: dict[str, np.ndarray] = {}
    head_norms: dict[str, np.ndarray] = {}
    for hf_name, t in load_file(hf_dir / "model.safetensors").items():
        data = t.float().numpy()
        if "_layernorm.norms." in hf_name:  # StableLMModel._stack_qk_norm: stacked below
            head_norms[hf_name] = data
            continue
        if arch == "gptneox" and "attention.query_key_value" in hf_name:  # GPTNeoXModel.modify_tensors
            n_embed = hp["hidden_size"]
            data = data.reshape(n_head, 3, n_embed // n_head, *data.shape[1:]).swapaxes(0, 1).reshape(data.shape)
        if arch == "falcon" and hf_name.endswith("query_key_value.weight"):  # FalconModel.modify_tensors
            kv, head_dim = falcon_kv_heads(hp), hp["hidden_size"] // n_head
            qkv = data.reshape(kv, n_head // kv + 2, head_dim, head_dim * n_head)
            data = np.concatenate([qkv[:, :-2].reshape(n_head * head_dim, -1), qkv[:, [-2]].reshape(kv * head_dim, -1),
                                   qkv[:, [-1]].reshape(kv * head_dim, -1)])
        if arch == "gpt-oss" and ".mlp.experts." in hf_name:  # GptOssModel.modify_tensors (not fused)
            prefix, kind = hf_name.rsplit(".", 1)
            if kind == "gate_up_proj":  # (E, dim, 2 ffn) -> (E, 2 ffn, dim), gate the even rows, up the odd
                data = data.swapaxes(-1, -2)
                parts = {"gate_proj.weight": data[:, ::2], "up_proj.weight": data[:, 1::2]}
            elif kind == "gate_up_proj_bias":
                parts = {"gate_proj.bias": data[..., ::2], "up_proj.bias": data[..., 1::2]}
            else:  # down_proj (transposed), down_proj_bias
                parts = {"down_proj.weight": data.swapaxes(-1, -2)} if kind == "down_proj" else {"down_proj.bias": data}
            for suffix, part in parts.items():
                tensors[names.get_name(f"{prefix}.{suffix}", try_suffixes=(".weight", ".bias"))] = part
            continue
        if arch == "gpt-oss" and hf_name.endswith(".sinks"):  # GptOssModel.filter_tensors
            hf_name += ".weight"
        if ".mlp.experts." in hf_name:  # Qwen2MoeModel / OlmoeModel.modify_tensors: stacked below
            experts[hf_name] = data
            continue
        if hf_name.endswith("shared_mlp.input_linear.weight"):  # GraniteMoeModel.modify_tensors (with experts)
            gate, up = np.split(data, 2, axis=-2)
            bid = int(hf_name.split(".")[2])
            tensors[f"blk.{bid}.ffn_gate_shexp.weight"], tensors[f"blk.{bid}.ffn_up_shexp.weight"] = gate, up
            continue
        if hf_name.endswith("mlp.shared_expert_gate.weight"):  # (1, dim): prepare_tensors squeezes it to (dim,)
            data = data.squeeze()
        if hf_name.endswith("block_sparse_moe.input_linear.weight"):  # GraniteMoeModel.modify_tensors: gate, then up
            gate, up = np.split(data, 2, axis=-2)
            bid = int(hf_name.split(".")[2])
            tensors[f"blk.{bid}.ffn_gate_exps.weight"], tensors[f"blk.{bid}.ffn_up_exps.weight"] = gate, up
            continue
        if arch.startswith("gemma") and hf_name == "lm_head.weight":
            continue
        if arch in ("llama", "granite", "granitemoe") and hf_name.endswith(("q_proj.weight", "q_proj.bias")):
            data = permute(data, n_head, n_head)
        if arch in ("llama", "granite", "granitemoe") and hf_name.endswith(("k_proj.weight", "k_proj.bias")):
            data = permute(data, n_head, n_kv)
        if arch.startswith("gemma") and hf_name.endswith("norm.weight"):
            data = data + 1
        if arch in ("qwen35", "qwen35moe") and "linear_attn." in hf_name:  # _LinearAttentionVReorderBase
            data = reorder_v_heads(hf_name, data, hp)
        if arch in ("qwen3next", "qwen35", "qwen35moe"):  # Qwen3NextModel.filter_tensors / modify_tensors
            if hf_name.startswith("mtp"):
                continue
            if hf_name.endswith(".A_log"):
                data = -np.exp(data)
            elif hf_name.endswith(".dt_bias"):
                hf_name = hf_name.rpartition(".dt_bias")[0] + ".dt_proj.bias"
            elif "conv1d" in hf_name:
                data = data.squeeze()
            elif hf_name.endswith("norm.weight") and not hf_name.endswith("linear_attn.norm.weight"):
                data = data + 1
            if "in_proj_qkvz.weight" in hf_name:  # [q, k, v, z] per key head -> all q, all k, all v; all z
                hk, dk, dv = hp["linear_num_key_heads"], hp["linear_key_head_dim"], hp["linear_value_head_dim"]
                rv = hp["linear_num_value_heads"] // hk * dv
                q, k, v, z = np.split(data.T.reshape(-1, hk, 2 * dk + 2 * rv), [dk, 2 * dk, 2 * dk + rv], axis=-1)
                bid = int(hf_name.split(".")[2])
                tensors[f"blk.{bid}.attn_qkv.weight"] = np.concatenate(
                    [q.reshape(data.shape[1], -1), k.reshape(data.shape[1], -1), v.reshape(data.shape[1], -1)], axis=-1).T
                tensors[f"blk.{bid}.attn_gate.weight"] = z.reshape(data.shape[1], -1).T
                continue
        new_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert new_name is not None, hf_name
        tensors[new_name] = data
    for bid in sorted({int(n.split(".")[2]) for n in head_norms}):  # torch.stack over heads, per layer, q and k
        for which, heads in (("q", n_head), ("k", n_kv)):
            datas = [head_norms[f"model.layers.{bid}.self_attn.{which}_layernorm.norms.{h}.weight"] for h in range(heads)]
            tensors[names.get_name(f"model.layers.{bid}.self_attn.{which}_layernorm.weight", try_suffixes=(".weight",))] = \
                np.stack(datas)
    for bid in sorted({int(n.split(".")[2]) for n in experts}):  # torch.stack over experts, per layer and kind
        for w_name in ("down_proj", "gate_proj", "up_proj"):
            datas = [experts[f"model.layers.{bid}.mlp.experts.{xid}.{w_name}.weight"] for xid in range(n_experts(hp))]
            tensors[names.get_name(f"model.layers.{bid}.mlp.experts.{w_name}.weight", try_suffixes=(".weight",))] = np.stack(datas)
    if arch == "llama" and (hp.get("rope_parameters") or {}).get("rope_type") == "llama3":
        tensors["rope_freqs.weight"] = llama3_rope_factors(hp)
    attn_factor = None
    if arch == "phi3" and (rope := hp.get("rope_parameters") or {}).get("long_factor"):  # generate_extra_tensors
        scale = hp["max_position_embeddings"] / hp["original_max_position_embeddings"]
        attn_factor = math.sqrt(1 + math.log(scale) / math.log(hp["original_max_position_embeddings"])) if scale > 1 else 1.0
        tensors["rope_factors_long.weight"] = np.asarray(rope["long_factor"], np.float32)
        tensors["rope_factors_short.weight"] = np.asarray(rope["short_factor"], np.float32)
    if edit is not None:
        edit(tensors)
    w = gguf.GGUFWriter(out, arch)
    write_metadata(w, arch, hp, qtype, fam.extra_meta)
    if attn_factor is not None:
        w.add_rope_scaling_attn_factors(attn_factor)
    for key in drop_keys:
        del w.kv_data[0][key]
    for key, value in (add_keys or {}).items():
        add = w.add_float32 if isinstance(value, float) else w.add_int32 if isinstance(value, int) else w.add_string
        add(key, value)
    for new_name, data in tensors.items():
        add_tensor(w, new_name, data, qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def reorder_v_heads(hf_name: str, data: np.ndarray, hp: dict[str, Any]) -> np.ndarray:
    """_LinearAttentionVReorderBase.modify_tensors: the value heads from grouped by key head [K0: v0 v1, K1: v0 v1]
    to tiled [v0: K0 K1, v1: K0 K1], in the V rows of in_proj_qkv and the conv, the rows of in_proj_z / b / a,
    A_log and dt_bias, and the columns of out_proj."""
    hk, hv = hp["linear_num_key_heads"], hp["linear_num_value_heads"]
    if hk == hv:
        return data
    dk, dv, r = hp["linear_key_head_dim"], hp["linear_value_head_dim"], hv // hk

    def tiled(x: np.ndarray, axis: int, head: int) -> np.ndarray:
        shape = x.shape
        x = x.reshape(*shape[:axis], hk, r, head, *shape[axis + 1:])
        return np.swapaxes(x, axis, axis + 1).reshape(shape)

    if ".in_proj_qkv." in hf_name or ".conv1d" in hf_name:  # only the V rows (channels)
        qk = 2 * hk * dk
        return np.concatenate([data[:qk], tiled(data[qk:], 0, dv)])
    if ".in_proj_z." in hf_name:
        return tiled(data, 0, dv)
    if ".in_proj_b." in hf_name or ".in_proj_a." in hf_name or ".A_log" in hf_name or ".dt_bias" in hf_name:
        return tiled(data, 0, 1)
    if ".out_proj." in hf_name:
        return tiled(data, 1, dv)
    return data


def add_tensor(w: gguf.GGUFWriter, name: str, data: np.ndarray, qtype: str) -> None:
    data = np.ascontiguousarray(data, np.float32)
    # prepare_tensors: 1-D tensors, norms and the MoE router (FFN_GATE_INP) stay F32
    # (and every tensor not named .weight: gpt-oss's 2-D expert biases)
    if data.ndim <= 1 or name.endswith(("_norm.weight", "ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight",
                                        "ssm_conv1d.weight")) or \
            not name.endswith(".weight") or \
            qtype == "F32":
        w.add_tensor(name, data)
    elif qtype == "F16":
        w.add_tensor(name, data.astype(np.float16))
    else:
        blocks = quantize(data, qtype)
        # the HuggingFace model holds dequantize(quantize(W)); quantizing that again must give the same bytes
        assert np.array_equal(Tensor(name, qtype, data.shape, blocks.reshape(-1), "").dequantize(), data), name
        w.add_tensor(name, blocks, raw_dtype=gguf.GGMLQuantizationType[qtype])


def export(name: str, fmt: str, tmp: Path) -> tuple[torch.nn.Module, Path]:
    """The HuggingFace model (weights rounded as the format stores them) and the path fak should load."""
    model = build_hf_model(name, ROUNDING[fmt])
    hf_dir = save_hf(model, tmp / "hf")
    if fmt == "safetensors":
        return model, hf_dir
    return model, write_gguf(hf_dir, name, ROUNDING[fmt], tmp / f"{name}-{fmt}.gguf")


# -- the fak side ----------------------------------------------------------------------------------------


def fak_backend(name: str) -> Any:
    """"reference", or "numba" (engine-cpu's fast path, f32 activations)."""
    if name == "reference":
        return ReferenceBackend()
    import fak_engine_cpu.backend  # noqa: F401  registers "numba"
    from fakcore.engine.loader import make_backend

    return make_backend(name)


def fak_transformer(ckpt: Checkpoint, backend_name: str = "reference") -> Transformer:
    backend = fak_backend(backend_name)
    return Transformer(ckpt.config, load_weights(ckpt.config, ckpt.tensors, backend, ckpt.source), backend)


def fak_full(tf: Transformer, tokens: np.ndarray) -> np.ndarray:
    return tf.forward(tokens, [Segment(tf.new_cache(), slice(0, len(tokens)))])


def fak_cached(tf: Transformer, tokens: np.ndarray, prefill: int = PREFILL) -> np.ndarray:
    """Prefill the first `prefill` tokens in one call, then one token per call, through one KV cache."""
    cache = tf.new_cache()
    rows = [tf.forward(tokens[:prefill], [Segment(cache, slice(0, prefill))])]
    rows += [tf.forward(tokens[i : i + 1], [Segment(cache, slice(0, 1))]) for i in range(prefill, len(tokens))]
    return np.concatenate(rows)


@dataclass
class Measured:
    case: str
    logits_max_abs: float
    argmax_agree: int
    positions: int
    cached_max_abs: float


RESULTS: list[Measured] = []


def measure(case: str, path: Path, model: torch.nn.Module, tokens: np.ndarray, backend: str = "reference") -> Measured:
    ckpt = load_checkpoint(path)
    tf = fak_transformer(ckpt, backend)
    expected = hf_logits(model, tokens)
    full = fak_full(tf, tokens)
    cached = fak_cached(tf, tokens)
    m = Measured(case, float(np.abs(full - expected).max()), int((full.argmax(-1) == expected.argmax(-1)).sum()),
                 len(tokens), float(np.abs(cached - full).max()))
    RESULTS.append(m)
    print(f"{case}: logits max|Δ| {m.logits_max_abs:.2e}, argmax {m.argmax_agree}/{m.positions}, "
          f"cached-vs-full max|Δ| {m.cached_max_abs:.2e}")
    return m


def assert_matches(m: Measured, bound: float, backend: str) -> None:
    """What a parity case asserts: logits within `bound` of HuggingFace, its argmax at every position, the cached
    decode within `bound` of the full pass, and on numba (batch-invariant) equal to it bit for bit."""
    assert m.logits_max_abs <= bound
    assert m.argmax_agree == m.positions == SEQ
    assert m.cached_max_abs <= bound
    if backend == "numba":
        assert m.cached_max_abs == 0.0


def table() -> str:
    lines = ["| case | logits max abs diff | argmax agree | cached vs full max abs diff |", "|---|---|---|---|"]
    lines += [f"| {m.case} | {m.logits_max_abs:.2e} | {m.argmax_agree}/{m.positions} | {m.cached_max_abs:.2e} |"
              for m in RESULTS]
    return "\n".join(lines)


SMOLLM2_NOTES: list[str] = []  # lines for the end-of-run summary (test_parity_smollm2.py)
