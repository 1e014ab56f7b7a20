"""The architecture of a decoder-only transformer, as one frozen dataclass.

Every family file (`models/<arch>.py`) fills it from GGUF metadata or a HuggingFace `config.json`; the
forward pass (`engine/transformer.py`) reads only this, never the file it came from. Per-layer choices
(sliding window, RoPE base) are derived once in `__post_init__`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


class ConfigError(ValueError):
    """A model's metadata does not describe an architecture fak can run (names the file and the field)."""


@dataclass(frozen=True)
class RopeScaling:
    """How RoPE frequencies are stretched for long contexts.

    "linear": every frequency divided by `factor`. "llama3": HuggingFace's Llama-3.1 rule (long wavelengths
    slowed by `factor`, short ones kept, a blend between). "factors": one divisor per frequency, as
    llama.cpp stores Llama-3 scaling in GGUF files (the `rope_freqs.weight` tensor; the metadata keeps none
    of the llama3 parameters, so the divisors are the only faithful record).
    """

    kind: str  # "none" | "linear" | "llama3" | "factors"
    factor: float = 1.0
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    original_context: int = 8192  # llama3: original_max_position_embeddings
    factors: tuple[float, ...] = ()  # "factors": (head_dim/2,) divisors of the inverse frequencies


@dataclass(frozen=True)
class ModelConfig:
    arch: str  # architecture string ("llama", "qwen2", "gemma3"…): names models/<arch>.py
    vocab_size: int
    dim: int  # residual stream width (hidden_size)
    n_layers: int
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (< n_heads: grouped-query attention)
    head_dim: int  # per-head width (usually dim // n_heads; Gemma sets it on its own)
    ffn_dim: int  # gated MLP inner width (intermediate_size)
    norm_eps: float  # RMSNorm epsilon
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
    act: str = "silu"  # gated MLP activation: "silu" | "gelu_tanh"
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
    n_experts_used: int = 0  # top-k
    expert_ffn_dim: int = 0  # each expert's inner width (moe_intermediate_size)
    expert_weights_norm: bool = True  # the k chosen weights renormalised to sum 1 (norm_topk_prob)
    # derived in __post_init__
    layer_window: tuple[int, ...] = field(default=(), init=False)  # per layer: window size, 0 = global
    layer_rope_theta: tuple[float, ...] = field(default=(), init=False)  # per layer RoPE base
    scale: float = field(default=0.0, init=False)  # the softmax scale actually used

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(f"{self.arch}: n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.act not in ("silu", "gelu_tanh"):
            raise ConfigError(f"{self.arch}: unknown activation {self.act!r}")
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

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.n_heads // self.n_kv_heads
