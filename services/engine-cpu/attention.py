"""The batched attention kernel of the fast CPU backend: every row of a batch against its own sequence's cache.

A query's scores and its weighted sum of values are register tiles emitted as LLVM IR (numba cannot hold a
vector in a register across a loop): scores for a few query heads x a few 16-key vectors accumulate over
the features d in registers, one key load serving every head of the tile; the output for a few heads x a
few 16-feature vectors accumulates over the keys, one value load serving every head. Each score is still
its own chain of FMAs over d from 0 in order, and each output element its own chain over the keys in
position order, whatever the tile: so a query's result does not depend on the rest of the batch, and the
AVX-512 and AVX2 shapes of the tiles (which differ only in how many vectors a tile holds) give the same bits.
(The tiles live in this file with the kernel that inlines them: numba's on-disk cache revalidates a kernel
against the file that defines it.)
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, prange, types
from numba.extending import intrinsic

from fak_engine_cpu.kernels import FAST, _exp, _float32_ptr, _half_bits, _uint16_ptr, target_features

_I1, _I32, _I64, _F32 = ir.IntType(1), ir.IntType(32), ir.IntType(64), ir.FloatType()
_V16F32, _V16I32, _V16I1 = ir.VectorType(_F32, 16), ir.VectorType(_I32, 16), ir.VectorType(_I1, 16)
_V16I16, _V16F16 = ir.VectorType(ir.IntType(16), 16), ir.VectorType(ir.HalfType(), 16)
# positions per block of a half cache's keys, (L, Hkv, blocks, D, KEY_BLOCK) with blocks = key_blocks(S): one
# 16-lane vector of a feature's keys, what the scores tile loads at a time
KEY_BLOCK = 16
# 32 vector registers (AVX-512) or 16 (AVX2, where a 16-float vector takes two)
_WIDE = "avx512f" in target_features()


def _emit_tile(builder: ir.IRBuilder, heads: int, vectors: int, steps: ir.Value, operand, vector_ptr, lanes_valid, store,
               half: bool = False):
    """The common loop: accs[h][v] = sum over s < steps of operand(h, s) * vector(v, s), an FMA at a time in
    order of s from a zero start; then store(h, v, acc, mask) for every accumulator. half: the vectors are 16
    half floats (their bits as uint16), widened exactly to float32; loaded whole (the caches' half copies are
    padded so that a vector past the valid lanes stays inside them; those lanes are never stored)."""
    module = builder.module
    fma = module.declare_intrinsic("llvm.fma.v16f32", fnty=ir.FunctionType(_V16F32, [_V16F32, _V16F32, _V16F32]))
    load = module.declare_intrinsic("llvm.masked.load.v16f32.p0v16f32",
                                    fnty=ir.FunctionType(_V16F32, [_V16F32.as_pointer(), _I32, _V16I1, _V16F32]))
    masks = [lanes_valid(v) for v in range(vectors)]
    zero = ir.Constant(_V16F32, None)
    entry = builder.block
    loop = builder.append_basic_block("tile.loop")
    done = builder.append_basic_block("tile.done")
    builder.cbranch(builder.icmp_signed(">", steps, ir.Constant(_I64, 0)), loop, done)
    builder.position_at_end(loop)
    s = builder.phi(_I64)
    s.add_incoming(ir.Constant(_I64, 0), entry)
    accs = [[builder.phi(_V16F32) for _ in range(vectors)] for _ in range(heads)]
    for row in accs:
        for acc in row:
            acc.add_incoming(zero, entry)
    if half:
        vecs = [builder.fpext(builder.bitcast(builder.load(vector_ptr(v, s), align=2), _V16F16), _V16F32) for v in range(vectors)]
    else:
        vecs = [builder.call(load, [vector_ptr(v, s), ir.Constant(_I32, 4), masks[v], zero]) for v in range(vectors)]
    new = []
    for h in range(heads):
        value = builder.insert_element(ir.Constant(_V16F32, None), operand(h, s), ir.Constant(_I32, 0))
        splat = builder.shuffle_vector(value, value, ir.Constant(_V16I32, [0] * 16))
        new.append([builder.call(fma, [splat, vecs[v], accs[h][v]]) for v in range(vectors)])
    s2 = builder.add(s, ir.Constant(_I64, 1))
    s.add_incoming(s2, loop)
    for h in range(heads):
        for v in range(vectors):
            accs[h][v].add_incoming(new[h][v], loop)
    builder.cbranch(builder.icmp_signed("<", s2, steps), loop, done)
    builder.position_at_end(done)
    finals = []
    for h in range(heads):
        row = []
        for v in range(vectors):
            phi = builder.phi(_V16F32)
            phi.add_incoming(zero, entry)
            phi.add_incoming(new[h][v], loop)
            row.append(phi)
        finals.append(row)
    for h in range(heads):
        for v in range(vectors):
            store(h, v, finals[h][v], masks[v])


def _masked_store(builder: ir.IRBuilder, value: ir.Value, ptr: ir.Value, mask: ir.Value) -> None:
    store = builder.module.declare_intrinsic("llvm.masked.store.v16f32.p0v16f32",
                                             fnty=ir.FunctionType(ir.VoidType(), [_V16F32, _V16F32.as_pointer(), _I32, _V16I1]))
    builder.call(store, [value, ptr, ir.Constant(_I32, 4), mask])


def _lanes_below(builder: ir.IRBuilder, first: ir.Value, limit: ir.Value) -> ir.Value:
    """v16i1: lane i set where first + i < limit."""
    def splat(x):
        v = builder.insert_element(ir.Constant(_V16I32, None), builder.trunc(x, _I32), ir.Constant(_I32, 0))
        return builder.shuffle_vector(v, v, ir.Constant(_V16I32, [0] * 16))
    return builder.icmp_signed("<", builder.add(splat(first), ir.Constant(_V16I32, list(range(16)))), splat(limit))


def _address(builder, arr, *index_strides):
    """arr's data pointer (as bytes) advanced by sum of index * stride bytes."""
    ptr = builder.bitcast(arr.data, ir.IntType(8).as_pointer())
    offset = ir.Constant(_I64, 0)
    for index, stride in index_strides:
        offset = builder.add(offset, builder.mul(index, stride))
    return builder.gep(ptr, [offset])


