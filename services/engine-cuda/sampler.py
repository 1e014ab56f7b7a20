"""engine-cuda's sampling step: the choice of engine/sampling.Sampler, made on the device from logits that stay there.

One block per row, `threads` threads. The host sends each row's settings and the uniform number the sampler's
generator drew for it (Sampler.draw); one (token, status) pair per row comes back (statuses:
sampling.SAMPLED, NON_FINITE, NO_DRAW). The steps are Sampler.__call__'s, in float64 and in its order:

    argmax          the first index of the largest logit; any NaN or +inf: NON_FINITE (a tree over threads)
    greedy          temperature 0 or top_k 1: the argmax; every logit -inf: the argmax, NO_DRAW
    order           np.argsort(-logits, kind="stable"): by logit, larger first, equal ones by index (a bitonic
                    sort of (logit, index), padded to a power of two; the pad sorts last)
    top_k           the first k of that order: with 0 < k < V, a radix select takes the k first (select_top,
                    a few passes over the row) and only they are sorted (padded to a power of two); with
                    top_k off the sum below runs over the whole row in order, so the whole row is sorted
    probs           exp((logit - best) / temperature), divided by their sum: numpy's pairwise sum (sum_pairwise)
    top_p           keep = searchsorted(cumsum(probs), top_p) + 1, renormalised by the kept ones' pairwise sum
    choice          Generator.choice(p=probs): the first i with cumsum(probs)[i] / cumsum(probs)[-1] > u

The sums, cumulative sums and divisions are IEEE float64 operations in numpy's order, so they are numpy's bits.
exp is the one step whose last bit is each library's own (numpy's, libdevice's): a choice can differ only where u
falls within a rounding error of a boundary of the cumulative distribution. On the simulator (numba's
NUMBA_ENABLE_CUDASIM) exp is Python's, and the tests compare choices with Sampler's on the same seeds.

Sequential steps (the pairwise sums, the cumulative sums) run on one thread: their order is the numerics.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, float64, int32, int64

SAMPLE_THREADS = 256  # threads per row at most (a power of two)
PAIRWISE_BLOCK = 128  # numpy's PW_BLOCKSIZE: runs this long are summed with 8 accumulators
STACK = 64  # frames of the pairwise recursion (a depth of log2(n / 128) + 1)
RADIX = 256  # buckets of the top-k select: a digit is a byte
SIGN, ALL_ONES = 0x80000000, 0xFFFFFFFF  # of float32 bits
NEG_INF32 = np.float32(-np.inf)
NEG_INF64 = np.float64(-np.inf)


@cuda.jit(device=True)
def before(ka, ia, kb, ib):
    """(logit ka, index ia) comes before (kb, ib) in a stable descending argsort."""
    return ka > kb or (ka == kb and ia < ib)


@cuda.jit(device=True)
def run_sum(a, r, lo, n):
    """numpy's pairwise_sum on a run of n <= PAIRWISE_BLOCK: a plain loop under 8, else 8 accumulators added
    in a fixed tree, then the remainder one by one."""
    if n < 8:
        res = float64(0.0)
        for i in range(n):
            res += a[r, lo + i]
        return res
    r0, r1, r2, r3 = a[r, lo], a[r, lo + 1], a[r, lo + 2], a[r, lo + 3]
    r4, r5, r6, r7 = a[r, lo + 4], a[r, lo + 5], a[r, lo + 6], a[r, lo + 7]
    i = 8
    while i < n - n % 8:
        r0 += a[r, lo + i]
        r1 += a[r, lo + i + 1]
        r2 += a[r, lo + i + 2]
        r3 += a[r, lo + i + 3]
        r4 += a[r, lo + i + 4]
        r5 += a[r, lo + i + 5]
        r6 += a[r, lo + i + 6]
        r7 += a[r, lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[r, lo + i]
        i += 1
    return res


@cuda.jit(device=True)
def sum_pairwise(a, r, n, st_lo, st_n, st_phase, st_left):
    """a[r, 0:n].sum() as numpy computes it (np.add.reduce on a contiguous float64 row: 0 + pairwise_sum), its
    recursion `sum(n) = sum(h) + sum(n - h)`, h = n // 2 rounded down to a multiple of 8, kept on a stack."""
    sp = 0
    st_lo[0], st_n[0], st_phase[0] = 0, n, 0
    ret = float64(0.0)
    while sp >= 0:
        lo, m = st_lo[sp], st_n[sp]
        h = m // 2
        h -= h % 8
        if m <= PAIRWISE_BLOCK:
            ret = run_sum(a, r, lo, m)
            sp -= 1
        elif st_phase[sp] == 0:  # the left half first
            st_phase[sp] = 1
            sp += 1
            st_lo[sp], st_n[sp], st_phase[sp] = lo, h, 0
        elif st_phase[sp] == 1:  # the left half's sum is in ret: the right half
            st_left[sp] = ret
            st_phase[sp] = 2
            sp += 1
            st_lo[sp], st_n[sp], st_phase[sp] = lo + h, m - h, 0
        else:
            ret = st_left[sp] + ret
            sp -= 1
    return float64(0.0) + ret


