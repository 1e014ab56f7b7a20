"""The int8-activation path: quantized weights x int8 activations with integer dot products, as llama.cpp does.

Per token, activations are quantized per 32-element block (x ~ dx * xq, xq int8, dx = max|x| / 127). A
weight row is held as unsigned bytes u (0..255: 4-bit values as they are, int8 values + 128) with a scale d
and offset m per group of G = 32 or 16 elements (a sub-block), w = d * u + m. Then

    y = sum over groups g of  d_g * dx_g * (u_g . xq_g)  +  sum over groups g of  m_g * X_g

where u . xq is an exact integer dot product and X_g = dx * sum(xq) over the group's elements. The types
without offsets (Q8_0, Q5_0, Q6_K, Q3_K: w = d * q, q signed) keep q as signed bytes ("i8") and drop the
second sum: no offset bytes to read, no shift to undo. Signed rows whose values fit 5 or 6 bits (Q5_0 and
Q3_K: -16..15; Q6_K: -32..31) are stored the same way under the kinds "i5" and "i6": the AVX2 path sums
their products in 16 bits over several vectors (see _Avx2); the VNNI paths take them as "i8".

Layout: interleaved sets. The integer work is 512-bit `vpdpbusd`s, 16 lanes of 32 bits, each lane summing
four byte products. Were a vector's 64 bytes two consecutive blocks (8 lanes each), every block would need
its own convert, scale and FMA on its partial sums: as many float instructions as integer ones. Instead a
row's groups are taken as *sets* of 16 (then 8, 4, 2 for the rest; a vector holds at least 64 / G groups)
and stored so that lane L of every vector of a set belongs to group L mod n of the set:

    set of n groups, vector v, lane L, byte j  ->  group L mod n, element 4 * (v * 16 / n + L div n) + j

so the set's vectors accumulate in 32-bit integers (exact) and each lane ends holding one group's dot (a
16-set) or a part of one; then one convert, one multiply by (d x dx) and one FMA per set and (row, token)
pair, plus one FMA for the offsets: 11-12 instructions per 8 `vpdpbusd`s where the two-block layout spent
~32. The activations are interleaved the same way per call (`_prep_token`), with each set's lane tables
(dx per lane, X and the signed bytes' correction) built once per token and shared by every row. 4-bit
values pack two vectors of a set into one (low nibbles the first, high the second; a one-vector set's
64 values into 32 bytes). Everything after the integer lanes is the same IR (16 float lanes) for both
instruction sets, and a (row, token) pair's operations and their order depend neither on which other rows
and tokens share its tile nor on the batch: the kernels are batch-invariant, and both paths give the same
bits. (Rounding differs from the f32 path: activations are rounded to 8 bits.)

Three instruction sets compute the lanes (ISAS; the backend picks the best one the CPU has):
- "avx512-vnni": one 512-bit `vpdpbusd` per vector;
- "avx-vnni": two 256-bit `vpdpbusd`s (the VEX-encoded AVX-VNNI of CPUs with VNNI but no AVX-512: Alder Lake
  and later client cores, Zen 5 parts that fuse AVX-512 off, ...);
- "avx2": `vpmaddubsw` (pairs of unsigned x signed byte products -> 16 bits, saturating) then `vpmaddwd`
  by ones (pairs of those -> 32 bits), arranged so that nothing saturates (see _Avx2). It also serves
  AVX-512 CPUs without VNNI.
numba cannot spell these instructions, so the inner loop is LLVM IR emitted through `numba.extending.intrinsic`. (Both live in this one file on purpose: numba's on-disk cache revalidates a
kernel against the file that defines it, so the IR it inlines must not change in another file.)
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from fak_engine_cpu.kernels import FAST, target_features

# The int8 paths, best first, and the CPU features (LLVM's names) each needs.
ISAS = {"avx512-vnni": ("avx512vnni", "avx512vl"), "avx-vnni": ("avxvnni", "avx2", "fma", "f16c"), "avx2": ("avx2", "fma", "f16c")}
REQUIRED = ISAS["avx512-vnni"]
# The signed kinds, narrowest first, and the values each holds (stored alike, as signed bytes; the AVX2 kernels
# sum the narrow ones' products in 16 bits over several vectors: _Avx2)
SIGNED = {"i5": (-16, 15), "i6": (-32, 31), "i8": (-128, 127)}


def signed_kind(q: np.ndarray) -> str:
    """The narrowest signed kind holding every value of q (int8)."""
    lo, hi = int(q.min()), int(q.max())
    return next(kind for kind, (least, most) in SIGNED.items() if least <= lo and hi <= most)


def missing_features(isa: str = "avx512-vnni") -> list[str]:
    """CPU features the `isa` int8 path needs that this process's code may not use (LLVM's names): ones the
    machine lacks, or that numba is told not to compile for (kernels.target_features)."""
    have = target_features()
    return [f for f in ISAS[isa] if f not in have]


def best_isa() -> str | None:
    """The fastest int8 path this CPU can run, None when it runs none."""
    return next((isa for isa in ISAS if not missing_features(isa)), None)


# ---------------------------------------------------------------------------------------------------------
# the integer dot products (LLVM IR), one emitter per instruction set
# ---------------------------------------------------------------------------------------------------------

_I1, _I8, _I16, _I32, _I64, _F32 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.FloatType()
_V32I8, _V16I16, _V8I32 = ir.VectorType(_I8, 32), ir.VectorType(_I16, 16), ir.VectorType(_I32, 8)
_V64I8, _V16I32, _V16F32 = ir.VectorType(_I8, 64), ir.VectorType(_I32, 16), ir.VectorType(_F32, 16)


class _Vnni:
    """A vector's u . x in one 512-bit `vpdpbusd` (unsigned bytes u x signed bytes x, four products summed
    per 32-bit lane), added into the lane's running sum.
    Signed weights w ("i8"): u = w xor 0x80 = w + 128 is unsigned, and u . x = w . x + 128 * sum(x); the
    running sum starts at -128 * S (S: the lane's sum of x over the set, a token's own lanes, built once per
    token and shared by every row: START), so the lanes come out as exactly w . x with one instruction per
    row and token and one `vpxor` per row."""

    START = {"i8": -128, "i6": -128, "i5": -128, "u8": 0, "nib": 0}  # the running sums start at START * S

    def __init__(self, builder: ir.IRBuilder, kind: str):
        self.builder, self.kind = builder, kind
        self.vpdpbusd = builder.module.declare_intrinsic("llvm.x86.avx512.vpdpbusd.512",
                                                         fnty=ir.FunctionType(_V16I32, [_V16I32, _V16I32, _V16I32]))

    def token(self, x: ir.Value):  # x: one token's 64 int8 activations (v64i8)
        return self.builder.bitcast(x, _V16I32)

    def row(self, u: ir.Value):  # u: one row's 64 weight bytes (v64i8; unsigned, or signed for the SIGNED kinds)
        if self.kind in SIGNED:
            u = self.builder.xor(u, ir.Constant(_V64I8, [-128] * 64))
        return self.builder.bitcast(u, _V16I32)

    def open(self, start: ir.Value):  # a set's running sums (v16i32 lanes) from their start
        return start

    def dot(self, acc: ir.Value, row, token) -> ir.Value:  # acc (v16i32) + lane i's sum of products of bytes 4i..4i+3
        return self.builder.call(self.vpdpbusd, [acc, row, token])

    def close(self, acc) -> ir.Value:  # the set's v16i32 lanes
        return acc


class _Avx2:
    """u . x with AVX2, 32 bytes at a time, in two steps that land on the lanes of `vpdpbusd`:

        32 bytes u, x  --vpmaddubsw-->  16 x s16, lane j = u[2j] x[2j] + u[2j+1] x[2j+1]   (saturating)
                       --vpmaddwd by ones-->  8 x s32, lane i = s16 lanes 2i + 2i+1 = bytes 4i..4i+3

    Both work lane by lane (no crossing between 128-bit halves), so lane i is vpdpbusd's lane i. With
    activations in -127..127 (never -128: the activations round to +-127):

    "nib" (u in 0..15): a pair sums to at most 2 * 15 * 127 = 3810, so u . x goes in directly.
    "i8" (signed w in -128..127), as llama.cpp does: multiply |w| (0..128, unsigned: |-128| is the byte
        0x80, which reads as 128) by x carrying w's sign (`vpsignb`, in -127..127): pairs stay within
        2 * 128 * 127 = 32512, and the lanes are w . x.
    "u8" (u in 0..255): u * x pairs can reach 2 * 255 * 127 = 64770 and would saturate. So take w = u - 128
        (u xor 0x80) through the "i8" steps, then u . x = w . x + 128 * sum(x): the running sum starts at
        +128 * S (START).
    Every step is exact, so the lanes equal vpdpbusd's bit for bit.

    Small values sum their 16-bit pairs over a run of vectors before widening them (one `vpmaddwd` a
    32-byte half a run instead of one a vector):
    "nib" (0..15): 2 x 15 x 127 = 3810 a pair, so a run of 8 vectors (a whole set of 32-element groups:
        set_sizes) stays within 30480 < 32767, exact;
    "i5" (signed -16..15: Q5_0, Q3_K): u = w + 16 (0..31, one `vpaddb` a row vector, shared by the tokens)
        goes in as unsigned, 7874 a pair, runs of 4; the running sum starts at -16 * S, so the lanes are
        w . x (no `vpsignb` a token, as "i8" needs);
    "i6" (signed -32..31: Q6_K): u = w + 32 (0..63), 16002 a pair, runs of 2, from -32 * S.
    Full-range bytes ("i8", "u8") have no such room: one pair reaches 32512. (Taking |w| with x's sign
    flipped as "i8" does would allow runs of 8 and 4 but costs a `vpsignb` per token and vector: 1.0-1.2x
    "i8" where the shift gives 1.2-3x, kernels alone, Intel Xeon with AVX2 code.)"""

    START = {"i8": 0, "u8": 128, "nib": 0, "i5": -16, "i6": -32}
    SHIFT = {"i5": 16, "i6": 32}  # added to the narrow signed kinds' values to make them unsigned
    RUN = {"nib": 8, "i5": 4, "i6": 2}  # vectors whose 16-bit pair sums add up exactly (see above)

    def __init__(self, builder: ir.IRBuilder, kind: str):
        self.builder, self.kind = builder, kind
        module = builder.module
        self.maddubs = module.declare_intrinsic("llvm.x86.avx2.pmadd.ub.sw", fnty=ir.FunctionType(_V16I16, [_V32I8, _V32I8]))
        self.maddwd = module.declare_intrinsic("llvm.x86.avx2.pmadd.wd", fnty=ir.FunctionType(_V8I32, [_V16I16, _V16I16]))
        self.sign = module.declare_intrinsic("llvm.x86.avx2.psign.b", fnty=ir.FunctionType(_V32I8, [_V32I8, _V32I8]))
        self.abs = module.declare_intrinsic("llvm.abs.v32i8", fnty=ir.FunctionType(_V32I8, [_V32I8, _I1]))

    def _halves(self, v: ir.Value) -> list:
        return [self.builder.shuffle_vector(v, v, _indices(range(h * 32, h * 32 + 32))) for h in range(2)]

    def token(self, x: ir.Value):
        return self._halves(x)

    def row(self, u: ir.Value):
        out = []
        for half in self._halves(u):
            if self.kind == "nib":
                out.append((half, None))
                continue
            if self.kind in self.SHIFT:
                out.append((self.builder.add(half, ir.Constant(_V32I8, [self.SHIFT[self.kind]] * 32)), None))
                continue
            w = self.builder.xor(half, ir.Constant(_V32I8, [-128] * 32)) if self.kind == "u8" else half
            out.append((self.builder.call(self.abs, [w, ir.Constant(_I1, 0)]), w))
        return out

    def open(self, start: ir.Value):
        """The running sums: (v16i32 lanes, the 16-bit pair sums of a run not yet widened (per half) or None,
        vectors in them)."""
        return start, None, 0

    def dot(self, acc, row, token):
        lanes, pairs, count = acc
        products = []
        for (u, w), x in zip(row, token, strict=True):
            x = x if w is None else self.builder.call(self.sign, [x, w])
            products.append(self.builder.call(self.maddubs, [u, x]))
        if self.kind not in self.RUN:
            return self.builder.add(lanes, self._widen(products)), None, 0
        if count == self.RUN[self.kind]:  # the run is full: widen it, start the next
            lanes, pairs, count = self.close(acc), None, 0
        pairs = products if pairs is None else [self.builder.add(a, b) for a, b in zip(pairs, products, strict=True)]
        return lanes, pairs, count + 1

    def close(self, acc) -> ir.Value:
        lanes, pairs, _ = acc
        return lanes if pairs is None else self.builder.add(lanes, self._widen(pairs))

    def _widen(self, pairs: list) -> ir.Value:
        """Two halves' 16-bit pair sums -> v16i32 lanes (adjacent pairs summed: bytes 4i..4i+3 in lane i)."""
        ones = ir.Constant(_V16I16, [1] * 16)
        halves = [self.builder.call(self.maddwd, [p, ones]) for p in pairs]
        return self.builder.shuffle_vector(halves[0], halves[1], _indices(range(16)))


