"""The model stage's scores in one compiled pass: what `model.featurise` + a dot product compute, without the
sort.

`featurise` (numpy) is the reference the model is trained on: it builds every (window, feature) pair of a
text, sorts them to count duplicates, and normalises per window. Scoring needs only each window's logit,
so this kernel walks the text once, window by window: the n-grams of a window are counted in a small
open-addressing table (cleared slot by slot after each window), and the logit is Σ w[f]·v_f/‖v‖ with
v_f = log(1 + count_f), every product rounded as `featurise` rounds it (float32 values, float32
normalised, float64 sum). Only the summation order differs, so a window's logit agrees with the
reference's to float64 rounding (tests/unit/screening/test_fastmodel.py asserts |Δ| < 1e-9 and identical
verdicts over the whole corpus).

n-grams, as `model._grams` defines them: the polynomial hash of every char 2-5-gram (h(cp[i:i+g]) =
h(cp[i:i+g-1])·P + cp[i+g-1] mod 2^64), and of every word (a maximal run of `_is_word` characters,
Horner over its code points) and every pair of consecutive words (h1·P + h1'), each salted and mixed
(splitmix64's finaliser) to a feature index. A gram belongs to the windows its start character is in.

Compiled ahead on first use with the signature below and cached (numba's cache), so a worker compiles
once per install; `warm()` does that at start-up, not in the first tool result's latency.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fakcore.screening.model import (
    _BITS,
    _CLASS,
    _CLAUSE,
    _LOG1P,
    _P,
    _SALT,
    CHAR_NGRAMS,
    CJK,
    DIM,
    MIN_CLAUSE,
    WINDOW,
    Layout,
)

_SALTS = np.array([_SALT[k] for k in ("c2", "c3", "c4", "c5", "w1", "w2")], np.uint64)
assert CHAR_NGRAMS == (2, 3, 4, 5) and WINDOW % 2 == 0


# -- a segment and its clauses: what `model.segment` and `model._clauses` compute with ~30 numpy calls each
# (their overhead, ~0.1 ms each on a 4k text, was a third of the stage), in one loop each


@njit(cache=True, nogil=True)
def _segment(raw, cls):
    """model.segment's arrays from the lower-cased code points: format characters dropped, whitespace runs
    made one space (none leading), digits made '0'; (cp, pos, units)."""
    n = raw.size
    cp = np.empty(n, np.uint64)
    pos = np.empty(n, np.int64)
    m = 0
    prev_ws = True  # a space at the start is dropped, as one after a space is
    for i in range(n):
        c = raw[i]
        k = cls[min(c, 0xFFFF)]
        if k == 1:
            continue
        if k == 2:
            if prev_ws:
                continue
            prev_ws = True
            c = 0x20
        else:
            prev_ws = False
            if c >= 0x30 and c <= 0x39:
                c = 0x30
        cp[m] = c
        pos[m] = i
        m += 1
    units = np.empty(m + 1, np.int64)
    units[0] = 0
    for i in range(m):
        units[i + 1] = units[i] + (3 if cp[i] >= CJK else 1)
    return cp[:m].copy(), pos[:m].copy(), units


@njit(cache=True, nogil=True)
def _clause_bounds(raw, pos, units, table):
    """model._clauses: (c0, c1), each clause's [start, end) in the segment's characters."""
    n = raw.size
    c0 = np.empty(n // MIN_CLAUSE + 1, np.int64)
    c1 = np.empty(n // MIN_CLAUSE + 1, np.int64)
    if n < MIN_CLAUSE:
        return c0[:0], c1[:0]
    kind = np.empty(n, np.uint8)
    for i in range(n):
        kind[i] = table[min(raw[i], 0xFFFF)]
    # a boundary: a separator, or whitespace in a run right after . ! ? that does not begin with a separator
    bnd = np.empty(n, np.bool_)
    before = -1  # the last non-whitespace at or before i
    for i in range(n):
        k = kind[i]
        ws = (k & 2) > 0
        if not ws:
            before = i
        after_end = before >= 0 and (kind[before] & 4) > 0 and (kind[min(before + 1, n - 1)] & 1) == 0
        bnd[i] = (k & 1) > 0 or (ws and after_end)
    m = 0
    start = -1
    p = 0  # pos[p] is the first kept character at or after the clause's start (pos is sorted)
    for i in range(n):
        if bnd[i]:
            continue
        if i == 0 or bnd[i - 1] or (kind[i - 1] & 8) > 0:
            start = i
        if i == n - 1 or bnd[i + 1] or (kind[i] & 8) > 0:
            end = i + 1
            if end - start >= MIN_CLAUSE:
                while p < pos.size and pos[p] < start:
                    p += 1
                e = p
                while e < pos.size and pos[e] < end:
                    e += 1
                if e - p >= 2 and units[e] - units[p] <= WINDOW:
                    c0[m] = p
                    c1[m] = e
                    m += 1
    return c0[:m].copy(), c1[:m].copy()


def segment(text: str):
    """model.segment, compiled (the same arrays)."""
    from fakcore.screening.model import Segment, _lower

    raw = np.frombuffer(_lower(text).encode("utf-32-le", "surrogatepass"), np.uint32)
    cp, pos, units = _segment(raw, _CLASS)
    return Segment(cp, pos, units, raw)


def clauses(seg) -> tuple[np.ndarray, np.ndarray]:
    """model._clauses, compiled (the same arrays)."""
    return _clause_bounds(seg.raw, seg.pos, seg.units, _CLAUSE)


@njit(cache=True, nogil=True, inline="always")
def _mixed(h, salt):
    h = h ^ salt
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    h = h ^ (h >> np.uint64(31))
    return np.int64(h >> np.uint64(64 - _BITS))


@njit(cache=True, nogil=True, inline="always")
def _word_char(c):
    return ((c >= 0x30) and (c <= 0x39)) or ((c >= 0x61) and (c <= 0x7A)) \
        or ((c >= 0xC0) and (c < CJK) and (c != 0xD7) and (c != 0xF7)) or ((c >= 0xAC00) and (c <= 0xD7AF))


@njit(cache=True, nogil=True)
def _gram_table(cp, salts, p):
    """Every gram's feature, grouped by start character: feats[first[i]:first[i+1]] start at character i."""
    n = cp.size
    counts = np.zeros(n + 1, np.int64)
    for i in range(n):
        counts[i + 1] = min(4, max(0, n - i - 1))  # char 2..5-grams that fit
    # words: start, end, hash
    wstart = np.empty(n, np.int64)
    whash = np.empty(n, np.uint64)
    nw = 0
    i = 0
    while i < n:
        if _word_char(cp[i]):
            h = np.uint64(0)
            j = i
            while j < n and _word_char(cp[j]):
                h = h * p + cp[j]
                j += 1
            wstart[nw] = i
            whash[nw] = h
            nw += 1
            i = j
        else:
            i += 1
    for k in range(nw):
        counts[wstart[k] + 1] += 2 if k + 1 < nw else 1
    first = np.cumsum(counts)
    feats = np.empty(first[n], np.int64)
    fill = first[:n].copy()
    for i in range(n):
        h = cp[i]
        for g in range(2, 6):
            if i + g > n:
                break
            h = h * p + cp[i + g - 1]
            feats[fill[i]] = _mixed(h, salts[g - 2])
            fill[i] += 1
    for k in range(nw):
        s = wstart[k]
        feats[fill[s]] = _mixed(whash[k], salts[4])
        fill[s] += 1
        if k + 1 < nw:
            feats[fill[s]] = _mixed(whash[k] * p + whash[k + 1], salts[5])
            fill[s] += 1
    return first, feats