@cuda.jit(device=True)
def bitonic(keys, ids, b, m, tid, nt):
    """keys, ids[b, 0:m] (m a power of two) into the stable descending order (`before` first): a bitonic sort,
    (m / 2) log2(m) (log2(m) + 1) / 2 compare-exchanges in log2(m) (log2(m) + 1) / 2 synchronised stages."""
    k = 2
    while k <= m:
        half = k // 2
        while half > 0:
            cuda.syncthreads()
            for i in range(tid, m, nt):
                other = i ^ half
                if other > i:
                    ahead = before(keys[b, other], ids[b, other], keys[b, i], ids[b, i])
                    if ahead == ((i & k) == 0):
                        keys[b, i], keys[b, other] = keys[b, other], keys[b, i]
                        ids[b, i], ids[b, other] = ids[b, other], ids[b, i]
            half //= 2
        k *= 2
    cuda.syncthreads()


@cuda.jit(device=True)
def ordered(x):
    """float32 bits x (0 <= x < 2**32) as a key that orders as the float does (larger key, larger logit), -0.0
    as 0.0: they are equal logits, whose order is their indexes'. -inf is the smallest; NaN never comes here."""
    if x == SIGN:
        x = 0
    return ALL_ONES - x if x >= SIGN else x + SIGN


@cuda.jit(device=True)
def select_top(logits, bits, row, n, keys, ids, b, hist, ctl, tid, nt):
    """The first n < V of the row's stable descending order, in no order, into keys, ids[b, 0:n] (float64 logit,
    index); the pad (-inf, V + i) after them up to m, the power of two >= n, which is returned.

    A radix select on the key (ordered(logit), V - 1 - index), larger first: 32 + ceil(log2(V) / 8) * 8 bits, 8
    a pass from the top. A pass counts the row's keys that match the digits chosen so far, by their next digit
    (hist); the digit whose bucket holds the n-th largest is chosen, the buckets above it are taken. The keys
    are distinct (the index is in them), so it ends at the latest with the last digit, and sooner when the
    whole bucket is taken (the n-th and the (n+1)-th largest logits differ in the digits read so far): those
    with a prefix at least the chosen one are exactly the n first of the order, whatever the ties."""
    V = logits.shape[1]
    lo_passes, rest = 0, V - 1
    while rest > 0:  # bytes of the index part
        lo_passes += 1
        rest >>= 8
    hi_pre, hi_mask, lo_pre, lo_mask = int64(0), int64(0), int64(0), int64(0)
    need, p = int64(n), 0
    while True:  # digit p: of the logit's 4 bytes, then of the index's
        on_hi = p < 4
        shift = 24 - 8 * p if on_hi else 8 * (lo_passes - 1 - (p - 4))
        for i in range(tid, RADIX, nt):
            hist[i] = 0
        cuda.syncthreads()
        for j in range(tid, V, nt):
            h, lo = ordered(int64(bits[row, j])), V - 1 - j
            if (h & hi_mask) == hi_pre and (lo & lo_mask) == lo_pre:
                cuda.atomic.add(hist, ((h if on_hi else lo) >> shift) & (RADIX - 1), 1)
        cuda.syncthreads()
        if tid == 0:
            d, above = RADIX - 1, int64(0)
            while above + hist[d] < need:
                above += hist[d]
                d -= 1
            ctl[0], ctl[1], ctl[2] = d, need - above, hist[d] == need - above
        cuda.syncthreads()
        d, need, whole = ctl[0], ctl[1], ctl[2]
        if on_hi:
            hi_pre |= d << shift
            hi_mask |= (RADIX - 1) << shift
        else:
            lo_pre |= d << shift
            lo_mask |= (RADIX - 1) << shift
        if whole:
            break
        p += 1
    m = 1
    while m < n:
        m *= 2
    for i in range(n + tid, m, nt):
        keys[b, i] = NEG_INF64
        ids[b, i] = V + i
    if tid == 0:
        ctl[3] = 0
    cuda.syncthreads()
    for j in range(tid, V, nt):
        h, lo = ordered(int64(bits[row, j])) & hi_mask, (V - 1 - j) & lo_mask
        if h > hi_pre or (h == hi_pre and lo >= lo_pre):
            at = cuda.atomic.add(ctl, 3, 1)
            keys[b, at] = float64(logits[row, j])
            ids[b, at] = j
    cuda.syncthreads()
    return m