class _AvxVnni(_Avx2):
    """vpdpbusd's lanes with 256-bit `vpdpbusd`s, one per 32-byte half (AVX-VNNI: the same instruction as
    _Vnni's at half the width, VEX-encoded where the CPU has no AVX-512). Signed weights as _Vnni takes
    them: w xor 0x80, the running sum started at -128 * S."""

    START = _Vnni.START

    def __init__(self, builder: ir.IRBuilder, kind: str):
        super().__init__(builder, kind)
        self.vpdpbusd = builder.module.declare_intrinsic("llvm.x86.avx512.vpdpbusd.256",
                                                         fnty=ir.FunctionType(_V8I32, [_V8I32, _V8I32, _V8I32]))

    def token(self, x: ir.Value):
        return [self.builder.bitcast(half, _V8I32) for half in self._halves(x)]

    def row(self, u: ir.Value):
        if self.kind in SIGNED:
            u = self.builder.xor(u, ir.Constant(_V64I8, [-128] * 64))
        return [self.builder.bitcast(half, _V8I32) for half in self._halves(u)]

    def open(self, start: ir.Value):
        return start

    def close(self, acc) -> ir.Value:
        return acc

    def dot(self, acc: ir.Value, row, token) -> ir.Value:
        accs = [self.builder.shuffle_vector(acc, acc, _indices(range(h * 8, h * 8 + 8))) for h in range(2)]
        lanes = [self.builder.call(self.vpdpbusd, [a, u, x]) for a, u, x in zip(accs, row, token, strict=True)]
        return self.builder.shuffle_vector(lanes[0], lanes[1], _indices(range(16)))


