"""Helpers shared by the text-layer tests: where the real model lives, GGUF metadata as a plain dict,
and a small SentencePiece vocabulary written as GGUF."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

TEMPLATES = Path(__file__).parent / "templates"
SMOLLM2 = Path.home() / ".cache/fak/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"


def read_gguf_metadata(path: Path) -> dict:
    """The `general.*` and `tokenizer.*` fields of a GGUF file as a plain dict (what fak's loader hands over)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    return {
        name: field.contents()
        for name, field in reader.fields.items()
        if name.startswith(("general.", "tokenizer."))
    }


# ---- a small SentencePiece ("llama") GGUF ---------------------------------------------------------------

SPM_CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps.",
    "Hello world, hello there! How are you doing today? I am doing well.",
    "def main():\n    print('hello')\n    return 0\n",
    "Numbers 12345 and 3.14 and 2024-01-01 are numbers.",
    "tokenization is the process of splitting text into tokens and pieces",
]
SPM_SPECIALS = ["<|im_start|>", "<|im_end|>"]  # control tokens
SPM_USER_DEFINED = ["<tool_call>"]


def build_spm_metadata(arch: str = "llama") -> dict:
    """A SentencePiece-style vocabulary as llama.cpp writes it: <unk>, <s>, </s>, the 256 <0xNN> byte
    tokens, control and user-defined tokens, then BPE pieces (with ▁ for spaces) scored best-first.
    The pieces are learned with the `tokenizers` BPE trainer; non-ASCII characters are left out so that
    they exercise byte fallback."""
    from tokenizers import SentencePieceBPETokenizer

    trainer = SentencePieceBPETokenizer(add_prefix_space=True)
    trainer.train_from_iterator(SPM_CORPUS * 10, vocab_size=400, min_frequency=2, show_progress=False)
    spec = json.loads(trainer.to_str())["model"]

    def keep(piece: str) -> bool:
        return all((ord(c) < 128 or c == "▁") and c != "\n" for c in piece)

    merged = [a + b for a, b in spec["merges"] if keep(a + b)]
    base = [p for p in spec["vocab"] if len(p) == 1 and keep(p)]
    pieces = list(dict.fromkeys(merged + base))
    if arch.startswith("gemma"):
        pieces += ["  ", "   "]  # Gemma files spell runs of spaces with real spaces
    tokens = ["<unk>", "<s>", "</s>", *[f"<0x{b:02X}>" for b in range(256)], *SPM_SPECIALS, *SPM_USER_DEFINED, *pieces]
    types = [2, 3, 3, *[6] * 256, *[3] * len(SPM_SPECIALS), *[4] * len(SPM_USER_DEFINED), *[1] * len(pieces)]
    scores = [0.0] * (len(tokens) - len(pieces)) + [-float(k) for k in range(len(pieces))]
    return {
        "general.architecture": arch,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
    }


def write_spm_gguf(path: Path, arch: str) -> Path:
    """The SentencePiece vocabulary written into a GGUF file transformers can load (one tiny tensor)."""
    import gguf

    meta = build_spm_metadata(arch)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(meta["tokenizer.ggml.tokens"])
    w.add_token_types(meta["tokenizer.ggml.token_type"])
    w.add_token_scores(meta["tokenizer.ggml.scores"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_tensor("token_embd.weight", np.zeros((len(meta["tokenizer.ggml.tokens"]), 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
