"""Mistral: Llama with a sliding attention window on every layer.

llama.cpp writes Mistral checkpoints as architecture `llama` (see llama.py), so a `mistral` GGUF is not
expected in the wild; the GGUF functions are here for a file that says so, and read it as llama does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from fakcore.formats.tensor import Tensor
from fakcore.models import llama
from fakcore.models.config import ModelConfig

ARCH = "mistral"


def config_from_gguf(meta: Mapping[str, Any], tensors: Mapping[str, Tensor], source: str) -> ModelConfig:
    return llama.config_from_gguf(meta, tensors, source, arch=ARCH)


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    base = llama.config_from_hf(cfg, source, arch=ARCH)
    return replace(base, sliding_window=int(cfg.get("sliding_window") or 0))


def tensors_from_gguf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return llama.tensors_from_gguf(cfg, tensors, source)


def tensors_from_hf(cfg: ModelConfig, tensors: Mapping[str, Tensor], source: str) -> dict[str, Tensor]:
    return llama.tensors_from_hf(cfg, tensors, source)
