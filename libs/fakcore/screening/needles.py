"""Every needle of the rules looked up in a text at once: one compiled pass instead of a str.find per needle.

The inline rules (inline.py) run only where their needles are: a rule is admitted if every group of its
needles has one in the (lower-cased) text, and on a long text it runs only in windows around them and is
tried only where the strings its matches start with are. All of that asks one question, of ~1,900
strings (needles, start strings, languages' signs): where is it in the text? A str.find each (~430 a 4k
text, most of them over the whole text for a needle that is not there) was a third of the stage.

`Vocabulary.scan` answers it for every string in one pass over the text's code points: at each position the
strings that start with its next one to four characters (a hash of them picks a bucket) are compared
there, and each found one records where (its first SPOTS places,
and how often). The answer is exact (no hash decides anything, a bucket is only where to look), so a rule
is admitted, and windowed, as a str.find per needle would have it: tests/unit/screening/test_needles.py
compares it with str.find for every string on the corpus and on odd text.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SPOTS = 33  # places kept per string: inline.py's windows give up on a needle found more than 32 times
_BUCKETS = 1 << 12  # per prefix length: strings bucketed by a hash of their first 1, 2, 3 or 4 characters
# (the tables are small, int32, so that they stay in cache between texts)


@njit(cache=True, nogil=True, inline="always")
def _key(cp, i, length):
    """A hash of cp[i:i + length] (< 2^53 before the shift: exact in int64 and in Python alike)."""
    h = np.int64(length)
    for j in range(length):
        h = ((h * 0x2F) ^ np.int64(cp[i + j])) & 0xFFFFFFFFFFF  # 44 bits kept: x 0x2F + a code point stays below 2^53
    return ((h * 0x9E3779B1) >> 17) & (_BUCKETS - 1)


@njit(cache=True, nogil=True)
def _scan(cp, chars, offs, bucket_at, bucket_ids, counts, first, spots):
    """counts[s]: how often string s is in cp (overlaps counted, as str.find from the last place + 1 finds
    them); first[s]: where first (-1: nowhere); spots[s, :min(count, SPOTS)]: where, in order. A string is
    in the buckets of its first min(len, 4) characters (table L - 1 of bucket_at), so at each position four
    buckets are looked in, and their strings compared there."""
    n = cp.size
    for i in range(n):
        for length in range(1, 5):
            if i + length > n:
                break
            h = (length - 1) * _BUCKETS + _key(cp, i, length)
            for k in range(bucket_at[h], bucket_at[h + 1]):
                s = bucket_ids[k]
                lo, hi = offs[s], offs[s + 1]
                if i + hi - lo > n:
                    continue
                j = 0
                while lo + j < hi and chars[lo + j] == cp[i + j]:
                    j += 1
                if lo + j == hi:
                    c = counts[s]
                    if c == 0:
                        first[s] = i
                    if c < SPOTS:
                        spots[s, c] = i
                    counts[s] = c + 1


@njit(cache=True, nogil=True)
def _fires(counts, rule_at, group_at, members):
    """Per rule: every group of its needles has one that is there (rule r's groups are
    group_at[rule_at[r]:rule_at[r + 1]], group g's strings members[group_at[g]:group_at[g + 1]])."""
    out = np.ones(rule_at.size - 1, np.bool_)
    for r in range(rule_at.size - 1):
        for g in range(rule_at[r], rule_at[r + 1]):
            found = False
            for k in range(group_at[g], group_at[g + 1]):
                if counts[members[k]] > 0:
                    found = True
                    break
            if not found:
                out[r] = False
                break
    return out


def _code_points(s: str) -> np.ndarray:
    return np.frombuffer(s.encode("utf-32-le", "surrogatepass"), np.uint32)


class Vocabulary:
    """Strings (non-empty, distinct) to look up together, and the needle groups of a list of rules
    (`groups[r]`: rule r's groups of strings, each string one of `strings`; () for a rule that always runs)."""

    def __init__(self, strings: list[str], groups: list[tuple[tuple[str, ...], ...]] = ()):
        assert all(strings) and len(set(strings)) == len(strings)
        self.strings = list(strings)
        self.index = {s: i for i, s in enumerate(self.strings)}
        self.chars = np.concatenate([_code_points(s) for s in self.strings] or [np.zeros(0, np.uint32)])
        self.offs = np.cumsum([0] + [len(s) for s in self.strings]).astype(np.int32)
        keys = [(min(len(s), 4) - 1) * _BUCKETS + _key(_code_points(s), 0, min(len(s), 4)) for s in self.strings]
        self.bucket_at, self.bucket_ids = _buckets(keys, 4 * _BUCKETS)
        self.rule_at = np.cumsum([0] + [len(gs) for gs in groups]).astype(np.int32)
        self.group_at = np.cumsum([0] + [len(g) for gs in groups for g in gs]).astype(np.int32)
        self.members = np.asarray([self.index[s] for gs in groups for g in gs for s in g], np.int32)

    def scan(self, low: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(counts, first, spots) of every string in `low` (see `_scan`)."""
        counts = np.zeros(len(self.strings), np.int32)
        first = np.full(len(self.strings), -1, np.int32)
        spots = np.empty((len(self.strings), SPOTS), np.int32)
        _scan(_code_points(low), self.chars, self.offs, self.bucket_at, self.bucket_ids, counts, first, spots)
        return counts, first, spots

    def fires(self, counts: np.ndarray) -> np.ndarray:
        """Per rule of `groups`: whether each of its groups has a string in the text."""
        return _fires(counts, self.rule_at, self.group_at, self.members)


def _buckets(keys: list[int], size: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the strings by bucket: bucket b holds ids[at[b]:at[b + 1]] (key -1: in none)."""
    keys_a = np.asarray(keys, np.int64)
    ids = np.flatnonzero(keys_a >= 0)
    ids = ids[np.argsort(keys_a[ids], kind="stable")]
    at = np.searchsorted(keys_a[ids], np.arange(size + 1), side="left").astype(np.int32)
    return at, ids.astype(np.int32)