def _make_qk(heads: int, vectors: int, half: bool = False):
    """_qk(q (H, D), keys_t (Hkv, D, S), kvh, lo, count, g0, j0, scores (G, count)): scores[g0 + h, j0 + j]
    for h < heads and j < 16 * vectors (within count) = sum over d of q[kvh * G + g0 + h, d] *
    keys_t[kvh, d, lo + j0 + j]. half: the keys are half floats' bits (uint16) in blocks of KEY_BLOCK (16)
    positions, keys_t (Hkv, blocks, D, 16) holding position p's feature d at [kvh, p // 16, d, p % 16] (a block's D x 16
    values contiguous: a decode query over a short context reads one stretch of memory, where a row per
    feature touched D cache lines), and lo a multiple of 16."""

    def codegen(context, builder, signature, args):
        q, kt, kvh, lo, count, g0, j0, sc = args
        q, kt, sc = (context.make_array(t)(context, builder, a) for t, a in zip(
            (signature.args[0], signature.args[1], signature.args[7]), (q, kt, sc), strict=True))
        G = builder.extract_value(sc.shape, 0)
        D = builder.extract_value(q.shape, 1)
        qs = builder.extract_value(q.strides, 0)
        ks0, ks1 = builder.extract_value(kt.strides, 0), builder.extract_value(kt.strides, 1)
        ks2 = builder.extract_value(kt.strides, 2) if half else None
        ss = builder.extract_value(sc.strides, 0)
        four = ir.Constant(_I64, 4)
        qrows = [builder.bitcast(_address(builder, q, (builder.add(builder.mul(kvh, G), builder.add(g0, ir.Constant(_I64, h))), qs)),
                                 _F32.as_pointer()) for h in range(heads)]
        kfirst = builder.add(lo, j0)
        starts = [builder.add(kfirst, ir.Constant(_I64, 16 * v)) for v in range(vectors)]
        if half:  # whole blocks: a vector wholly past the visible keys reads the last one's block instead (its
            # lanes are never stored), so no load reaches past the cache's blocks
            last = builder.sub(builder.add(lo, count), ir.Constant(_I64, 1))
            blocks = [builder.udiv(builder.select(builder.icmp_signed("<=", st, last), st, last), ir.Constant(_I64, KEY_BLOCK))
                      for st in starts]

        def operand(h, d):
            return builder.load(builder.gep(qrows[h], [d]))

        def vector_ptr(v, d):
            if half:
                p = _address(builder, kt, (kvh, ks0), (blocks[v], ks1), (d, ks2))
            else:
                p = _address(builder, kt, (kvh, ks0), (d, ks1), (starts[v], four))
            return builder.bitcast(p, (_V16I16 if half else _V16F32).as_pointer())

        def store(h, v, acc, mask):
            p = _address(builder, sc, (builder.add(g0, ir.Constant(_I64, h)), ss), (builder.add(j0, ir.Constant(_I64, 16 * v)), four))
            _masked_store(builder, acc, builder.bitcast(p, _V16F32.as_pointer()), mask)

        _emit_tile(builder, heads, vectors, D, operand, vector_ptr,
                   lambda v: _lanes_below(builder, builder.add(j0, ir.Constant(_I64, 16 * v)), count), store, half)
        return context.get_dummy_value()

    @intrinsic
    def qk(typingctx, q, keys_t, kvh, lo, count, g0, j0, scores):
        return types.none(q, keys_t, kvh, lo, count, g0, j0, scores), codegen

    qk._set_uuid(f"fak.attention.qk:{heads}x{vectors}{'h' if half else ''}")
    return qk


