"""The architecture of a decoder-only transformer, as one frozen dataclass.

Every family file (`models/<arch>.py`) fills it from GGUF metadata or a HuggingFace `config.json`; the
forward pass (`engine/transformer.py`) reads only this, never the file it came from. Per-layer choices
(sliding window, RoPE base) are derived once in `__post_init__`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


class ConfigError(ValueError):
    """A model's metadata does not describe an architecture fak can run (names the file and the field)."""


@dataclass(frozen=True)
class RopeScaling:
    """How RoPE frequencies are stretched for long contexts.

    "linear": every frequency divided by `factor`. "llama3": HuggingFace's Llama-3.1 rule (long wavelengths
    slowed by `factor`, short ones kept, a blend between). "factors": one divisor per frequency, as
    llama.cpp stores Llama-3 scaling in GGUF files (the `rope_freqs.weight` tensor; the metadata keeps none
    of the llama3 parameters, so the divisors are the only faithful record). "longrope" (Phi-3): one divisor
    per frequency (the short factors) and cos/sin multiplied by `attention_factor`.
    "yarn": transformers' _compute_yarn_parameters: frequencies that turn more than `beta_fast` times over the
    original context kept, those turning fewer than `beta_slow` times divided by `factor`, a linear ramp
    between (over dims, ends rounded out with `truncate`), cos/sin multiplied by `attention_factor`. It does
    not depend on the sequence length, so cached keys stay exact.
    "dynamic" (dynamic NTK): the base grows with the current sequence length once it passes
    `original_context` (transformers: max_position_embeddings) and is the plain RoPE below it. Past it every
    cached key's rotation would change with each new token, so fak serves only the original context, where it
    is exactly the plain RoPE: the frequencies are unscaled, and a longer sequence is an error
    (engine/transformer.py), never a silent fallback.
    """

    kind: str  # "none" | "linear" | "llama3" | "factors" | "longrope" | "yarn" | "dynamic"
    factor: float = 1.0
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    original_context: int = 8192  # llama3, yarn: original_max_position_embeddings; dynamic: positions served
    factors: tuple[float, ...] = ()  # "factors", "longrope": (rotary_dim/2,) divisors of the inverse frequencies
    attention_factor: float = 1.0  # "longrope", "yarn": cos and sin multiplied by it (so q.k by its square)
    beta_fast: float = 32.0  # "yarn": rotations over the original context above which a frequency is kept
    beta_slow: float = 1.0  # "yarn": rotations below which a frequency is divided by `factor`
    truncate: bool = True  # "yarn": the ramp's ends rounded out to whole dims (floor / ceil)