@njit(cache=True, nogil=True)
def _window_logit(feats, a, b, w, log1p, keys, cnts, touched):
    """The logit (less the bias) of the window holding feats[a:b]; the table is left empty again.
    Returns nan for a window without features."""
    if b <= a:
        return np.nan
    mask = keys.size - 1
    nt = 0
    for e in range(a, b):
        f = feats[e]
        slot = (f * 0x9E3779B1) & mask
        while True:
            k = keys[slot]
            if k == f:
                cnts[slot] += 1
                break
            if k < 0:
                keys[slot] = f
                cnts[slot] = 1
                touched[nt] = slot
                nt += 1
                break
            slot = (slot + 1) & mask
    top = log1p.size - 1
    sq = 0.0
    for t in range(nt):
        v = log1p[min(cnts[touched[t]], top)]
        sq += np.float64(v * v)
    norm = np.float32(np.sqrt(sq))
    z = 0.0
    for t in range(nt):
        slot = touched[t]
        v = log1p[min(cnts[slot], top)]
        z += np.float64(w[keys[slot]] * (v / norm))
        keys[slot] = -1
    return z


@njit(cache=True, nogil=True)
def _logits(cp, units, count, q0, q1, w, b, log1p, salts, p):
    """Each window's logit (fixed windows, then clauses); nan where a window has no features."""
    n = cp.size
    first, feats = _gram_table(cp, salts, p)
    stride = WINDOW // 2
    out = np.empty(count + q0.size, np.float64)
    cap = 64
    while cap < 2 * 6 * WINDOW:  # a window holds at most WINDOW characters (a clause too), ≤ 6 grams each
        cap <<= 1
    keys = np.full(cap, -1, np.int64)
    cnts = np.zeros(cap, np.int64)
    touched = np.empty(cap, np.int64)
    c = 0
    for j in range(count):  # window j: grams starting at units [j·S, (j + 2)·S)
        while c < n and units[c] < j * stride:
            c += 1
        e = c
        while e < n and units[e] < (j + 2) * stride:
            e += 1
        out[j] = _window_logit(feats, first[c], first[e], w, log1p, keys, cnts, touched) + b
    for q in range(q0.size):
        out[count + q] = _window_logit(feats, first[q0[q]], first[q1[q]], w, log1p, keys, cnts, touched) + b
    return out


def logits(lay: Layout, w: np.ndarray, b: float) -> np.ndarray:
    """One segment's window logits, in `lay.spans`' order; nan for a window without features."""
    return _logits(lay.seg.cp, lay.seg.units, lay.count, lay.q0, lay.q1, w, float(b), _LOG1P, _SALTS, _P)


def warm() -> None:
    """Compile (or load from numba's cache) before the first tool result needs it."""
    from fakcore.screening.model import layout

    for lay in layout("warm-up: the screener's model stage. Clauses, too.", compiled=True)[1]:
        logits(lay, np.zeros(DIM, np.float32), 0.0)
