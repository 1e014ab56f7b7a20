"""The model stage: a small linear classifier over hashed character and word n-grams, scored window by window.

Why this model: it ships inside fak's own wheel (`fakcore/data/screening/ngram-lr.npz`, 0.7 MB), needs
numpy and numba only, scores a typical tool result (under 1k characters) in about 0.2 ms CPU on one core (4k
characters: ~0.6 ms median; the compiled pass is fastmodel.py), and catches what the rules cannot enumerate (social engineering without trigger
words, paraphrases, other languages). It is trained by
`python -m bench screening --train` on fak's own corpus (bench/screening_corpus.py), never on a
benchmark's data.

    text  -> reveal (normalize.py: hidden unicode, escapes, decoded payloads): the text and its layers
          -> per segment, Unicode code points, lower-cased; format characters (ZWJ…) dropped, whitespace
             runs made one space, digits made '0' (an amount or an IBAN is no word)
          -> windows of WINDOW units, stride WINDOW/2 (a CJK character counts 3 units, any other 1: an
             injection is a sentence in a long document, and a CJK sentence is a third as long), and one
             window per clause (a line, a field value, a sentence)
          -> per window: hashed char 2-5-grams + word 1-2-grams mod DIM, log(1+count), L2-normalised  x
          -> p = sigmoid(w·x + b); a result's score is the max over its windows

Hashing: polynomial hashes mod 2^64 (numpy wraps): a char n-gram's from the (n-1)-gram's, a word's from
one prefix sum; a splitmix finaliser spreads the bits. `window_scores` gives each window's probability
with its span in the revealed text, so the screener can name what it quarantined.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fakcore.screening.normalize import Revealed, reveal

FEATURES = "chars2-5+words1-2/windows+clauses/v3"  # what `windows` computes; a weights file names its own
_BITS = 19
DIM = 1 << _BITS  # hashed feature space
CHAR_NGRAMS = (2, 3, 4, 5)
WINDOW = 320  # units per window (a CJK character is 3 units, anything else 1)
CJK = 0x2E80  # code points from here (CJK, kana, hangul, fullwidth forms) count 3 units
DEFAULT_PATH = Path(__file__).resolve().parents[1] / "data" / "screening" / "ngram-lr.npz"

_P = np.uint64(0x100000001B3)  # odd, so invertible mod 2^64
_P_INV = np.uint64(pow(0x100000001B3, -1, 1 << 64))
_SALT = {k: np.uint64((0x9E3779B97F4A7C15 * (i + 1)) & (2**64 - 1)) for i, k in enumerate(("c2", "c3", "c4", "c5", "w1", "w2"))}
# dropped before featurising: zero-width and joiner characters, bidi controls, soft hyphen, BOM
_FORMAT = np.array([0x00AD, 0x180E, *range(0x200B, 0x2010), *range(0x202A, 0x202F), *range(0x2060, 0x2065),
                    *range(0x2066, 0x206A), 0xFEFF], np.uint32)
MIN_CLAUSE = 16  # characters: a shorter clause (a label, a name, a number) is too little to judge alone
# per code point below 0x10000, for `_clauses`: 1 separator, 2 whitespace (as the regex \s), 4 . ! ?, 8 。！？
_CLAUSE = np.zeros(0x10000, np.uint8)
_CLAUSE[[ord(c) for c in '\n"<>;|']] |= 1
_CLAUSE[[c for c in range(0x3001) if chr(c).isspace()]] |= 2
_CLAUSE[[ord(c) for c in ".!?"]] |= 4
_CLAUSE[[ord(c) for c in "。！？"]] |= 8
_SPACE = np.array([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0xA0, 0x3000], np.uint32)
# per code point below 0x10000 (all of the above are): 1 dropped, 2 whitespace (a lookup beats np.isin)
_CLASS = np.zeros(0x10000, np.uint8)
_CLASS[_FORMAT] = 1
_CLASS[_SPACE] = 2
_LOG1P = np.log1p(np.arange(4096, dtype=np.float32))  # a window's count of one feature stays far below


def _mix(h: np.ndarray, salt: np.uint64) -> np.ndarray:
    """splitmix64's finaliser, then the top bits as a feature index in [0, DIM)."""
    h = h ^ salt
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    h = h ^ (h >> np.uint64(31))
    return (h >> np.uint64(64 - _BITS)).astype(np.int64)


def _lower(s: str) -> str:
    """Lower case, one character for one (offsets into the text stay valid)."""
    t = s.lower()
    return t if len(t) == len(s) else "".join(c.lower()[:1] or c for c in s)