@dataclass(frozen=True)
class ModelConfig:
    arch: str  # architecture string ("llama", "qwen2", "gemma3"…): names models/<arch>.py
    vocab_size: int
    dim: int  # residual stream width (hidden_size)
    n_layers: int
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (< n_heads: grouped-query attention)
    head_dim: int  # per-head width (usually dim // n_heads; Gemma sets it on its own)
    ffn_dim: int  # MLP inner width (intermediate_size)
    norm_eps: float  # RMSNorm (or LayerNorm) epsilon
    rope_theta: float  # RoPE base of global layers
    context_length: int  # positions the model was trained for
    tie_embeddings: bool = False  # the LM head is the token embedding table
    rope_scaling: RopeScaling = RopeScaling("none")
    rope_local_theta: float = 0.0  # RoPE base of sliding-window layers (Gemma3); 0: same as rope_theta
    qkv_bias: bool = False  # Qwen2: biases on q/k/v projections
    qk_norm: bool = False  # Qwen3/Gemma3: RMSNorm over each head of q and k before RoPE
    norm_offset: float = 0.0  # Gemma: norms scale by (offset + w), offset 1
    sandwich_norm: bool = False  # Gemma2/3: extra norms after attention and after the MLP
    post_norm: bool = False  # OLMo2: no norm before attention / MLP, one on each output (before the residual add)
    qk_norm_full: bool = False  # OLMo2: the q/k norms span all heads at once (n_heads*head_dim), not one head
    act: str = "silu"  # MLP activation: gated "silu" | "gelu_tanh" | "swiglu_oai" (gpt-oss); plain "gelu" (erf) | "gelu_tanh"
    embed_scale: float = 1.0  # Gemma: embeddings multiplied by sqrt(dim)
    attn_scale: float = 0.0  # softmax scale; 0: 1/sqrt(head_dim)
    attn_softcap: float = 0.0  # Gemma2: tanh cap on attention logits; 0: none
    final_softcap: float = 0.0  # Gemma2: tanh cap on output logits; 0: none
    sliding_window: int = 0  # tokens a windowed layer sees (incl. itself); 0: none
    window_pattern: tuple[bool, ...] = ()  # per layer: True = sliding-window layer; () with a window: every layer
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()
    # sparse mixture of experts (Qwen3-MoE): every layer's MLP is `n_experts` gated MLPs of width
    # `expert_ffn_dim`, of which a router picks `n_experts_used` per token (softmax, then top-k)
    n_experts: int = 0  # 0: a dense MLP of width ffn_dim
    dense_layers: tuple[bool, ...] = ()  # with n_experts, per layer: True = a dense MLP of width ffn_dim there
    #                                      (Qwen-MoE's mlp_only_layers / decoder_sparse_step); (): every layer sparse
    n_experts_used: int = 0  # top-k
    expert_ffn_dim: int = 0  # each expert's inner width (moe_intermediate_size)
    expert_weights_norm: bool = True  # the k chosen weights renormalised to sum 1 (norm_topk_prob)
    # shared experts (Qwen2-MoE, GraniteMoeShared, Qwen3-Next): one more gated MLP every token runs, its output
    # added to the routed experts' weighted sum
    shared_expert_ffn_dim: int = 0  # the shared expert's inner width (shared_expert_intermediate_size); 0: none
    shared_expert_gate: bool = False  # its output times sigmoid(ffn_gate_inp_shexp @ x), one scalar per token (Qwen2-MoE)
    # classic decoders (GPT-NeoX, StableLM, Phi-3, Granite)
    norm: str = "rms"  # "rms" | "layer": LayerNorm, (x - mean) / std * w (+ b), for every norm of the model
    norm_bias: bool = False  # the block and output LayerNorms carry biases (attn_norm.bias, …)
    rope_dim: int = 0  # leading dims of each head that RoPE rotates (NEOX halves), the rest pass; 0: head_dim
    parallel_residual: bool = False  # x = x + attn(norm(x)) + mlp(ffn_norm(x)): both read the block's input
    shared_ffn_norm: bool = False  # parallel_residual (StableLM): the MLP reads attention's normed input, no ffn_norm
    gated_mlp: bool = True  # False: down(act(up(x))), no gate projection (GPT-NeoX)
    attn_out_bias: bool = False  # GPT-NeoX: bias on the attention output projection
    mlp_bias: bool = False  # GPT-NeoX: biases on up and down (plain MLP only)
    qk_norm_per_head: bool = False  # StableLM: each head of q and k has its own norm gains, (heads, head_dim)
    residual_scale: float = 1.0  # Granite: every block output (attention, MLP) multiplied before its residual add
    logit_scale: float = 1.0  # Granite: logits divided by it
    # MPT: positions as ALiBi attention biases instead of RoPE. Head h adds m_h * (j - i) to the score of key j
    # from query i (alibi_slopes); the distance is between cache slots, so it moves with them (engine/eviction.py)
    alibi_max_bias: float = 0.0  # the slopes' scale (MPT's alibi_bias_max, GGUF max_alibi_bias); 0: no ALiBi, RoPE
    clip_qkv: float = 0.0  # MPT: q, k and v clamped to [-clip_qkv, clip_qkv] after their projection; 0: none
    # gpt-oss: attention sinks and its own mixture of experts (models/gpt_oss.py)
    attn_sinks: bool = False  # a learned logit per query head (attn_sinks.weight) joins each softmax's denominator
    router_bias: bool = False  # the router has a bias (ffn_gate_inp.bias)
    expert_bias: bool = False  # every expert's gate, up and down carry biases (ffn_{gate,up,down}_exps.bias)
    moe_topk_softmax: bool = False  # top-k of the router's logits, then softmax over those k; False: softmax, top-k
    swiglu_alpha: float = 1.702  # act "swiglu_oai": (clamp(up) + 1) * g * sigmoid(alpha * g), g = min(gate, limit)
    swiglu_limit: float = 7.0  # act "swiglu_oai": gate clamped above at it, up to [-limit, limit]
    # Qwen3-Next, Qwen3.5 (models/qwen3next.py, qwen35.py): Gated DeltaNet linear-attention layers among gated attention
    linear_layers: tuple[bool, ...] = ()  # per layer: True = Gated DeltaNet (engine/deltanet.py); (): every layer attends
    linear_k_heads: int = 0  # query/key heads of a linear layer (linear_num_key_heads)
    linear_v_heads: int = 0  # value heads (linear_num_value_heads), a multiple of linear_k_heads
    linear_k_dim: int = 0  # per-head query/key width (linear_key_head_dim)
    linear_v_dim: int = 0  # per-head value width (linear_value_head_dim)
    linear_conv: int = 0  # the causal depthwise conv's kernel width (linear_conv_kernel_dim)
    linear_v_tiled: bool = False  # value head j reads key head j % Hk (llama.cpp's qwen35 GGUF order); False: j // (Hv / Hk)
    attn_gate: bool = False  # attention's output times sigmoid(attn_gate.weight @ x), per channel, before attn_output
    # derived in __post_init__
    layer_window: tuple[int, ...] = field(default=(), init=False)  # per layer: window size, 0 = global
    layer_rope_theta: tuple[float, ...] = field(default=(), init=False)  # per layer RoPE base
    scale: float = field(default=0.0, init=False)  # the softmax scale actually used
    rotary_dim: int = field(default=0, init=False)  # dims RoPE rotates: rope_dim, or head_dim
    alibi_slopes: tuple[float, ...] = field(default=(), init=False)  # (n_heads,) with alibi_max_bias, else ()
    layer_kv: tuple[int, ...] = field(default=(), init=False)  # per layer: its layer in the KV cache; -1 for a linear one

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(f"{self.arch}: n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        acts = ("silu", "gelu_tanh", "swiglu_oai") if self.gated_mlp else ("gelu", "gelu_tanh")
        if self.act not in acts:
            raise ConfigError(f"{self.arch}: activation {self.act!r} is not supported for a "
                              f"{'gated' if self.gated_mlp else 'plain'} MLP ({', '.join(acts)})")
        if self.norm not in ("rms", "layer"):
            raise ConfigError(f"{self.arch}: unknown norm {self.norm!r} (rms, layer)")
        if self.norm_bias and self.norm != "layer":
            raise ConfigError(f"{self.arch}: norm biases need LayerNorm")
        if self.mlp_bias and self.gated_mlp:
            raise ConfigError(f"{self.arch}: MLP biases are supported on a plain MLP only")
        if self.shared_ffn_norm and not self.parallel_residual:
            raise ConfigError(f"{self.arch}: shared_ffn_norm needs parallel_residual")
        if self.parallel_residual and (self.post_norm or self.sandwich_norm or self.n_experts):
            raise ConfigError(f"{self.arch}: parallel_residual with post/sandwich norms or experts is not supported")
        if (self.router_bias or self.expert_bias or self.moe_topk_softmax) and not self.n_experts:
            raise ConfigError(f"{self.arch}: router_bias, expert_bias and moe_topk_softmax need experts")
        if self.swiglu_limit <= 0:
            raise ConfigError(f"{self.arch}: swiglu_limit {self.swiglu_limit} must be > 0")
        if self.n_experts and not self.gated_mlp:
            raise ConfigError(f"{self.arch}: experts are gated MLPs")
        if (self.shared_expert_ffn_dim or self.shared_expert_gate) and not self.n_experts:
            raise ConfigError(f"{self.arch}: a shared expert needs routed experts (n_experts)")
        if self.shared_expert_gate and not self.shared_expert_ffn_dim:
            raise ConfigError(f"{self.arch}: a shared expert gate needs a shared expert (shared_expert_ffn_dim)")
        if self.qk_norm_per_head and (not self.qk_norm or self.qk_norm_full):
            raise ConfigError(f"{self.arch}: qk_norm_per_head needs per-head qk_norm")
        if not 0 <= self.rope_dim <= self.head_dim or self.rope_dim % 2:
            raise ConfigError(f"{self.arch}: rope_dim {self.rope_dim} is not an even number of dims <= head_dim {self.head_dim}")
        if self.alibi_max_bias < 0 or self.clip_qkv < 0:
            raise ConfigError(f"{self.arch}: alibi_max_bias {self.alibi_max_bias} and clip_qkv {self.clip_qkv} must be >= 0")
        if self.residual_scale <= 0 or self.logit_scale <= 0:
            raise ConfigError(f"{self.arch}: residual_scale {self.residual_scale} and logit_scale {self.logit_scale} must be > 0")
        if self.n_experts and not 0 < self.n_experts_used <= self.n_experts:
            raise ConfigError(f"{self.arch}: {self.n_experts_used} experts used per token of {self.n_experts}")
        if self.post_norm and self.sandwich_norm:
            raise ConfigError(f"{self.arch}: post_norm and sandwich_norm are exclusive")
        pattern = self.window_pattern or (bool(self.sliding_window),) * self.n_layers
        if len(pattern) != self.n_layers:
            raise ConfigError(f"{self.arch}: window pattern has {len(pattern)} entries for {self.n_layers} layers")
        windows = tuple(self.sliding_window if local and self.sliding_window else 0 for local in pattern)
        local_theta = self.rope_local_theta or self.rope_theta
        thetas = tuple(local_theta if w else self.rope_theta for w in windows)
        object.__setattr__(self, "layer_window", windows)
        object.__setattr__(self, "layer_rope_theta", thetas)
        object.__setattr__(self, "scale", self.attn_scale or 1.0 / math.sqrt(self.head_dim))
        object.__setattr__(self, "rotary_dim", self.rope_dim or self.head_dim)
        slopes = alibi_slopes(self.n_heads, self.alibi_max_bias) if self.alibi_max_bias else ()
        object.__setattr__(self, "alibi_slopes", slopes)
        linear = self.linear_layers or (False,) * self.n_layers
        if len(linear) != self.n_layers:
            raise ConfigError(f"{self.arch}: linear_layers has {len(linear)} entries for {self.n_layers} layers")
        if any(linear) and (min(self.linear_k_heads, self.linear_v_heads, self.linear_k_dim, self.linear_v_dim,
                                self.linear_conv) < 1 or self.linear_v_heads % self.linear_k_heads):
            raise ConfigError(f"{self.arch}: linear layers need positive head counts and sizes, value heads a multiple "
                              f"of key heads (k_heads {self.linear_k_heads}, v_heads {self.linear_v_heads}, k_dim "
                              f"{self.linear_k_dim}, v_dim {self.linear_v_dim}, conv {self.linear_conv})")
        if self.dense_layers and (len(self.dense_layers) != self.n_layers or not self.n_experts):
            raise ConfigError(f"{self.arch}: dense_layers has {len(self.dense_layers)} entries for {self.n_layers} layers "
                              f"and {self.n_experts} experts (it needs one per layer, and experts)")
        kv = np.cumsum([not lin for lin in linear]) - 1
        object.__setattr__(self, "layer_kv", tuple(-1 if lin else int(k) for lin, k in zip(linear, kv, strict=True)))

    def sparse(self, layer: int) -> bool:
        """Whether layer `layer`'s MLP is the mixture of experts (else a dense one, ffn_dim wide)."""
        return bool(self.n_experts) and not (self.dense_layers and self.dense_layers[layer])

    @property
    def n_kv_layers(self) -> int:
        """Layers that keep keys and values (all but the linear ones): the KV cache's depth."""
        return sum(k >= 0 for k in self.layer_kv)

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.n_heads // self.n_kv_heads


def alibi_slopes(n_heads: int, max_bias: float) -> tuple[float, ...]:
    """ALiBi's per-head slopes, float32 values. With n a power of two, head h (from 0) gets 2^(-max_bias (h+1) / n).
    Otherwise the power of two p just below n gives heads 0..p-1 the slopes of p heads, and the rest the odd
    steps of the 2p-head sequence, 2^(-max_bias (2k+1) / 2p). transformers' build_mpt_alibi_tensor (the sequence of
    2^ceil(log2 n) heads, its odd entries first, then its even ones, cut at n) and ggml's soft_max max_bias rule
    (m0^(h+1) below p, m1^(2(h-p)+1) from p on) are two spellings of this."""
    p = 1 << int(math.floor(math.log2(n_heads)))
    m0, m1 = 2.0 ** (-max_bias / p), 2.0 ** (-max_bias / 2.0 / p)
    return tuple(float(np.float32(m0 ** (h + 1) if h < p else m1 ** (2 * (h - p) + 1))) for h in range(n_heads))
