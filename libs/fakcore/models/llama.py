"""Llama, and every checkpoint llama.cpp files as `llama` (SmolLM, TinyLlama, Mistral GGUFs…).

Pre-norm blocks, a SiLU-gated MLP, RoPE; Llama 3.1+ stretches RoPE ("llama3" scaling); small models tie
the head to the embedding table.

GGUF specifics, all from llama.cpp's convert_hf_to_gguf (`LlamaModel`):
- Q and K rows are permuted so that llama.cpp can rotate interleaved pairs; fak rotates halves like
  HuggingFace, so the rows are put back (`unpermute_qk`, on the stored blocks, no decoding).
- Llama-3 scaling is kept only as the `rope_freqs.weight` tensor (the metadata holds none of its
  parameters); the config takes its per-frequency divisors, and the tensor is consumed there.
- Mistral is written as `llama` and its sliding window is dropped; a file that keeps it in
  `llama.attention.sliding_window` has it honoured.
- A tied head is simply absent (`output.weight` missing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fakcore.formats.tensor import Tensor
from fakcore.models.common import (
    HF_LAYER,
    gguf_base,
    hf_base,
    rename_hf,
    rope_freqs_check,
    unpermute_qk,
    untie_gguf,
)
from fakcore.models.config import ConfigError, ModelConfig, RopeScaling

ARCH = "llama"


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str,
                     arch: str = ARCH) -> ModelConfig:
    base = gguf_base(meta, arch, source)
    if "rope_freqs.weight" in tensors:
        if base["rope_scaling"].kind != "none":
            raise ConfigError(f"{source}: both '{arch}.rope.scaling.type' and tensor 'rope_freqs.weight' scale RoPE")
        factors = rope_freqs_check(tensors["rope_freqs.weight"], base["head_dim"], source)
        base["rope_scaling"] = RopeScaling("factors", factors=factors)
    window = int(meta.get(f"{arch}.attention.sliding_window", 0))
    return ModelConfig(**base, tie_embeddings=untie_gguf(tensors), sliding_window=window)


def config_from_hf(cfg: Mapping[str, Any], source: str, arch: str = ARCH) -> ModelConfig:
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise ConfigError(f"{source}: attention_bias / mlp_bias are not supported for {arch}")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    return ModelConfig(**hf_base(cfg, arch, source))


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    out = dict(tensors)
    out.pop("rope_freqs.weight", None)  # already in cfg.rope_scaling (config_from_gguf)
    for i in range(cfg.n_layers):
        for name, heads in ((f"blk.{i}.attn_q.weight", cfg.n_heads), (f"blk.{i}.attn_k.weight", cfg.n_kv_heads)):
            if name in out:
                out[name] = unpermute_qk(out[name], heads)
    return out


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return rename_hf(tensors, HF_LAYER, cfg.n_layers, cfg.tie_embeddings, source)
