"""Choosing the next token from logits: greedy, or temperature / top-k / top-p with a seeded generator.

A sampler belongs to one sequence (its own generator), so concurrent sessions never share randomness and a
seeded request is reproducible whatever else the worker is doing.
"""

from __future__ import annotations

import numpy as np

from fakcore.protocol import Sampling


class Sampler:
    def __init__(self, params: Sampling):
        self.temperature = float(params.temperature)
        self.top_p = float(params.top_p)
        self.top_k = int(params.top_k)
        self.rng = np.random.default_rng(params.seed)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1

    def __call__(self, logits: np.ndarray, allowed: np.ndarray | None = None) -> int:
        """Pick a token id from one row of logits; `allowed` masks the vocabulary (constrained decoding)."""
        logits = logits.astype(np.float64)
        if allowed is not None:
            n = min(len(allowed), len(logits))
            masked = np.full_like(logits, -np.inf)
            masked[:n][allowed[:n]] = logits[:n][allowed[:n]]
            logits = masked
        if self.greedy:
            return int(np.argmax(logits))
        logits = logits / self.temperature
        order = np.argsort(-logits, kind="stable")
        if self.top_k > 0:
            order = order[: self.top_k]
        top = logits[order]
        probs = np.exp(top - top[0])
        probs /= probs.sum()
        if self.top_p < 1.0:
            keep = int(np.searchsorted(np.cumsum(probs), self.top_p) + 1)
            probs = probs[:keep] / probs[:keep].sum()
            order = order[:keep]
        return int(order[self.rng.choice(len(probs), p=probs)])