def _make_pv(heads: int, vectors: int, half: bool = False):
    """_pv(p (G, count), values (Hkv, S, D), kvh, lo, count, g0, dd0, out (H, D)): out[kvh * G + g0 + h,
    dd0 + e] for h < heads and e < 16 * vectors (within D) = sum over j < count, in order, of p[g0 + h, j] *
    values[kvh, lo + j, dd0 + e]. half: values holds half floats' bits (uint16)."""

    def codegen(context, builder, signature, args):
        p, va, kvh, lo, count, g0, dd0, out = args
        p, va, out = (context.make_array(t)(context, builder, a) for t, a in zip(
            (signature.args[0], signature.args[1], signature.args[7]), (p, va, out), strict=True))
        G = builder.extract_value(p.shape, 0)
        D = builder.extract_value(va.shape, 2)
        ps = builder.extract_value(p.strides, 0)
        vs0, vs1 = builder.extract_value(va.strides, 0), builder.extract_value(va.strides, 1)
        os_ = builder.extract_value(out.strides, 0)
        four, size = ir.Constant(_I64, 4), ir.Constant(_I64, 2 if half else 4)
        prows = [builder.bitcast(_address(builder, p, (builder.add(g0, ir.Constant(_I64, h)), ps)), _F32.as_pointer())
                 for h in range(heads)]
        starts = [builder.add(dd0, ir.Constant(_I64, 16 * v)) for v in range(vectors)]
        if half:  # whole loads: a vector wholly past the features reads the row's first ones instead (never stored),
            # so a load reaches at most 15 values past a row (value_rows pads the last)
            starts = [builder.select(builder.icmp_signed("<", st, D), st, ir.Constant(_I64, 0)) for st in starts]

        def operand(h, j):
            return builder.load(builder.gep(prows[h], [j]))

        def vector_ptr(v, j):
            ptr = _address(builder, va, (kvh, vs0), (builder.add(lo, j), vs1), (starts[v], size))
            return builder.bitcast(ptr, (_V16I16 if half else _V16F32).as_pointer())

        def store(h, v, acc, mask):
            row = builder.add(builder.mul(kvh, G), builder.add(g0, ir.Constant(_I64, h)))
            ptr = _address(builder, out, (row, os_), (builder.add(dd0, ir.Constant(_I64, 16 * v)), four))
            _masked_store(builder, acc, builder.bitcast(ptr, _V16F32.as_pointer()), mask)

        _emit_tile(builder, heads, vectors, count, operand, vector_ptr,
                   lambda v: _lanes_below(builder, builder.add(dd0, ir.Constant(_I64, 16 * v)), D), store, half)
        return context.get_dummy_value()

    @intrinsic
    def pv(typingctx, p, values, kvh, lo, count, g0, dd0, out):
        return types.none(p, values, kvh, lo, count, g0, dd0, out), codegen

    pv._set_uuid(f"fak.attention.pv:{heads}x{vectors}{'h' if half else ''}")
    return pv