@cuda.jit
def sample(logits, bits, rows, params, top_k, keys, ids, probs, out):
    """out[b] = (token, status) for logits[rows[b]]; bits: logits viewed as uint32; params[b] = (greedy,
    temperature, top_p, u) in float64, top_k[b]. Scratch: keys, ids (B, P) with P the row padded to a power of
    two (a row with a top k uses the first k rounded up to a power of two); probs (B, V)."""
    tid, nt = cuda.threadIdx.x, cuda.blockDim.x
    best_v = cuda.shared.array(SAMPLE_THREADS, float32)
    best_i = cuda.shared.array(SAMPLE_THREADS, int64)
    bad = cuda.shared.array(SAMPLE_THREADS, int32)
    share = cuda.shared.array(2, float64)
    share_i = cuda.shared.array(1, int64)
    hist = cuda.shared.array(RADIX, int32)
    ctl = cuda.shared.array(4, int64)
    st_lo = cuda.local.array(STACK, int64)
    st_n = cuda.local.array(STACK, int64)
    st_phase = cuda.local.array(STACK, int32)
    st_left = cuda.local.array(STACK, float64)
    V, P = logits.shape[1], keys.shape[1]
    for b in range(cuda.blockIdx.x, rows.shape[0], cuda.gridDim.x):
        row = rows[b]
        # -- argmax (first index of the largest) and the finite check --------------------------------------
        bv, bi, flag = NEG_INF32, int64(V), int32(0)
        for j in range(tid, V, nt):
            x = logits[row, j]
            if x != x or x == -NEG_INF32:
                flag = 1
            elif bi == V or x > bv:
                bv, bi = x, j
        best_v[tid], best_i[tid], bad[tid] = bv, bi, flag
        s = nt // 2
        while s > 0:
            cuda.syncthreads()
            if tid < s:
                ov, oi = best_v[tid + s], best_i[tid + s]
                if oi != V and (best_i[tid] == V or ov > best_v[tid] or (ov == best_v[tid] and oi < best_i[tid])):
                    best_v[tid], best_i[tid] = ov, oi
                if bad[tid + s]:
                    bad[tid] = 1
            s //= 2
        cuda.syncthreads()
        best, top, faulty = best_i[0], best_v[0], bad[0]
        greedy, temperature, top_p, u = params[b, 0] != 0, params[b, 1], params[b, 2], params[b, 3]
        cuda.syncthreads()  # every thread has read the tree's root before the next row writes it
        if faulty or greedy or top == NEG_INF32:
            if tid == 0:
                out[b, 0] = best
                out[b, 1] = 1 if faulty else (0 if greedy else 2)
            continue
        # -- the stable descending order: of the top k alone where there is one, else of the whole row ----
        n = V
        if 0 < top_k[b] < V:
            n = top_k[b]
        if n < V:
            m = select_top(logits, bits, row, n, keys, ids, b, hist, ctl, tid, nt)
        else:
            for j in range(tid, P, nt):
                keys[b, j] = float64(logits[row, j]) if j < V else NEG_INF64
                ids[b, j] = j
            m = P
        bitonic(keys, ids, b, m, tid, nt)
        # -- probabilities of the top k, the nucleus, the choice --------------------------------------------
        xb = keys[b, 0]
        for i in range(tid, n, nt):
            probs[b, i] = math.exp((keys[b, i] - xb) / temperature)
        cuda.syncthreads()
        if tid == 0:
            share[0] = sum_pairwise(probs, b, n, st_lo, st_n, st_phase, st_left)
        cuda.syncthreads()
        total = share[0]
        for i in range(tid, n, nt):
            probs[b, i] = probs[b, i] / total
        cuda.syncthreads()
        keep = n
        if top_p < 1.0:
            if tid == 0:
                c, cut = float64(0.0), n
                for i in range(n):
                    c += probs[b, i]
                    if c >= top_p:
                        cut = i + 1
                        break
                share_i[0] = cut
                share[1] = sum_pairwise(probs, b, cut, st_lo, st_n, st_phase, st_left)
            cuda.syncthreads()
            keep, kept = share_i[0], share[1]
            for i in range(tid, keep, nt):
                probs[b, i] = probs[b, i] / kept
            cuda.syncthreads()
        if tid == 0:
            last = float64(0.0)
            for i in range(keep):
                last += probs[b, i]
            c, pick = float64(0.0), keep - 1
            for i in range(keep):
                c += probs[b, i]
                if c / last > u:
                    pick = i
                    break
            out[b, 0] = ids[b, pick]
            out[b, 1] = 0
        cuda.syncthreads()  # the scratch and shared arrays are the next row's


