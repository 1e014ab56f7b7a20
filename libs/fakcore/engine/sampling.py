"""Choosing the next token from logits: greedy, or temperature / top-k / top-p with a seeded generator.

A sampler belongs to one sequence (its own generator), so concurrent sessions never share randomness and a
seeded request is reproducible whatever else the worker is doing.

Numerics: every accepted parameter value is safe. Logits are shifted by their maximum before the
temperature divides them, so a tiny temperature (1e-308) drives the others to -inf (probability 0) and
the best token to exactly 0 (probability 1) instead of inf - inf = NaN; a huge one flattens towards
uniform. Logits that are not finite at all (a model fault) fail the sequence that produced them.

On a device (a backend with `sample`, engine/backend.py): the logits stay where the forward pass left them
and only the chosen id comes back. The host still owns the randomness: `Sampler.draw()` takes the one
uniform number `rng.choice` would have taken from the same generator (Generator.choice with p draws
`random()` once and returns searchsorted(cumsum(p) / sum, u, side="right")), and the device repeats the
arithmetic of `__call__` on it in float64, step for step: the same stable order, numpy's pairwise sums,
the sequential cumsums. `finish_draw` then applies the device's verdict (a fault, or a row whose best logit
was -inf, where `__call__` draws nothing: the draw is given back). A grammar's mask or logprobs need the
logits on the host: such sequences sample here.

Log-probabilities (`logprobs`) are those of the model itself: the log-softmax of the raw logits, before
temperature, top-k/top-p or a grammar shape the choice, computed in float64 as logit - max - log(sum(exp(
logit - max))) so that no exp overflows and the best token's is exactly what its share of the mass says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec
import numpy as np

from fakcore.engine.prompt import RequestError
from fakcore.protocol import ErrorCode, Sampling

MAX_TEMPERATURE = 100.0  # OpenAI accepts up to 2, Anthropic 1; beyond 100 every token is as likely
SEED_BITS = 64
MAX_TOP_LOGPROBS = 20  # OpenAI's limit for chat `top_logprobs`
LOGPROB_FLOOR = -9999.0  # reported for a probability of 0 (a -inf logit): OpenAI's value, and JSON has no -inf


NEUTRAL = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}  # what a knob left unset everywhere means

# a device sampler's verdict on one row (Backend.sample)
SAMPLED = 0  # the token is the choice
NON_FINITE = 1  # a NaN or +inf logit: the sequence fails, as __call__ fails it
NO_DRAW = 2  # every logit -inf: the token is the argmax and __call__ would have drawn nothing


@dataclass(frozen=True)
class Draw:
    """What a device needs to make a Sampler's choice from logits it holds."""

    greedy: bool
    temperature: float
    top_k: int
    top_p: float
    u: float  # the generator's next random() in [0, 1) (0.0 when greedy: nothing is drawn)


def with_defaults(p: Sampling, defaults: Mapping[str, float | int]) -> Sampling:
    """The request's sampling with each knob it left unset (None) taken from `defaults` (the served model's:
    settings, then the model's recommendation), else NEUTRAL."""
    unset = {k: defaults.get(k, v) for k, v in NEUTRAL.items() if getattr(p, k) is None}
    return msgspec.structs.replace(p, **unset) if unset else p


def validate_sampling(p: Sampling) -> None:
    """Refuse (RequestError INVALID, a 400 on every wire) what no sampler can honour."""
    def bad(field: str, why: str) -> RequestError:
        return RequestError(ErrorCode.INVALID, f"`{field}` {why}")

    # a knob left unset (None) is the served model's to choose: only what the request set is checked
    if p.temperature is not None and not (math.isfinite(p.temperature) and 0.0 <= p.temperature <= MAX_TEMPERATURE):
        raise bad("temperature", f"must be a number from 0 to {MAX_TEMPERATURE:g}, not {p.temperature!r}")
    if p.top_p is not None and not (math.isfinite(p.top_p) and 0.0 <= p.top_p <= 1.0):
        raise bad("top_p", f"must be a number from 0 to 1, not {p.top_p!r}")
    if p.top_k is not None and p.top_k < 0:
        raise bad("top_k", f"must be 0 (off) or a positive count, not {p.top_k}")
    if p.max_tokens < 1:
        raise bad("max_tokens", "must be at least 1")
    if not 0 <= p.top_logprobs <= MAX_TOP_LOGPROBS:
        raise bad("top_logprobs", f"must be from 0 to {MAX_TOP_LOGPROBS}, not {p.top_logprobs}")