# (query heads, 16-float vectors) per tile, by how many heads are left: about 8 accumulators for the
# scores (16 registers with AVX2), up to 16 for the outputs on AVX-512.
QK_VECTORS = {1: 8, 2: 4, 3: 2, 4: 2} if _WIDE else {1: 4, 2: 2, 3: 1, 4: 1}
PV_VECTORS = {1: 4, 2: 4, 3: 4, 4: 4} if _WIDE else {1: 2, 2: 2, 3: 1, 4: 1}
QK_STEP = tuple(16 * QK_VECTORS[h] for h in (1, 2, 3, 4))
PV_STEP = tuple(16 * PV_VECTORS[h] for h in (1, 2, 3, 4))


def _tiled(tiles: tuple, steps: tuple, name: str):
    """run(x, cache, kvh, lo, count, G, extent, out): one pass of a query over a key/value head's cache, its
    G query heads taken 4, 3, 2 or 1 at a time (tiles[heads - 1]) and `extent` (the keys for the scores, the
    features for the weighted values) a tile's steps[heads - 1] at a time."""
    t1, t2, t3, t4 = tiles

    def run(x, cache, kvh, lo, count, G, extent, out):
        g0 = 0
        while g0 < G:
            heads = min(4, G - g0)
            step = steps[heads - 1]
            for s0 in range(0, extent, step):
                if heads == 4:
                    t4(x, cache, kvh, lo, count, g0, s0, out)
                elif heads == 3:
                    t3(x, cache, kvh, lo, count, g0, s0, out)
                elif heads == 2:
                    t2(x, cache, kvh, lo, count, g0, s0, out)
                else:
                    t1(x, cache, kvh, lo, count, g0, s0, out)
            g0 += heads

    run.__name__ = run.__qualname__ = name  # numba's on-disk cache: a name of its own each
    return njit(inline="always", cache=True)(run)


def _make_passes(half: bool):
    """The scores and the weighted values of one query over a key/value head's cache (the tiles' docstrings),
    for float32 caches or (half) their half-float copies."""
    suffix = "_half" if half else ""
    return (_tiled(tuple(_make_qk(h, QK_VECTORS[h], half) for h in (1, 2, 3, 4)), QK_STEP, f"_scores{suffix}"),
            _tiled(tuple(_make_pv(h, PV_VECTORS[h], half) for h in (1, 2, 3, 4)), PV_STEP, f"_weighted_values{suffix}"))


_scores, _weighted_values = _make_passes(False)
_scores_half, _weighted_values_half = _make_passes(True)


# ---------------------------------------------------------------------------------------------------------
# attention: every row of the batch against its own sequence's cache, in one call
# ---------------------------------------------------------------------------------------------------------

# A batch's rows belong to several caches, each its own numpy arrays (of its own capacity), which a numba
# kernel cannot take as a list without building a typed list per call. So the backend hands the kernel a
# table of addresses (CACHE_FIELDS per segment) and the kernel views each cache's memory with numba.carray.
# The caller keeps the caches alive and large enough (reserved) for the call.
CACHE_FIELDS = 9  # k, v, k_pre (0: none), kt addresses; capacity; cache length; the segment's first, last+1 row;
# the half-float values' address, 0 for a float32 cache (then kt is float32; else kt and the values the kernel
# reads are half floats: see engine-cpu's NumbaKVCache)


@njit(inline="always", cache=True)
def key_blocks(capacity: int) -> int:
    """Blocks of KEY_BLOCK positions a half cache's keys take per head."""
    return (capacity + KEY_BLOCK - 1) // KEY_BLOCK