def padded(vocab: int) -> int:
    """The row padded to a power of two: the width of the sort's scratch."""
    return 1 << max(0, vocab - 1).bit_length()


def device_bytes(rows: int, vocab: int) -> int:
    """What a DeviceSampler holds on the device for batches of up to `rows`: its scratch (keys and ids (rows,
    padded) float64 and int64, probabilities (rows, vocab) float64) and a launch's own arrays (rows, settings
    and top k up, (token, status) back: 64 bytes a row)."""
    return rows * (padded(vocab) * (8 + 8) + vocab * 8) + rows * 64


class DeviceSampler:
    """Launches `sample` for a backend: scratch kept between steps (grown on demand), four copies a step (the
    rows, their settings and top k up, (token, status) back); the logits' uint32 view is the same memory."""

    def __init__(self, backend, threads: int):
        if threads < 1 or threads > SAMPLE_THREADS or threads & (threads - 1):
            raise ValueError(f"sampling threads must be a power of two up to {SAMPLE_THREADS}, not {threads}")
        self.be, self.threads = backend, threads
        self._scratch: tuple = ()

    def scratch(self, rows: int, vocab: int) -> tuple:
        """(keys, ids, probs) for at least `rows` rows (device_bytes counts them)."""
        if not self._scratch or self._scratch[0].shape[0] < rows or self._scratch[2].shape[1] != vocab:
            cuda_, width = self.be.cuda, padded(vocab)
            rows = max(rows, self._scratch[0].shape[0] if self._scratch else 0)
            self._scratch = (cuda_.device_array((rows, width), np.float64), cuda_.device_array((rows, width), np.int64),
                             cuda_.device_array((rows, vocab), np.float64))
        return self._scratch

    def __call__(self, logits, rows: np.ndarray, draws) -> tuple[np.ndarray, np.ndarray]:
        cuda_ = self.be.cuda
        n = len(rows)
        params = np.array([(d.greedy, d.temperature, d.top_p, d.u) for d in draws], np.float64).reshape(n, 4)
        top_k = np.array([d.top_k for d in draws], np.int64)
        keys, ids, probs = self.scratch(n, logits.shape[1])
        out = cuda_.device_array((n, 2), np.int64)
        sample[(self.be._g(n),), (self.threads,)](logits, logits.view(np.uint32), cuda_.to_device(np.ascontiguousarray(rows, np.int64)),
                                                  cuda_.to_device(params), cuda_.to_device(top_k), keys, ids, probs, out)
        got = out.copy_to_host()
        return got[:, 0], got[:, 1]