class Sampler:
    def __init__(self, params: Sampling):
        params = with_defaults(params, NEUTRAL)  # a worker fills the model's defaults first; what is left is neutral
        self.temperature = float(params.temperature)
        self.top_p = float(params.top_p)
        self.top_k = int(params.top_k)
        # any integer seeds (OpenAI's `seed` may be negative or past 64 bits): its 64-bit two's complement
        seed = None if params.seed is None else params.seed % (1 << SEED_BITS)
        self.rng = np.random.default_rng(seed)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1

    def __call__(self, logits: np.ndarray, allowed: np.ndarray | None = None) -> int:
        """Pick a token id from one row of logits; `allowed` masks the vocabulary (constrained decoding).

        One argmax over the row as it comes (float32 from the engines) finds both the greedy choice and any
        NaN or +inf (argmax returns the first NaN where there is one, else the first +inf where there is one),
        so a greedy step costs one pass: the float64 copy and the two whole-row tests it replaced took ~440 us
        a row of Gemma-3's 262,144 logits, 7 ms of a 16-sequence decode step."""
        first = int(np.argmax(logits))
        if np.isnan(logits[first]) or np.isposinf(logits[first]):
            raise FloatingPointError("the model produced non-finite logits")
        if allowed is None and self.greedy:
            return first
        logits = logits.astype(np.float64)
        if allowed is not None:
            n = min(len(allowed), len(logits))
            masked = np.full_like(logits, -np.inf)
            masked[:n][allowed[:n]] = logits[:n][allowed[:n]]
            logits = masked
        best = int(np.argmax(logits))
        if self.greedy or not np.isfinite(logits[best]):
            return best
        order = np.argsort(-logits, kind="stable")
        if self.top_k > 0:
            order = order[: self.top_k]
        with np.errstate(over="ignore", under="ignore", divide="ignore"):
            scaled = (logits[order] - logits[best]) / self.temperature  # <= 0, the best exactly 0
            probs = np.exp(scaled)
        probs /= probs.sum()  # >= 1 before the division: the best token's exp(0)
        if self.top_p < 1.0:
            keep = int(np.searchsorted(np.cumsum(probs), self.top_p) + 1)
            probs = probs[:keep] / probs[:keep].sum()
            order = order[:keep]
        return int(order[self.rng.choice(len(probs), p=probs)])


    def draw(self) -> Draw:
        """The settings and, unless greedy, the uniform number `__call__` would draw next (taken now)."""
        if self.greedy:
            return Draw(True, self.temperature, self.top_k, self.top_p, 0.0)
        self._before_draw = self.rng.bit_generator.state
        return Draw(False, self.temperature, self.top_k, self.top_p, float(self.rng.random()))

    def finish_draw(self, token: int, status: int) -> int:
        """A device's choice for this sampler's draw: the token, the draw given back where __call__ makes none,
        FloatingPointError for non-finite logits."""
        if status == NON_FINITE:
            raise FloatingPointError("the model produced non-finite logits")
        if status == NO_DRAW and not self.greedy:
            self.rng.bit_generator.state = self._before_draw
        return int(token)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 log-probabilities of one row of logits (-inf where a logit is -inf)."""
    x = logits.astype(np.float64)
    if np.isnan(x).any() or np.isposinf(x).any():
        raise FloatingPointError("the model produced non-finite logits")
    shifted = x - x.max()  # the best is 0: exp never overflows, and the sum below is >= 1
    with np.errstate(under="ignore"):
        return shifted - np.log(np.exp(shifted).sum())


def token_logprobs(logits: np.ndarray, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    """The log-probability of `token` and the `top` most likely (id, log-probability), most likely first
    (equal ones by id), each floored at LOGPROB_FLOOR."""
    lp = log_softmax(logits)
    best: list[tuple[int, float]] = []
    if top > 0:
        k = min(top, len(lp))
        part = np.argpartition(-lp, k - 1)[:k]
        order = part[np.lexsort((part, -lp[part]))]
        best = [(int(i), max(float(lp[i]), LOGPROB_FLOOR)) for i in order]
    return max(float(lp[token]), LOGPROB_FLOOR), best