@njit(inline="always", cache=True)
def value_rows(capacity: int, D: int) -> int:
    """Rows (positions) of a half cache's values per head: the capacity, then enough for a 16-lane load that
    starts within the last row to stay inside (one row from 16 features up)."""
    return capacity + max(1, (15 + D - 1) // D)


@njit(inline="always", cache=True)
def _layer_of_half(address: int, layer: int, a: int, b: int, c: int) -> np.ndarray:
    """Layer `layer` (a, b, c) of a uint16 (L, a, b, c) array at `address`."""
    return carray(_uint16_ptr(address + 2 * layer * a * b * c), (a, b, c))


@njit(inline="always", cache=True)
def _key_blocks_of(address: int, layer: int, Hkv: int, capacity: int, D: int) -> np.ndarray:
    """Layer `layer` (Hkv, blocks, D, KEY_BLOCK) of a half cache's keys (uint16, (L, Hkv, blocks, D, KEY_BLOCK)) at
    `address`."""
    blocks = key_blocks(capacity)
    return carray(_uint16_ptr(address + 2 * layer * Hkv * blocks * D * KEY_BLOCK), (Hkv, blocks, D, KEY_BLOCK))


@njit(inline="always", cache=True)
def _layer_of(address: int, layer: int, a: int, b: int, c: int) -> np.ndarray:
    """Layer `layer` (a, b, c) of a float32 (L, a, b, c) array at `address`."""
    return carray(_float32_ptr(address + 4 * layer * a * b * c), (a, b, c))


@njit(fastmath=FAST, inline="always", cache=True)
def _attend(q: np.ndarray, keys_t: np.ndarray, values: np.ndarray, keys_half: np.ndarray, values_half: np.ndarray,
            half: bool, pos: int, kvh: int, window: int, scale: np.float32, softcap: np.float32, slopes: np.ndarray,
            sinks: np.ndarray, out: np.ndarray) -> None:
    """One query (H, D) at position `pos`, key/value head kvh's whole query group, against keys_t (Hkv, D, S)
    (keys transposed: one row per feature) and values (Hkv, S, D) -> out (H, D) for that group's heads; with
    `half`, against keys_half (Hkv, blocks, D, KEY_BLOCK) and values_half instead, the same values as half floats
    (uint16 bits; the keys in blocks of positions, the values padded).

    Every key and value row is read once per tile of (up to 4) heads. Per query head: scores over its visible keys,
    accumulated feature by feature with each key in its own lane (no cross-key reduction), a max-subtracted
    softmax, then the weighted sum of value rows in position order. Nothing depends on the rest of the batch.
    slopes (H,): ALiBi, head h's scores + slopes[h] * (j - pos) after the scale; empty: none.
    sinks (H,): gpt-oss's attention sinks, head h's logit sinks[h] joins the max and the denominator (no value);
    empty: none."""
    H, D = q.shape
    G = H // (keys_half.shape[0] if half else keys_t.shape[0])
    lo = 0
    if window > 0 and pos - window + 1 > 0:
        lo = pos - window + 1
    count = pos + 1 - lo
    if half:  # the half keys' tiles start on a block: the scores of the keys before lo in its block are made
        # too (each its own chain, as any score) and left out of the view
        skip = lo % KEY_BLOCK
        scored = np.empty((G, skip + count), np.float32)
        _scores_half(q, keys_half, kvh, lo - skip, skip + count, G, skip + count, scored)
        scores = scored[:, skip:]
    else:
        scores = np.empty((G, count), np.float32)
        _scores(q, keys_t, kvh, lo, count, G, count, scores)
    for g in range(G):
        srow = scores[g]
        best = np.float32(-np.inf)
        if softcap > np.float32(0.0):
            for j in range(count):
                srow[j] = np.tanh(srow[j] * scale / softcap) * softcap
        else:
            for j in range(count):
                srow[j] = srow[j] * scale
        if slopes.shape[0] > 0:
            m = slopes[kvh * G + g]
            for j in range(count):
                srow[j] = srow[j] + m * np.float32(lo + j - pos)
        for j in range(count):
            best = max(best, srow[j])
        total = np.float32(0.0)
        if sinks.shape[0] > 0:
            sink = sinks[kvh * G + g]
            best = max(best, sink)
            total = _exp(sink - best)
        for j in range(count):  # _exp, not np.exp (a scalar libm call): this loop vectorizes
            e = _exp(srow[j] - best)
            srow[j] = e
            total += e
        inv = np.float32(1.0) / total
        for j in range(count):
            srow[j] = srow[j] * inv
    if half:
        _weighted_values_half(scores, values_half, kvh, lo, count, G, D, out)
    else:
        _weighted_values(scores, values, kvh, lo, count, G, D, out)


@njit(parallel=True, fastmath=FAST, cache=True)
def attention(q: np.ndarray, k_pre: np.ndarray, k: np.ndarray, v: np.ndarray, caches: np.ndarray, layer: int,
              window: int, scale: np.float32, softcap: np.float32, slopes: np.ndarray, sinks: np.ndarray,
              out: np.ndarray) -> None:
    """q (T, H, D) and the new k_pre, k, v (T, Hkv, D) of a batch; caches (C, CACHE_FIELDS), one line per
    segment: its cache's arrays k, v, k_pre (L, Hkv, S, D) and kt (L, Hkv, D, S) by address, S, the cache's
    length before this call and the segment's rows [first, stop), and its half values' address (CACHE_FIELDS;
    a half cache's kt is (L, Hkv, key_blocks(S), D, KEY_BLOCK) half floats and its values (L, Hkv, value_rows(S, D), D)). Row t of segment c is at position
    length + t - first. Stores the new rows in layer `layer` of their caches, then -> out (T, H, D).
    slopes: (H,) float32 ALiBi slopes, or empty for none (_attend).

    One job per (row, key/value head); the rows of a prefill see the keys stored before them (window
    permitting), a decode row its whole cache."""
    T, H, D = q.shape
    Hkv = k.shape[1]
    C = caches.shape[0]
    row_cache = np.empty(T, np.int64)
    # the new rows first (a prefill's later queries read its earlier keys), a cache per job: the transposed
    # keys' stores touch a cache line per feature, ~200 lines a row that mostly miss, so split between threads
    for c in prange(C):
        cap, length, first = caches[c, 4], caches[c, 5], caches[c, 6]
        kc = _layer_of(caches[c, 0], layer, Hkv, cap, D)
        vc = _layer_of(caches[c, 1], layer, Hkv, cap, D)
        for t in range(first, caches[c, 7]):
            row_cache[t] = c
            p = length + t - first
            for h in range(Hkv):
                for d in range(D):
                    kc[h, p, d] = k[t, h, d]
                    vc[h, p, d] = v[t, h, d]
        if caches[c, 8] != 0:
            kth = _key_blocks_of(caches[c, 3], layer, Hkv, cap, D)
            vh = _layer_of_half(caches[c, 8], layer, Hkv, value_rows(cap, D), D)
            for t in range(first, caches[c, 7]):
                p = length + t - first
                for h in range(Hkv):
                    for d in range(D):
                        kth[h, p // KEY_BLOCK, d, p % KEY_BLOCK] = _half_bits(k[t, h, d])
                        vh[h, p, d] = _half_bits(v[t, h, d])
        else:
            ktc = _layer_of(caches[c, 3], layer, Hkv, D, cap)
            for t in range(first, caches[c, 7]):
                p = length + t - first
                for h in range(Hkv):
                    for d in range(D):
                        ktc[h, d, p] = k[t, h, d]
        if caches[c, 2] != 0:
            kpc = _layer_of(caches[c, 2], layer, Hkv, cap, D)
            for t in range(first, caches[c, 7]):
                for h in range(Hkv):
                    for d in range(D):
                        kpc[h, length + t - first, d] = k_pre[t, h, d]
    no_f32 = np.empty((1, 1, 1), np.float32)  # the other kind's arrays, unread
    no_half = np.empty((1, 1, 1), np.uint16)
    no_blocks = np.empty((1, 1, 1, 1), np.uint16)
    for job in prange(T * Hkv):
        t = job // Hkv
        kvh = job - t * Hkv
        c = row_cache[t]
        cap = caches[c, 4]
        pos = caches[c, 5] + t - caches[c, 6]
        if caches[c, 8] != 0:
            _attend(q[t], no_f32, no_f32, _key_blocks_of(caches[c, 3], layer, Hkv, cap, D),
                    _layer_of_half(caches[c, 8], layer, Hkv, value_rows(cap, D), D), True, pos, kvh, window, scale, softcap,
                    slopes, sinks, out[t])
        else:
            _attend(q[t], _layer_of(caches[c, 3], layer, Hkv, D, cap), _layer_of(caches[c, 1], layer, Hkv, cap, D),
                    no_blocks, no_half, False, pos, kvh, window, scale, softcap, slopes, sinks, out[t])


