"""Fixtures for the text layer: the real SmolLM2 tokenizer, a small SentencePiece GGUF, and the
transformers oracle loading the same files (offline)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .support import SMOLLM2, read_gguf_metadata, write_spm_gguf

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    if not SMOLLM2.is_file():
        pytest.fail(f"{SMOLLM2} is missing: run `fak model pull smollm2-135m` first")
    return SMOLLM2


@pytest.fixture(scope="session")
def smollm2_meta(smollm2_path):
    return read_gguf_metadata(smollm2_path)


@pytest.fixture(scope="session")
def smollm2(smollm2_meta, smollm2_path):
    from fakcore.text.tokenizer import Tokenizer

    return Tokenizer.from_gguf(smollm2_meta, str(smollm2_path))


@pytest.fixture(scope="session")
def hf_smollm2(smollm2_path):
    """transformers' tokenizer for the same GGUF: the oracle."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_path.parent), gguf_file=smollm2_path.name)


@pytest.fixture(scope="session")
def spm_gguf(tmp_path_factory) -> Path:
    return write_spm_gguf(tmp_path_factory.mktemp("spm") / "spm.gguf", "llama")


@pytest.fixture(scope="session")
def spm(spm_gguf):
    from fakcore.text.tokenizer import Tokenizer

    return Tokenizer.from_gguf(read_gguf_metadata(spm_gguf), str(spm_gguf))


@pytest.fixture(scope="session")
def hf_spm(spm_gguf):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(spm_gguf.parent), gguf_file=spm_gguf.name)


@pytest.fixture(scope="session")
def byte_tok():
    from fakcore.text.byte_tokenizer import ByteTokenizer

    return ByteTokenizer(["<|im_start|>", "<|im_end|>", "<|endoftext|>"], bos="<|endoftext|>", eos="<|im_end|>")
