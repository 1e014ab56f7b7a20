"""The model stage: a small linear classifier over hashed character n-grams, scored window by window.

Why this model: it ships inside fak's own wheel (`fakcore/data/screening/ngram-lr.npz`, ~0.5 MB), needs
numpy only, scores a tool result in about a millisecond on one core, and catches what the rules cannot
enumerate (social engineering without trigger words, paraphrases). It is trained by `python -m bench
screening --train` on fak's own corpus (bench/screening_corpus.py), never on a benchmark's data.

    text  -> reveal (normalize.py: hidden unicode, escapes, decoded payloads)  -> lower-case UTF-8 bytes
          -> windows of WINDOW bytes, stride WINDOW/2 (an injection is a sentence in a long document)
          -> per window: 3-, 4-, 5-gram byte hashes mod DIM, log(1+count), L2-normalised   x  (sparse)
          -> p = sigmoid(w·x + b); a result's score is the max over its windows
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fakcore.screening.normalize import reveal

DIM = 1 << 18  # hashed feature space
NGRAMS = (3, 4, 5)
WINDOW = 320  # bytes per window
_MULT = np.uint64(1000003)
_MASK = np.uint64(0xFFFFFFFF)
_SALT = {n: np.uint64(0x9E3779B1 * n) for n in NGRAMS}
DEFAULT_PATH = Path(__file__).resolve().parents[1] / "data" / "screening" / "ngram-lr.npz"


def _hashes(b: np.ndarray, n: int) -> np.ndarray:
    """Hash of every n-byte substring of `b` (uint64 in [0, DIM))."""
    m = len(b) - n + 1
    if m <= 0:
        return np.zeros(0, np.uint64)
    h = np.zeros(m, np.uint64)
    for k in range(n):
        h = (h * _MULT + b[k:k + m]) & _MASK
    h ^= _SALT[n]
    h = (h * np.uint64(2654435761)) & _MASK
    return h % np.uint64(DIM)


def windows(text: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Sparse feature vectors (indices, values) of the text's windows."""
    raw = reveal(text).all_text().lower().encode("utf-8", "replace")
    b = np.frombuffer(raw, np.uint8).astype(np.uint64)
    per_n = {n: _hashes(b, n) for n in NGRAMS}
    starts = list(range(0, max(1, len(b) - WINDOW // 2), WINDOW // 2)) or [0]
    out = []
    for s in starts:
        e = s + WINDOW
        idx = np.concatenate([per_n[n][s:max(s, e - n + 1)] for n in NGRAMS])
        if idx.size == 0:
            continue
        u, c = np.unique(idx, return_counts=True)
        v = np.log1p(c.astype(np.float32))
        v /= np.sqrt((v * v).sum())
        out.append((u.astype(np.int64), v))
    return out


@dataclass
class NgramModel:
    w: np.ndarray  # (DIM,) float32
    b: float
    threshold: float  # quarantine at or above (chosen on the training split for a low false-positive rate)
    version: str = ""

    def score(self, text: str) -> float:
        best = -np.inf
        for idx, v in windows(text):
            best = max(best, float(self.w[idx] @ v))
        if best == -np.inf:
            return 0.0
        return float(1.0 / (1.0 + np.exp(-(best + self.b))))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, w=self.w.astype(np.float16), b=np.float32(self.b), threshold=np.float32(self.threshold),
                            version=np.array(self.version))

    @classmethod
    def load(cls, path: Path | str = DEFAULT_PATH) -> NgramModel:
        with np.load(path) as z:
            return cls(w=z["w"].astype(np.float32), b=float(z["b"]), threshold=float(z["threshold"]), version=str(z["version"]))


def train(texts: list[str], labels: list[int], *, epochs: int = 300, l2: float = 1e-6, lr: float = 0.05,
          seed: int = 0) -> tuple[np.ndarray, float]:
    """Logistic regression on window features (each text is one window, usually a sentence or snippet);
    full-batch Adam, classes balanced. Returns (w, b)."""
    rows, cols, vals = [], [], []
    for i, t in enumerate(texts):
        for idx, v in windows(t)[:1]:
            rows.append(np.full(idx.size, i))
            cols.append(idx)
            vals.append(v)
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    x = np.concatenate(vals).astype(np.float64)
    y = np.asarray(labels, np.float64)
    n = len(texts)
    pos = y.sum()
    weight = np.where(y > 0, 0.5 * n / max(pos, 1), 0.5 * n / max(n - pos, 1))
    w = np.zeros(DIM)
    b = 0.0
    m_w, v_w = np.zeros(DIM), np.zeros(DIM)
    m_b = v_b = 0.0
    for step in range(1, epochs + 1):
        z = np.bincount(r, weights=w[c] * x, minlength=n) + b
        p = 1.0 / (1.0 + np.exp(-z))
        g = (p - y) * weight / n
        grad_w = np.bincount(c, weights=g[r] * x, minlength=DIM) + l2 * w
        grad_b = g.sum()
        m_w = 0.9 * m_w + 0.1 * grad_w
        v_w = 0.999 * v_w + 0.001 * grad_w * grad_w
        m_b = 0.9 * m_b + 0.1 * grad_b
        v_b = 0.999 * v_b + 0.001 * grad_b * grad_b
        corr1, corr2 = 1 - 0.9**step, 1 - 0.999**step
        w -= lr * (m_w / corr1) / (np.sqrt(v_w / corr2) + 1e-8)
        b -= lr * (m_b / corr1) / (np.sqrt(v_b / corr2) + 1e-8)
    return w.astype(np.float32), float(b)
