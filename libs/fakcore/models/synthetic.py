"""`synthetic`: a tiny, deterministic Llama-shaped checkpoint built in code, with a byte-level tokenizer.

It is the default model, so that fak runs and its tests pass offline with nothing downloaded. The weights
come from a fixed seed; the output head favours printable ASCII (its other rows are scaled towards zero), so
greedy output is readable noise rather than control bytes, and EOS is never chosen (stop sequences and
max_tokens end a synthetic generation).
"""

from __future__ import annotations

import numpy as np

from fakcore.formats.tensor import Tensor
from fakcore.models.config import ModelConfig

SPECIALS = ("<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>")
BOS, EOS, IM_START, IM_END = (256 + i for i in range(len(SPECIALS)))

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CONFIG = ModelConfig(
    arch="llama",
    vocab_size=256 + len(SPECIALS),
    dim=64,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=16,
    ffn_dim=160,
    norm_eps=1e-5,
    rope_theta=10000.0,
    context_length=4096,
    bos_id=BOS,
    eos_ids=(EOS, IM_END),
)

SEED = 20261130


def tensors(cfg: ModelConfig = CONFIG, seed: int = SEED) -> dict[str, Tensor]:
    """The synthetic checkpoint, named as a GGUF llama file would name it."""
    rng = np.random.default_rng(seed)
    out: dict[str, Tensor] = {}

    def put(name: str, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        out[name] = Tensor(name=name, qtype="F32", shape=arr.shape, raw=arr.reshape(-1).view(np.uint8), source="synthetic")

    def mat(rows: int, cols: int) -> np.ndarray:
        return rng.standard_normal((rows, cols)).astype(np.float32) / np.sqrt(cols)

    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    put("token_embd.weight", rng.standard_normal((cfg.vocab_size, cfg.dim)))
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        put(p + "attn_norm.weight", 1.0 + 0.1 * rng.standard_normal(cfg.dim))
        put(p + "attn_q.weight", mat(q, cfg.dim))
        put(p + "attn_k.weight", mat(kv, cfg.dim))
        put(p + "attn_v.weight", mat(kv, cfg.dim))
        put(p + "attn_output.weight", mat(cfg.dim, q) * 0.5)
        put(p + "ffn_norm.weight", 1.0 + 0.1 * rng.standard_normal(cfg.dim))
        put(p + "ffn_gate.weight", mat(cfg.ffn_dim, cfg.dim))
        put(p + "ffn_up.weight", mat(cfg.ffn_dim, cfg.dim))
        put(p + "ffn_down.weight", mat(cfg.dim, cfg.ffn_dim) * 0.5)
    put("output_norm.weight", np.ones(cfg.dim))
    head = mat(cfg.vocab_size, cfg.dim) * 4.0
    printable = np.zeros(cfg.vocab_size, bool)
    printable[0x20:0x7F] = True
    printable[ord("\n")] = True
    head[~printable] *= 1e-3
    put("output.weight", head)
    return out