@dataclass
class Segment:
    """One text's featurisable form: normalised code points and where each came from."""

    cp: np.ndarray  # (n,) uint64 code points after normalisation
    pos: np.ndarray  # (n,) int64 offset of each in the source text
    units: np.ndarray  # (n + 1,) int64 cumulative window units before each character
    raw: np.ndarray  # (len(source),) uint32 code points of the source text, lower-cased


def segment(text: str) -> Segment:
    raw = cp = np.frombuffer(_lower(text).encode("utf-32-le", "surrogatepass"), np.uint32)
    cls = _CLASS[np.minimum(cp, 0xFFFF)]  # 0xFFFF is neither
    pos = np.flatnonzero(cls != 1)
    cp = cp[pos]
    ws = cls[pos] == 2
    keep = ~(ws & np.concatenate([[True], ws[:-1]]))  # one space per run (and none leading)
    cp, pos = cp[keep].copy(), pos[keep]
    cp[ws[keep]] = 0x20
    cp[(cp >= 0x30) & (cp <= 0x39)] = 0x30
    units = np.concatenate([[0], np.cumsum(np.where(cp >= CJK, 3, 1))])
    return Segment(cp.astype(np.uint64), pos.astype(np.int64), units, raw)


def _prefix(cp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S, P^k): S[k] = Σ_{j<k} cp[j]·P^-j, so the hash of cp[a:b] is (S[b] - S[a])·P^(b-1)."""
    n = len(cp)
    with np.errstate(over="ignore"):
        inv = np.cumprod(np.concatenate([[np.uint64(1)], np.full(max(n - 1, 0), _P_INV, np.uint64)]))[:n]
        pw = np.cumprod(np.concatenate([[np.uint64(1)], np.full(n, _P, np.uint64)]))
        s = np.concatenate([[np.uint64(0)], np.cumsum(cp * inv, dtype=np.uint64)])
    return s, pw


def _substr(s: np.ndarray, pw: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (s[b] - s[a]) * pw[b - 1]


def _is_word(cp: np.ndarray) -> np.ndarray:
    """Letters and digits of alphabetic scripts and hangul; CJK and kana are left to the char n-grams."""
    return (((cp >= 0x30) & (cp <= 0x39)) | ((cp >= 0x61) & (cp <= 0x7A)) | ((cp >= 0xC0) & (cp < CJK) & (cp != 0xD7) & (cp != 0xF7))
            | ((cp >= 0xAC00) & (cp <= 0xD7AF)))


def _grams(seg: Segment) -> tuple[np.ndarray, np.ndarray]:
    """(start character, feature index) of every char n-gram and word 1-2-gram of a segment."""
    n = len(seg.cp)
    with np.errstate(over="ignore"):
        grams = []
        h = seg.cp
        for g in range(2, max(CHAR_NGRAMS) + 1):  # the hash of cp[i:i+g], from that of cp[i:i+g-1]
            h = h[:n - g + 1] * _P + seg.cp[g - 1:]
            if g in CHAR_NGRAMS:
                grams.append((np.arange(n - g + 1), _mix(h, _SALT[f"c{g}"])))
        s, pw = _prefix(seg.cp)
        edge = np.diff(np.concatenate([[False], _is_word(seg.cp), [False]]).astype(np.int8))
        ws, we = np.nonzero(edge == 1)[0], np.nonzero(edge == -1)[0]
        if ws.size:
            h1 = _substr(s, pw, ws, we)
            grams.append((ws, _mix(h1, _SALT["w1"])))
            grams.append((ws[:-1], _mix(h1[:-1] * _P + h1[1:], _SALT["w2"])))
    return np.concatenate([a for a, _ in grams]), np.concatenate([f for _, f in grams])


def _clauses(seg: Segment) -> tuple[np.ndarray, np.ndarray]:
    """The clauses of a segment as [start, end) indices into its normalised characters: the text between
    line breaks, quotes, tags, cell separators and sentence ends (a field value, a sentence, a line), of at
    least MIN_CLAUSE characters and at most one window. Vectorised, and the same as splitting the source
    at the regex `[\\n"<>;|]+|(?<=[.!?])\\s+|(?<=[。！？])`."""
    raw = seg.raw
    n = len(raw)
    if n < MIN_CLAUSE:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    kind = _CLAUSE[np.minimum(raw, 0xFFFF)]
    sep, ws, end, cjk_end = (kind & 1) > 0, (kind & 2) > 0, (kind & 4) > 0, (kind & 8) > 0
    # a whitespace run right after . ! ? is a boundary, unless it begins with a separator (that run is)
    idx = np.arange(n)
    before = np.maximum.accumulate(np.where(ws, -1, idx))  # the last non-whitespace at or before each
    run_start = before + 1
    after_end = (before >= 0) & end[np.maximum(before, 0)] & ~sep[np.minimum(run_start, n - 1)]
    bnd = sep | (ws & after_end)
    body = ~bnd
    cut_before = np.concatenate([[True], bnd[:-1] | cjk_end[:-1]])
    cut_after = np.concatenate([bnd[1:] | cjk_end[:-1], [True]])
    starts = np.flatnonzero(body & cut_before)
    ends = np.flatnonzero(body & cut_after) + 1
    long = ends - starts >= MIN_CLAUSE
    c0 = np.searchsorted(seg.pos, starts[long])
    c1 = np.searchsorted(seg.pos, ends[long])
    ok = (c1 - c0 >= 2) & (seg.units[c1] - seg.units[c0] <= WINDOW)
    return c0[ok], c1[ok]


@dataclass
class Layout:
    """Where one segment's windows lie: its normalised characters, the fixed windows' count, the clauses'
    [start, end) character indices, and each window's (start, end, segment) as `featurise` names it."""

    seg: Segment
    count: int  # fixed windows; the clause windows follow them
    q0: np.ndarray
    q1: np.ndarray
    spans: list[tuple[int, int, int]]