EMITTERS = {"avx512-vnni": _Vnni, "avx-vnni": _AvxVnni, "avx2": _Avx2}


def _indices(values) -> ir.Constant:
    values = list(values)
    return ir.Constant(ir.VectorType(_I32, len(values)), values)


def lane_kernel(isa: str, kind: str, vectors: int = 1):
    """A jitted lanes(u (N, vectors * 64) weight bytes, x (N, vectors * 64) int8, out (N, 16) int32): each
    item's integer lanes over its `vectors` 64-byte vectors (one set's run) as `isa` computes them inside the
    matmul kernels for weights of `kind` ("nib": values 0..15, "u8": unsigned bytes, "i8": signed bytes, "i6"
    and "i5": signed values within -32..31 and -16..15;
    unpacked), the running sum started as there, so tests can hold them to their definition (lane i = the
    sum over the vectors of the products of bytes 4i..4i+3)."""
    start = EMITTERS[isa].START[kind]

    def codegen(context, builder, signature, args):
        u, x, s, out = (context.make_array(t)(context, builder, a) for t, a in zip(signature.args, args, strict=True))
        emit = EMITTERS[isa](builder, kind)

        def load(arr, ty, v=0):
            return builder.load(builder.bitcast(builder.gep(builder.bitcast(arr.data, _I8.as_pointer()), [ir.Constant(_I64, 64 * v)]),
                                                ty.as_pointer()), align=1)

        acc = emit.open(builder.mul(load(s, _V16I32), ir.Constant(_V16I32, [start] * 16)))
        for v in range(vectors):
            acc = emit.dot(acc, emit.row(load(u, _V64I8, v)), emit.token(load(x, _V64I8, v)))
        builder.store(emit.close(acc), builder.bitcast(out.data, _V16I32.as_pointer()), align=1)
        return context.get_dummy_value()

    @intrinsic
    def vector(typingctx, u, x, s, out):
        return types.none(u, x, s, out), codegen

    @njit
    def lanes(u, x, out):
        s = np.zeros(16, np.int32)
        for i in range(u.shape[0]):
            for lane in range(16):
                total = 0
                for v in range(vectors):
                    for j in range(4):
                        total += np.int32(x[i, 64 * v + 4 * lane + j])
                s[lane] = total
            vector(u[i], x[i], s, out[i])

    return lanes


# ---------------------------------------------------------------------------------------------------------
# the interleaved layout (numpy, at load; the activations' side per call is _prep_token)
# ---------------------------------------------------------------------------------------------------------