def layout(text: str, revealed: Revealed | None = None, compiled: bool = False) -> tuple[str, list[Layout]]:
    """`reveal(text).text` and the window layout of each of its segments (the text, then each decoded layer)
    with at least two characters; `revealed`: `reveal(text)` if the caller has it already; `compiled`:
    segments and clauses from fastmodel.py's loops (the same arrays) instead of this file's numpy."""
    r = reveal(text) if revealed is None else revealed
    if compiled:
        from fakcore.screening import fastmodel

        segment_of, clauses_of = fastmodel.segment, fastmodel.clauses
    else:
        segment_of, clauses_of = segment, _clauses
    out = []
    for k, seg_text in enumerate([r.text, *(t for _, t in r.layers)]):
        seg = segment_of(seg_text)
        n = len(seg.cp)
        if n < 2:
            continue
        stride = WINDOW // 2
        count = max(1, -(-(int(seg.units[-1]) - stride) // stride))  # windows starting below total - stride
        lo = np.arange(count) * stride
        c0 = np.minimum(np.searchsorted(seg.units, lo, side="left"), n - 1)
        c1 = np.maximum(np.minimum(np.searchsorted(seg.units, lo + WINDOW, side="left"), n), c0 + 1)
        q0, q1 = clauses_of(seg)
        if k == 0:
            spans = [(a, e, 0) for a, e in zip(seg.pos[c0].tolist(), (seg.pos[c1 - 1] + 1).tolist(), strict=True)]
            spans += [(a, e, 0) for a, e in zip(seg.pos[q0].tolist(), (seg.pos[q1 - 1] + 1).tolist(), strict=True)]
        else:
            spans = [(0, len(r.text), k)] * (count + len(q0))
        out.append(Layout(seg, count, q0, q1, spans))
    return r.text, out


def featurise(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int, int]]]:
    """The text's windows as one sparse matrix: (window, feature index, value) triples sorted by window,
    values L2-normalised per window, and each window's (start, end, segment): character offsets in
    `reveal(text).text` and 0, or for a window of a decoded layer (it has no place in the text) the whole
    text and the layer's number (1, 2, …).

    Two kinds of window: fixed ones, window j covering units [j·S, j·S + WINDOW), S = WINDOW/2 (an n-gram
    starting at unit u belongs to windows u//S and u//S - 1), and one per clause (`_clauses`: an
    injection is often one field or one sentence, and alone it is not diluted by the text around it). An
    n-gram belongs to three windows at most, and all are built at once with one sort. This is the
    reference the model is trained on; `NgramModel.window_scores` computes the same scores in one
    compiled pass (`_window_logits`)."""
    wins, feats, spans = [], [], []
    for lay in layout(text)[1]:
        at, f = _grams(lay.seg)
        j = lay.seg.units[at] // (WINDOW // 2)
        j2 = np.concatenate([j, j - 1])
        f2 = np.concatenate([f, f])
        ok = (j2 >= 0) & (j2 < lay.count)
        wins.append(j2[ok] + len(spans))
        feats.append(f2[ok])
        if len(lay.q0):
            q = np.searchsorted(lay.q0, at, side="right") - 1
            ok = (q >= 0) & (at < lay.q1[np.maximum(q, 0)])
            wins.append(q[ok] + len(spans) + lay.count)
            feats.append(f[ok])
        spans += lay.spans
    if not spans:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32), []
    key = (np.concatenate(wins) << _BITS) | np.concatenate(feats)
    key = np.sort(key.astype(np.uint32) if len(spans) < 1 << (32 - _BITS) else key)  # 32-bit keys sort faster
    first = np.concatenate([[True], key[1:] != key[:-1]])
    starts = np.flatnonzero(first)
    cnt = np.diff(np.append(starts, len(key)))
    key = key[starts].astype(np.int64)
    win, feat = key >> _BITS, key & (DIM - 1)
    val = _LOG1P[np.minimum(cnt, len(_LOG1P) - 1)]  # a table: np.log1p itself is a third of the time here
    norm = np.sqrt(np.bincount(win, weights=val * val, minlength=len(spans))).astype(np.float32)
    return win, feat, val / norm[win], spans