def set_sizes(groups: int, G: int) -> list[int]:
    """A row's `groups` groups of G elements as sets: 16s, then one each of 8, 4, 2 as the rest needs (a
    vector is 64 bytes: a set has at least 64 / G groups; the rest is padded up to that with zero groups)."""
    least = 64 // G
    padded = -(-groups // least) * least
    sizes = [16] * (padded // 16)
    rest = padded % 16
    for n in (8, 4, 2):
        if rest >= n >= least:
            sizes.append(n)
            rest -= n
    return sizes


def _lane_map(n: int, G: int) -> tuple[np.ndarray, np.ndarray]:
    """(vectors, 16, 4) -> the group within the set and the element within the group of each byte."""
    v, lane, j = np.meshgrid(np.arange(n * G // 64), np.arange(16), np.arange(4), indexing="ij")
    return lane % n, 4 * (v * (16 // n) + lane // n) + j


def interleave(q: np.ndarray, nibbles: bool) -> np.ndarray:
    """(R, groups, G) values (0..15 with `nibbles`, else bytes of any 8-bit dtype) -> (R, bytes) in set
    order, same dtype (4-bit values packed: uint8). Compiled (rows split between threads): a model's
    embedding table passes through here at load."""
    R, groups, G = q.shape
    sets = Sets.of(groups * G, G)
    src, (_, base, vectors) = sets.src, sets.tables[:3]
    values = np.empty((R, src.shape[0]), np.uint8 if nibbles else q.dtype)
    _gather_rows(np.ascontiguousarray(q.reshape(R, groups * G)), src, values)
    if not nibbles:
        return values
    packed = np.empty((R, src.shape[0] // 2), np.uint8)
    _pack_sets(values, base, vectors, packed)
    return packed


@njit(parallel=True, cache=True)
def _gather_rows(q: np.ndarray, src: np.ndarray, out: np.ndarray) -> None:
    """out[r, p] = q[r, src[p]] (0 where src is -1, padding)."""
    for r in prange(q.shape[0]):
        for p in range(src.shape[0]):
            e = src[p]
            out[r, p] = q[r, e] if e >= 0 else 0


@njit(parallel=True, cache=True)
def _pack_sets(values: np.ndarray, base: np.ndarray, vectors: np.ndarray, out: np.ndarray) -> None:
    """4-bit values in set order -> two vectors a 64-byte stretch (low nibbles the first, high the second);
    a one-vector set's 64 values into 32 bytes (low the first 32, high the rest)."""
    for r in prange(values.shape[0]):
        for s in range(base.shape[0]):
            b = base[s]
            if vectors[s] == 1:
                for i in range(32):
                    out[r, b // 2 + i] = values[r, b + i] | (values[r, b + 32 + i] << 4)
            else:
                for p in range(vectors[s] // 2):
                    for i in range(64):
                        out[r, b // 2 + 64 * p + i] = values[r, b + 128 * p + i] | (values[r, b + 128 * p + 64 + i] << 4)


def deinterleave(b: np.ndarray, groups: int, G: int, nibbles: bool) -> np.ndarray:
    """interleave's inverse: (R, bytes) -> (R, groups, G)."""
    R = b.shape[0]
    sizes = set_sizes(groups, G)
    out = np.zeros((R, sum(sizes), G), np.uint8 if nibbles else b.dtype)
    pos, g0 = 0, 0
    for n in sizes:
        size = n * G // 2 if nibbles else n * G
        chunk = b[:, pos:pos + size]
        if nibbles:
            lo, hi = chunk & 15, chunk >> 4
            nv = n * G // 64
            if nv == 1:
                chunk = np.concatenate([lo, hi], axis=1)
            else:
                chunk = np.stack([lo.reshape(R, nv // 2, 64), hi.reshape(R, nv // 2, 64)], axis=2).reshape(R, -1)
        group, element = _lane_map(n, G)
        out[:, g0 + group.reshape(-1), element.reshape(-1)] = chunk
        pos += size
        g0 += n
    return out[:, :groups]


def padded_groups(values: np.ndarray, G: int) -> np.ndarray:
    """Per-group scales or offsets (R, groups) -> (R, groups of the sets), zeros for the padding groups: the
    kernels load a set's n values together and shuffle them into its lanes."""
    R, groups = values.shape
    extra = sum(set_sizes(groups, G)) - groups
    return np.ascontiguousarray(np.concatenate([values, np.zeros((R, extra), values.dtype)], axis=1) if extra else values)


class Sets:
    """What the kernels need to know of a row length K in groups of G: the sets (`full` 16-sets, then
    `tails`, the sum of the smaller sets' sizes, each at most once), src (padded K,) the element each
    interleaved byte takes (-1: padding), and the activations' tables: src4 (padded K / 4,) the same by
    4-byte words (a lane's four bytes are four consecutive elements), base and vectors (sets,) each
    set's first byte and vector count, block (sets, 16) the 32-block each lane's group is in (-1: padding),
    group (sets, 16) the group whose offset share a lane carries (-1: none)."""

    _known: dict[tuple[int, int], Sets] = {}

    def __init__(self, K: int, G: int):
        sizes = set_sizes(K // G, G)
        self.full = sum(n == 16 for n in sizes)
        self.tails = sum(n for n in sizes if n != 16)
        src, base, vectors = [], [], []
        block, group = np.full((len(sizes), 16), -1, np.int32), np.full((len(sizes), 16), -1, np.int32)
        g0 = pos = 0
        lane = np.arange(16)
        for s, n in enumerate(sizes):
            gi, ei = _lane_map(n, G)
            src.append(np.where((g0 + gi) * G < K, (g0 + gi) * G + ei, -1).reshape(-1))
            base.append(pos)
            vectors.append(n * G // 64)
            pos += n * G
            g = g0 + lane % n
            block[s] = np.where(g * G < K, g * G // 32, -1)
            group[s, :n] = np.where((g0 + lane[:n]) * G < K, g0 + lane[:n], -1)
            g0 += n
        self.src = np.concatenate(src).astype(np.int32)
        words = self.src[0::4]
        self.tables = (np.where(words >= 0, words // 4, -1).astype(np.int32), np.array(base, np.int64), np.array(vectors, np.int64), block, group)
        # for reading rows back (embed_rows): where each interleaved value's 4 bits sit when packed (byte, shift)
        nibble_byte, nibble_shift = [], []
        for b0, nv in zip(base, vectors, strict=True):
            p = np.arange(nv * 64)
            v, within = p // 64, p % 64
            if nv == 1:
                nibble_byte.append(b0 // 2 + within % 32)
                nibble_shift.append(4 * (within >= 32))
            else:
                nibble_byte.append(b0 // 2 + 64 * (v // 2) + within)
                nibble_shift.append(4 * (v % 2))
        self.nibble_byte = np.concatenate(nibble_byte).astype(np.int64)
        self.nibble_shift = np.concatenate(nibble_shift).astype(np.int64)

    @classmethod
    def of(cls, K: int, G: int) -> Sets:
        key = (K, G)
        if key not in cls._known:
            cls._known[key] = cls(K, G)
        return cls._known[key]


@njit(fastmath=FAST, cache=True)
def _embed_rows(q: np.ndarray, d: np.ndarray, m: np.ndarray, src: np.ndarray, byte: np.ndarray, shift: np.ndarray,
                nibbles: bool, G: int, mult: np.float32, out: np.ndarray) -> None:
    """Interleaved rows q (n, bytes) with their scales and offsets d, m (n, groups) float32 -> out (n, K)
    dequantized in natural order (value * d + m, times mult), as kernels.embed_q computes a natural row."""
    for t in range(q.shape[0]):
        for p in range(src.shape[0]):
            e = src[p]
            if e < 0:
                continue
            v = np.float32((q[t, byte[p]] >> shift[p]) & 15) if nibbles else np.float32(q[t, p])
            g = e // G
            out[t, e] = v * d[t, g] + m[t, g]
        if mult != np.float32(1.0):
            for k in range(out.shape[1]):
                out[t, k] *= mult


def embed_rows(q: np.ndarray, d: np.ndarray, m: np.ndarray, K: int, G: int, nibbles: bool, mult: float, out: np.ndarray) -> None:
    """Rows of an interleaved matrix (already gathered: q (n, bytes), d and m (n, groups) float32) back to
    their values: the embedding lookup on the int8 path, one decode step's single row in a few µs."""
    sets = Sets.of(K, G)
    _embed_rows(q, d, m, sets.src, sets.nibble_byte, sets.nibble_shift, nibbles, G, np.float32(mult), out)


# ---------------------------------------------------------------------------------------------------------
# one tile of rows x tokens (LLVM IR)
# ---------------------------------------------------------------------------------------------------------

def _hsums(builder: ir.IRBuilder, vs: list) -> list:
    """Each of the 16-lane vectors `vs` summed in one fixed order (lane i + lane i + 8, then (0+4, 1+5, 2+6,
    3+7), then pairs, then the last two), the sums of up to 16 vectors returned as the lanes of one vector
    each (vector j's sum in lane j mod 16 of result j div 16).

    The vectors are reduced together, a transpose at a time: each level adds two shuffles of a pair of
    vectors (one gathering the lower halves of each one's partial sums, the other the upper halves), so a
    level halves both the lanes each vector's partial sums take and the number of vectors. 16 vectors take
    45 instructions where summing each on its own took ~120 (a 4 x 4 tile spent about a quarter of its
    instructions there). Each sum's additions and their order are those of summing its vector alone."""
    out = []
    for first in range(0, len(vs), 16):
        level, width = list(vs[first:first + 16]), 16  # width: lanes each vector's partial sums take
        while width > 1:
            half = width // 2
            lo = [b + i for b in range(0, 16, width) for i in range(half)]  # each partial sum's lower half
            hi = [b + half + i for b in range(0, 16, width) for i in range(half)]
            if len(level) % 2:
                level.append(ir.Constant(_V16F32, None))
            level = [builder.fadd(builder.shuffle_vector(a, b, _indices(lo + [16 + i for i in lo])),
                                  builder.shuffle_vector(a, b, _indices(hi + [16 + i for i in hi])))
                     for a, b in zip(level[0::2], level[1::2], strict=True)]
            width = half
        out.append(level[0])
    return out


def _tile_codegen(isa: str, kind: str, G: int, group: int, tokens: int, half: bool):
    """IR writing out[t0 + k, r0 + g] (g < group, k < tokens) for consecutive weight rows and tokens:

        out[t, r] = sum over sets s of  hsum16( float(i_rts) * (dl_rs * dxl_ts) + ml_rs * Xl_ts )

    with i_rts the set's integer lanes (START * S_ts, then one dot per vector). Arguments: w (R, bytes) the
    interleaved rows, r0, xi (T, padded K) int8 interleaved activations, t0, dl / ml (R, padded groups) the
    rows' scales / offsets (half bits with `half`; ml unread for the signed kinds; a set's n values are loaded together
    and shuffled into its 16 lanes: dl_rs, ml_rs below), dxl / Xl (T, sets, 16) float32
    and S (T, sets, 16) int32 the tokens' lanes, full and tails (Sets), out (T, R). Each (row, token) pair
    is its own chain of operations in a fixed order; chains are interleaved only to share loads (a row's
    bytes serve every token, a token's every row) and to hide latency, so any grouping gives the same bits.

    kind: "nib" (4-bit values, two vectors a 64-byte load), "u8" (unsigned bytes), "i8", "i6", "i5" (signed
    bytes; no offsets). isa: which instructions compute the integer lanes (EMITTERS); the float work is the
    same."""

    nibbles, offsets = kind == "nib", kind not in SIGNED
    row_bytes = (lambda n: n * G // 2) if nibbles else (lambda n: n * G)

    def codegen(context, builder, signature, args):
        arrays = [context.make_array(t)(context, builder, a) if isinstance(t, types.Array) else a
                  for t, a in zip(signature.args, args, strict=True)]
        w, r0, xi, t0, dl, dxl, ml, Xl, S, full, tails, out = arrays
        emit = EMITTERS[isa](builder, kind)
        start = emit.START[kind]
        i8p = _I8.as_pointer()
        const = lambda v: ir.Constant(_I64, v)  # noqa: E731
        fma = builder.module.declare_intrinsic("llvm.fma.v16f32", fnty=ir.FunctionType(_V16F32, [_V16F32, _V16F32, _V16F32]))
        prefetch = builder.module.declare_intrinsic("llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [i8p, _I32, _I32, _I32]))
        scale_ty = ir.IntType(16) if half else _F32

        def rows_of(arr, first, count):
            stride = builder.extract_value(arr.strides, 0)
            base = builder.bitcast(arr.data, i8p)
            return [builder.gep(base, [builder.mul(builder.add(first, const(i)), stride)]) for i in range(count)], stride

        (wr, w_stride), (dr, _), (xr, _), (dxr, _), (orows, _) = (rows_of(a, f, c) for a, f, c in (
            (w, r0, group), (dl, r0, group), (xi, t0, tokens), (dxl, t0, tokens), (out, t0, tokens)))
        mr = rows_of(ml, r0, group)[0] if offsets else None
        Xr = rows_of(Xl, t0, tokens)[0] if offsets else None
        Sr = rows_of(S, t0, tokens)[0] if start else None

        def vload(ptr, offset, ty, n):  # n values of ty from byte `offset`
            return builder.load(builder.bitcast(builder.gep(ptr, [offset]), ir.VectorType(ty, n).as_pointer()), align=1)

        def row_lanes(ptr, g0, n, spread):
            """A row's scales (spread: lane L gets group g0 + L mod n's) or offsets (lanes < n get groups g0..,
            the rest zeros) for the set of n groups from g0: n values loaded, then shuffled into 16 lanes."""
            v = vload(ptr, builder.mul(g0, const(2 if half else 4)), scale_ty, n)
            if half:
                v = builder.fpext(builder.bitcast(v, ir.VectorType(ir.HalfType(), n)), ir.VectorType(_F32, n))
            if n == 16:
                return v
            picks = [lane % n for lane in range(16)] if spread else [lane if lane < n else n for lane in range(16)]
            return builder.shuffle_vector(v, ir.Constant(v.type, None), _indices(picks))

        def lanes(ptr, s, ty, f16=False):  # a set's 16 lanes of a lane table, as float32 (or int32) lanes
            v = vload(ptr, builder.mul(s, const(32 if f16 else 64)), ty, 16)
            return builder.fpext(builder.bitcast(v, ir.VectorType(ir.HalfType(), 16)), _V16F32) if f16 else v

        def one_set(n, s, g0, wpos, xpos, accs):
            """The set s of n groups from group g0 (row bytes from wpos, token bytes from xpos) into every chain's
            float lanes."""
            vectors = n * G // 64
            # prefetch the same stretch of the rows PREFETCH_GROUPS groups of rows further down into L2
            # (prefetcht1): a core has few L1 miss buffers, and filling them with prefetches held a one-token
            # matvec streaming from DRAM to ~8 GB/s a core (AMD EPYC Zen 4), against ~13 through L2
            ahead = builder.add(wpos, builder.mul(w_stride, const(PREFETCH_GROUPS * group)))
            for g in range(group):
                for line in range(0, row_bytes(n), 64):
                    builder.call(prefetch, [builder.gep(wr[g], [builder.add(ahead, const(line))]), ir.Constant(_I32, 0),
                                            ir.Constant(_I32, 2), ir.Constant(_I32, 1)])
            ints = {}
            for k in range(tokens):
                s0 = builder.mul(lanes(Sr[k], s, _I32), ir.Constant(_V16I32, [start] * 16)) if start else ir.Constant(_V16I32, None)
                for g in range(group):
                    ints[g, k] = emit.open(s0)
            if nibbles:  # (byte offset, bytes, vectors it holds)
                loads = [(0, 32, 1)] if vectors == 1 else [(64 * p, 64, 2) for p in range(vectors // 2)]
            else:
                loads = [(64 * v, 64, 1) for v in range(vectors)]
            v = 0
            for offset, size, held in loads:
                xs = [[emit.token(vload(xr[k], builder.add(xpos, const(64 * (v + h))), _I8, 64)) for k in range(tokens)]
                      for h in range(held)]
                for g in range(group):
                    raw = vload(wr[g], builder.add(wpos, const(offset)), _I8, size)
                    if nibbles:
                        vty = ir.VectorType(_I8, size)
                        lo = builder.and_(raw, ir.Constant(vty, [15] * size))
                        hi = builder.lshr(raw, ir.Constant(vty, [4] * size))
                        us = [builder.shuffle_vector(lo, hi, _indices(range(64)))] if size == 32 else [lo, hi]
                    else:
                        us = [raw]
                    for h, u in enumerate(us):
                        u = emit.row(u)
                        for k in range(tokens):
                            ints[g, k] = emit.dot(ints[g, k], u, xs[h][k])
                v += held
            ints = {c: emit.close(acc) for c, acc in ints.items()}
            dxs = [lanes(dxr[k], s, _F32) for k in range(tokens)]
            Xs = [lanes(Xr[k], s, _F32) for k in range(tokens)] if offsets else None
            new = {}
            for g in range(group):
                dg = row_lanes(dr[g], g0, n, True)
                mg = row_lanes(mr[g], g0, n, False) if offsets else None
                for k in range(tokens):
                    acc = builder.call(fma, [builder.sitofp(ints[g, k], _V16F32), builder.fmul(dg, dxs[k]), accs[g, k]])
                    new[g, k] = builder.call(fma, [mg, Xs[k], acc]) if offsets else acc
            return new

        chains = [(g, k) for k in range(tokens) for g in range(group)]  # a token's rows together: see the stores
        zero = const(0)
        entry = builder.block
        loop = builder.append_basic_block("sets.loop")
        after = builder.append_basic_block("sets.after")
        builder.cbranch(builder.icmp_signed(">", full, zero), loop, after)

        builder.position_at_end(loop)
        p = builder.phi(_I64)
        p.add_incoming(zero, entry)
        accs = {}
        for c in chains:
            accs[c] = builder.phi(_V16F32)
            accs[c].add_incoming(ir.Constant(_V16F32, None), entry)
        looped = one_set(16, p, builder.mul(p, const(16)), builder.mul(p, const(row_bytes(16))), builder.mul(p, const(16 * G)), accs)
        p2 = builder.add(p, const(1))
        p.add_incoming(p2, builder.block)
        for c in chains:
            accs[c].add_incoming(looped[c], builder.block)
        builder.cbranch(builder.icmp_signed("<", p2, full), loop, after)

        builder.position_at_end(after)
        current = {}
        for c in chains:  # every phi first: LLVM wants them at the top of the block
            current[c] = builder.phi(_V16F32)
            current[c].add_incoming(ir.Constant(_V16F32, None), entry)
            current[c].add_incoming(looped[c], loop)
        s, g0, wpos, xpos = full, builder.mul(full, const(16)), builder.mul(full, const(row_bytes(16))), builder.mul(full, const(16 * G))
        for n in (8, 4, 2):  # the smaller sets, each present or not
            if n * G < 64:
                continue
            present = builder.icmp_signed("!=", builder.and_(tails, const(n)), zero)
            before = builder.block
            body = builder.append_basic_block(f"sets.tail{n}")
            join = builder.append_basic_block(f"sets.join{n}")
            builder.cbranch(present, body, join)
            builder.position_at_end(body)
            got = one_set(n, s, g0, wpos, xpos, current)
            body_end = builder.block
            builder.branch(join)
            builder.position_at_end(join)
            merged = {}
            for c in chains:
                merged[c] = builder.phi(_V16F32)
                merged[c].add_incoming(current[c], before)
                merged[c].add_incoming(got[c], body_end)
            current = merged
            step = lambda value, by: builder.select(present, builder.add(value, const(by)), value)  # noqa: E731, B023
            s, g0, wpos, xpos = step(s, 1), step(g0, n), step(wpos, row_bytes(n)), step(xpos, n * G)
        sums = _hsums(builder, [current[c] for c in chains])
        for k in range(tokens):  # token k's rows are lanes k * group .. of the sums: one store of `group` floats
            first = k * group
            v = sums[first // 16]
            picks = [first % 16 + g for g in range(group)]
            value = (builder.extract_element(v, ir.Constant(_I32, picks[0])) if group == 1
                     else builder.shuffle_vector(v, v, _indices(picks)))
            ptr = builder.gep(builder.bitcast(orows[k], _F32.as_pointer()), [r0])
            builder.store(value, ptr if group == 1 else builder.bitcast(ptr, value.type.as_pointer()), align=4)
        return context.get_dummy_value()

    return codegen


def _make_tile(isa: str, kind: str, G: int, group: int, tokens: int, half: bool):
    @intrinsic
    def tile(typingctx, w, r0, xi, t0, dl, dxl, ml, Xl, S, full, tails, out):
        return types.none(w, r0, xi, t0, dl, dxl, ml, Xl, S, full, tails, out), _tile_codegen(isa, kind, G, group, tokens, half)

    # The linear kernels hold these in their closures, and numba's cache key hashes a closure's pickle,
    # which holds an intrinsic's uuid: a random one (numba's default) would miss the cache in every process.
    tile._set_uuid(f"fak.vnni.sets:{isa}:{kind}{G}{int(half)}:{group}x{tokens}")
    return tile


PREFETCH_GROUPS = 2  # software prefetch distance, in groups of rows
# (rows, tokens) per tile when there are several tokens: independent chains keep the pipelines busy, and a
# row's bytes serve every token. AVX2 has 16 vector registers, not 32. 16-element groups (4 vectors a set)
# ran fastest with more rows than tokens (Intel Xeon, 2 threads: 8 x 2 0.6x the time of 4 x 4 on a
# 640 x 2048 Q6_K-shaped matrix at 512 tokens).
TILES = {"avx512-vnni": {32: (4, 4), 16: (8, 2)}, "avx-vnni": {32: (2, 2), 16: (2, 2)}, "avx2": {32: (2, 2), 16: (2, 2)}}
# One kernel per (layout, scales stored as half); each has intrinsics for a full tile, rows x 1 token, 1 x 1.
KINDS = [(layout, half) for layout in ("nib", "u8_32", "u8_16", *(f"{k}_{G}" for k in SIGNED for G in (32, 16)))
         for half in (False, True)]


# ---------------------------------------------------------------------------------------------------------
# activations and the matmul kernels
# ---------------------------------------------------------------------------------------------------------


def _data(context, builder, ty, value, element) -> ir.Value:
    """An array argument's data pointer, as a pointer to `element`."""
    return builder.bitcast(context.make_array(ty)(context, builder, value).data, element.as_pointer())


def _splat(builder: ir.IRBuilder, value: ir.Value, n: int = 16) -> ir.Value:
    vty = ir.VectorType(value.type, n)
    return builder.shuffle_vector(builder.insert_element(ir.Constant(vty, None), value, ir.Constant(_I32, 0)),
                                  ir.Constant(vty, None), _indices([0] * n))


def _gather(builder: ir.IRBuilder, base: ir.Value, index: ir.Value, element) -> ir.Value:
    """16 `element`s (32-bit) base[index[i]], 0 where index[i] < 0 (a masked gather)."""
    vty, pty = ir.VectorType(element, 16), ir.VectorType(element.as_pointer(), 16)
    wide = ir.VectorType(_I64, 16)
    offsets = builder.mul(builder.sext(index, wide), ir.Constant(wide, [4] * 16))
    pointers = builder.inttoptr(builder.add(_splat(builder, builder.ptrtoint(base, _I64)), offsets), pty)
    mask = builder.icmp_signed(">=", index, ir.Constant(_V16I32, [0] * 16))
    name = f"llvm.masked.gather.v16{'f32' if element == _F32 else 'i32'}.v16p0"
    fn = builder.module.declare_intrinsic(name, fnty=ir.FunctionType(vty, [pty, _I32, mask.type, vty]))
    return builder.call(fn, [pointers, ir.Constant(_I32, 4), mask, ir.Constant(vty, [0.0 if element == _F32 else 0] * 16)])


def _contiguous(*arrays) -> bool:
    """The prep intrinsics read their arrays as flat memory: they type only for C-contiguous ones."""
    return all(isinstance(a, types.Array) and a.layout == "C" for a in arrays)


@intrinsic
def _quantize_block(typingctx, x, xq, xd, xs16, b):
    """Block b (32 values) of one token's x f32 -> xq int8, xd[b] = dx, xs16[2b], xs16[2b + 1] = dx * sum(xq)
    over each half: xq = round-half-to-even(x / dx), computed as x * (127 / max|x|), with dx = max|x| / 127
    (0 and 0 for an all-zero block). max|x| is taken on the bit patterns (|x|'s bits order as |x| does).
    Vector IR: numba's loops over 32-element blocks ran ~90 cycles a block."""

    def codegen(context, builder, signature, args):
        xp, qp, dp, sp = (_data(context, builder, t, a, e) for t, a, e in zip(signature.args[:4], args[:4], (_F32, _I8, _F32, _F32), strict=True))
        b = args[4]
        first = builder.mul(b, ir.Constant(_I64, 32))
        module = builder.module
        umax = module.declare_intrinsic("llvm.umax.v16i32", fnty=ir.FunctionType(_V16I32, [_V16I32, _V16I32]))
        top_of = module.declare_intrinsic("llvm.vector.reduce.umax.v16i32", fnty=ir.FunctionType(_I32, [_V16I32]))
        total_of = module.declare_intrinsic("llvm.vector.reduce.add.v16i32", fnty=ir.FunctionType(_I32, [_V16I32]))
        rint = module.declare_intrinsic("llvm.rint.v16f32", fnty=ir.FunctionType(_V16F32, [_V16F32]))
        halves = [builder.load(builder.bitcast(builder.gep(xp, [builder.add(first, ir.Constant(_I64, 16 * h))]), _V16F32.as_pointer()), align=4)
                  for h in range(2)]
        magnitudes = [builder.and_(builder.bitcast(v, _V16I32), ir.Constant(_V16I32, [0x7FFFFFFF] * 16)) for v in halves]
        amax = builder.bitcast(builder.call(top_of, [builder.call(umax, magnitudes)]), _F32)
        d = builder.fdiv(amax, ir.Constant(_F32, 127.0))
        inv = builder.select(builder.fcmp_ordered(">", amax, ir.Constant(_F32, 0.0)), builder.fdiv(ir.Constant(_F32, 127.0), amax),
                             ir.Constant(_F32, 0.0))
        builder.store(d, builder.gep(dp, [b]))
        for h, v in enumerate(halves):
            q = builder.fptosi(builder.call(rint, [builder.fmul(v, _splat(builder, inv))]), _V16I32)
            builder.store(builder.trunc(q, ir.VectorType(_I8, 16)),
                          builder.bitcast(builder.gep(qp, [builder.add(first, ir.Constant(_I64, 16 * h))]), ir.VectorType(_I8, 16).as_pointer()), align=1)
            total = builder.sitofp(builder.call(total_of, [q]), _F32)
            builder.store(builder.fmul(d, total), builder.gep(sp, [builder.add(builder.mul(b, ir.Constant(_I64, 2)), ir.Constant(_I64, h))]))
        return context.get_dummy_value()

    return (types.none(x, xq, xd, xs16, b), codegen) if _contiguous(x, xq, xd, xs16) else None


@intrinsic
def _interleave_vector(typingctx, xq, src4, xi, v):
    """Vector v (64 bytes, 16 lanes of 4) of a token's interleaved activations: lane i is the 4-byte word
    src4[16 v + i] of xq (0 where that is -1, padding), one masked gather."""

    def codegen(context, builder, signature, args):
        qp, ip, op = (_data(context, builder, t, a, e) for t, a, e in zip(signature.args[:3], args[:3], (_I32, _I32, _I32), strict=True))
        first = builder.mul(args[3], ir.Constant(_I64, 16))
        index = builder.load(builder.bitcast(builder.gep(ip, [first]), _V16I32.as_pointer()), align=4)
        builder.store(_gather(builder, qp, index, _I32), builder.bitcast(builder.gep(op, [first]), _V16I32.as_pointer()), align=4)
        return context.get_dummy_value()

    return (types.none(xq, src4, xi, v), codegen) if _contiguous(xq, src4, xi) else None


@intrinsic
def _set_lanes(typingctx, xd, xs16, block, group, pairs, dxl, Xl, s):
    """Set s's lane tables for one token: dxl[s] = xd[block[s]] (each lane's group's scale) and Xl[s] the
    offsets' share, dx * sum(xq) of group[s]'s elements (xs16[g] for 16-element groups; with pairs = 2,
    32-element ones: xs16[2g] + xs16[2g + 1]), 0 where the table says -1."""

    def codegen(context, builder, signature, args):
        array = lambda i, element: _data(context, builder, signature.args[i], args[i], element)  # noqa: E731
        dp, sp, bp, gp = array(0, _F32), array(1, _F32), array(2, _I32), array(3, _I32)
        op_d, op_x = array(5, _F32), array(6, _F32)
        pairs, s = args[4], args[7]
        first = builder.mul(s, ir.Constant(_I64, 16))
        row = lambda p: builder.bitcast(builder.gep(p, [first]), _V16I32.as_pointer())  # noqa: E731
        blocks, groups = builder.load(row(bp), align=4), builder.load(row(gp), align=4)
        builder.store(_gather(builder, dp, blocks, _F32), builder.bitcast(builder.gep(op_d, [first]), _V16F32.as_pointer()), align=4)
        two = builder.icmp_signed("==", pairs, ir.Constant(pairs.type, 2))
        valid = builder.icmp_signed(">=", groups, ir.Constant(_V16I32, [0] * 16))
        at = builder.select(valid, builder.mul(groups, _splat(builder, builder.trunc(pairs, _I32))), groups)
        one = _gather(builder, sp, at, _F32)
        other = _gather(builder, sp, builder.select(valid, builder.add(at, ir.Constant(_V16I32, [1] * 16)), groups), _F32)
        shares = builder.select(two, builder.fadd(one, other), one)
        builder.store(shares, builder.bitcast(builder.gep(op_x, [first]), _V16F32.as_pointer()), align=4)
        return context.get_dummy_value()

    return (types.none(xd, xs16, block, group, pairs, dxl, Xl, s), codegen) if _contiguous(xd, xs16, block, group, dxl, Xl) else None


@intrinsic
def _add_lane_sums(typingctx, xi, at, S, s):
    """S[s, lane] += the sum of the four activation bytes of that lane in the 64-byte vector of xi at byte
    `at` (exact integers)."""

    def codegen(context, builder, signature, args):
        xp, Sp = _data(context, builder, signature.args[0], args[0], _I8), _data(context, builder, signature.args[2], args[2], _I32)
        vector = builder.load(builder.bitcast(builder.gep(xp, [args[1]]), _V64I8.as_pointer()), align=1)
        target = builder.bitcast(builder.gep(Sp, [builder.mul(args[3], ir.Constant(_I64, 16))]), _V16I32.as_pointer())
        total = builder.load(target, align=4)
        for j in range(4):
            total = builder.add(total, builder.sext(builder.shuffle_vector(vector, vector, _indices(range(j, 64, 4))), _V16I32))
        builder.store(total, target, align=4)
        return context.get_dummy_value()

    return (types.none(xi, at, S, s), codegen) if _contiguous(xi, S) else None


@njit(inline="always", cache=True)
def _prep_token(x, G, src4, base, vectors, block, group, sums, xq, xd, xs16, xi, dxl, Xl, S):
    """One token for the kernels: quantized per 32-block (_quantize_block), interleaved as the rows are
    (xi, a masked gather of 4-byte words per vector), and its lanes per set: dxl the scale of each lane's
    group, Xl the offsets' share (dx * sum(xq) of the group in the lane that carries it), and with `sums`
    (the signed-byte kernels start from them) S each lane's sum of xq over the set."""
    for b in range(x.shape[0] // 32):
        _quantize_block(x, xq, xd, xs16, b)
    words, out = xq.view(np.int32), xi.view(np.int32)
    for v in range(src4.shape[0] // 16):
        _interleave_vector(words, src4, out, v)
    for s in range(base.shape[0]):
        _set_lanes(xd, xs16, block, group, G // 16, dxl, Xl, s)
        if sums:
            for lane in range(16):  # not S[s, :] = 0: in the parallel kernels that is a parallel loop of its own
                S[s, lane] = 0
            for v in range(vectors[s]):
                _add_lane_sums(xi, base[s] + 64 * v, S, s)


@njit(cache=True)
def _prepare(x, G, src4, base, vectors, block, group, sums, xq, xd, xs16, xi, dxl, Xl, S):
    for t in range(x.shape[0]):
        _prep_token(x[t], G, src4, base, vectors, block, group, sums, xq[t], xd[t], xs16[t], xi[t], dxl[t], Xl[t], S[t])


def prepare(x: np.ndarray, G: int, sums: bool) -> dict:
    """What the kernels compute of activations x (T, K) float32 for rows in groups of G, as arrays: xq, xd,
    xs16 (the quantization), xi (interleaved), dxl, Xl (the sets' lanes) and, with `sums`, S. For tests."""
    T, K = x.shape
    sets = Sets.of(K, G)
    src4, base = sets.tables[:2]
    n = base.shape[0]
    out = {"xq": np.empty((T, K), np.int8), "xd": np.empty((T, K // 32), np.float32), "xs16": np.empty((T, K // 16), np.float32),
           "xi": np.empty((T, 4 * src4.shape[0]), np.int8), "dxl": np.empty((T, n, 16), np.float32),
           "Xl": np.empty((T, n, 16), np.float32), "S": np.zeros((T, n, 16), np.int32)}
    _prepare(np.ascontiguousarray(x, np.float32), G, *sets.tables, sums, *out.values())
    return out


@njit(inline="always", cache=True)
def _aligned_rows(T: int, W: int) -> np.ndarray:
    """An uninitialised (T, W) int8 array whose first byte is 64-byte aligned (W a multiple of 64 keeps every
    row so): the kernels load whole 64-byte vectors, and one that straddles two cache lines costs two."""
    buf = np.empty(T * W + 64, np.int8)
    skip = (64 - buf.ctypes.data % 64) % 64
    return buf[skip:skip + T * W].reshape((T, W))


def _make_linear(isa: str, layout: str, half: bool):
    kind = layout.split("_")[0]  # "nib", "u8_32" -> "u8", "i8_16" -> "i8"
    G = 16 if layout.endswith("_16") else 32
    group, tokens = TILES[isa][G]
    sums = EMITTERS[isa].START[kind] != 0  # the running sums start from the token's lane sums
    tile, rows_one, one_one = (_make_tile(isa, kind, G, g, t, half) for g, t in ((group, tokens), (group, 1), (1, 1)))

    def linear(w, dl, ml, x, tables, full, tails, out):
        """Interleaved weight rows w (R, bytes) with scale and offset lanes dl, ml (R, sets, 16; half bits or
        float32) x activations x (T, K) f32, quantized and interleaved here -> out (T, R): a tile of rows x
        tokens at a time through the intrinsics, the offsets' share included (none for the signed kinds). tables, full,
        tails: Sets.of(K, G). Every output element comes from its own (row, token) computation (see
        _tile_codegen), whatever the grouping."""
        src4, base, vectors, block, group_of = tables
        T, K = x.shape
        sets = base.shape[0]
        xq = np.empty((T, K), np.int8)
        xd = np.empty((T, K // 32), np.float32)
        xs16 = np.empty((T, K // 16), np.float32)
        xi = _aligned_rows(T, 4 * src4.shape[0])
        dxl = np.empty((T, sets, 16), np.float32)
        Xl = np.empty((T, sets, 16), np.float32)
        S = np.empty((T, sets, 16), np.int32) if sums else np.empty((1, sets, 16), np.int32)  # unread without
        if T >= 8:  # tokens are independent: a prefill's split between threads
            for t in prange(T):
                _prep_token(x[t], G, src4, base, vectors, block, group_of, sums, xq[t], xd[t], xs16[t], xi[t], dxl[t], Xl[t], S[t if sums else 0])
        else:  # a few decode rows: not worth waking the threads twice
            for t in range(T):
                _prep_token(x[t], G, src4, base, vectors, block, group_of, sums, xq[t], xd[t], xs16[t], xi[t], dxl[t], Xl[t], S[t if sums else 0])
        R = w.shape[0]
        for g in prange((R + group - 1) // group):
            r0 = g * group
            if r0 + group <= R:
                whole = T - T % tokens
                for t in range(0, whole, tokens):
                    tile(w, r0, xi, t, dl, dxl, ml, Xl, S, full, tails, out)
                for t in range(whole, T):
                    rows_one(w, r0, xi, t, dl, dxl, ml, Xl, S, full, tails, out)
            else:
                for r in range(r0, R):
                    for t in range(T):
                        one_one(w, r, xi, t, dl, dxl, ml, Xl, S, full, tails, out)

    # numba's on-disk cache is indexed by a function's qualified name and line: each variant gets its own
    # name, so no variant can ever be served another's compiled code.
    linear.__name__ = linear.__qualname__ = f"linear_{'' if isa == 'avx512-vnni' else isa.replace('-', '_') + '_'}{layout}_{'f16' if half else 'f32'}"
    return njit(parallel=True, cache=True)(linear)


# LINEARS[isa][layout, scales stored as half]: the matmul kernels of each path; numba compiles one on first call.
LINEARS = {isa: {(layout, half): _make_linear(isa, layout, half) for layout, half in KINDS} for isa in ISAS}
LINEAR = LINEARS["avx512-vnni"]