def windows(text: str) -> list[tuple[np.ndarray, np.ndarray, int, int, int]]:
    """Each window of the text as (feature indices, values, start, end, segment) (see `featurise`);
    windows without features left out."""
    win, feat, val, spans = featurise(text)
    cut = np.searchsorted(win, np.arange(len(spans) + 1))
    return [(feat[a:b], val[a:b], *spans[i]) for i, (a, b) in enumerate(zip(cut[:-1], cut[1:], strict=True)) if b > a]


@dataclass
class NgramModel:
    w: np.ndarray  # (DIM,) float32
    b: float
    threshold: float  # quarantine at or above (chosen on the training split for a low false-positive rate)
    version: str = ""
    features: str = FEATURES

    def window_scores(self, text: str, revealed: Revealed | None = None) -> list[tuple[float, int, int]]:
        """(probability, start, end) of each window with features, start/end character offsets in
        `reveal(text).text`: the compiled pass (fastmodel.py), the same scores as `reference_scores`."""
        from fakcore.screening import fastmodel  # it imports this module's constants

        out = []
        for lay in layout(text, revealed, compiled=True)[1]:
            z = fastmodel.logits(lay, self.w, self.b)
            p = 1.0 / (1.0 + np.exp(-z))
            out += [(float(p[i]), a, e) for i, (a, e, _) in enumerate(lay.spans) if z[i] == z[i]]  # nan: no features
        return out

    def reference_scores(self, text: str) -> list[tuple[float, int, int]]:
        """`window_scores` from `featurise`'s sparse matrix (what training sees)."""
        win, feat, val, spans = featurise(text)
        z = np.bincount(win, weights=self.w[feat] * val, minlength=len(spans)) + self.b
        p = 1.0 / (1.0 + np.exp(-z))
        present = np.bincount(win, minlength=len(spans)) > 0
        return [(float(p[i]), a, e) for i, (a, e, _) in enumerate(spans) if present[i]]

    def score(self, text: str) -> float:
        return max((p for p, _, _ in self.window_scores(text)), default=0.0)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, w=self.w.astype(np.float16), b=np.float32(self.b), threshold=np.float32(self.threshold),
                            version=np.array(self.version), features=np.array(self.features))

    @classmethod
    def load(cls, path: Path | str = DEFAULT_PATH) -> NgramModel:
        with np.load(path) as z:
            features = str(z["features"]) if "features" in z else "bytes3-5/v1"
            if features != FEATURES or z["w"].shape != (DIM,):
                raise OSError(f"{path}: weights for features {features!r} {z['w'].shape}, this code computes {FEATURES!r} ({DIM},); "
                              "retrain with `python -m bench screening --train`")
            return cls(w=z["w"].astype(np.float32), b=float(z["b"]), threshold=float(z["threshold"]), version=str(z["version"]),
                       features=features)


def train(rows: list[tuple[np.ndarray, np.ndarray]], labels: list[int], *, epochs: int = 200, l2: float = 1e-6,
          lr: float = 0.05) -> tuple[np.ndarray, float]:
    """Logistic regression on window feature vectors (`windows(...)[i][:2]`); full-batch Adam, classes
    balanced. Returns (w, b)."""
    r = np.concatenate([np.full(idx.size, i) for i, (idx, _) in enumerate(rows)])  # (nnz,) row of each entry
    c = np.concatenate([idx for idx, _ in rows])  # (nnz,) feature of each entry
    x = np.concatenate([v for _, v in rows]).astype(np.float64)  # (nnz,)
    y = np.asarray(labels, np.float64)
    n = len(rows)
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
