"""The int8-activation path: quantized weights x int8 activations with integer dot products, as llama.cpp does.

Per token, activations are quantized per 32-element block (x ~ dx * xq, xq int8, dx = max|x| / 127). A
weight row is held as unsigned bytes u (0..255: 4-bit values as they are, int8 values + 128) with a scale d
and offset m per sub-block, w = d * u + m. Then

    y = sum over 32-blocks b of  d_b * dx_b * (u_b . xq_b)  +  sum over sub-blocks s of  m_s * X_s

where u . xq is an exact integer dot product, computed as 8 lanes of 32 bits, lane i summing the products of
bytes 4i..4i+3 (the layout of AVX-512 VNNI's `vpdpbusd`), and X_s = dx * sum(xq) over the sub-block's
elements. The types without offsets (Q8_0, Q5_0, Q6_K, Q3_K: w = d * q, q signed) keep q as signed bytes
("i8") and drop the second sum: no offset bytes to read, no shift to undo. The integer sums are exact; the
float work is a fixed sequence per (row, token) - so the path is batch-invariant like the f32 one, but not
bit-equal to it (activations are rounded to 8 bits).

Two instruction sets compute those lanes (ISAS; the backend picks the best one the CPU has):
- "avx512-vnni": one 512-bit `vpdpbusd` per two blocks (unsigned x signed bytes, four products per lane);
- "avx2": `vpmaddubsw` (pairs of unsigned x signed byte products -> 16 bits, saturating) then `vpmaddwd`
  by ones (pairs of those -> 32 bits), arranged so that nothing saturates (see _Avx2). It also serves
  AVX-512 CPUs without VNNI.
The lanes are exact integers either way, and everything after them is the same IR (16 float lanes, two
blocks a step: half the instructions a block-at-a-time loop issues), so the two paths give the same bits.
numba cannot spell these instructions, so the inner loop is LLVM IR emitted through `numba.extending.intrinsic`. (Both live in this one file on purpose: numba's on-disk cache revalidates a
kernel against the file that defines it, so the IR it inlines must not change in another file.)
"""

from __future__ import annotations

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from fak_engine_cpu.kernels import FAST

# The int8 paths, best first, and the CPU features (LLVM's names) each needs.
ISAS = {"avx512-vnni": ("avx512vnni", "avx512vl"), "avx2": ("avx2", "fma", "f16c")}
REQUIRED = ISAS["avx512-vnni"]


def missing_features(isa: str = "avx512-vnni") -> list[str]:
    """CPU features the `isa` int8 path needs that this machine lacks (LLVM's names)."""
    have = {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}
    return [f for f in ISAS[isa] if f not in have]


def best_isa() -> str | None:
    """The fastest int8 path this CPU can run, None when it runs none."""
    return next((isa for isa in ISAS if not missing_features(isa)), None)


# ---------------------------------------------------------------------------------------------------------
# the integer dot products (LLVM IR), one emitter per instruction set
# ---------------------------------------------------------------------------------------------------------

_I1, _I8, _I16, _I32, _I64, _F32 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.FloatType()
_V16I8, _V32I8, _V16I16, _V8I32, _V8F32 = (ir.VectorType(_I8, 16), ir.VectorType(_I8, 32), ir.VectorType(_I16, 16),
                                           ir.VectorType(_I32, 8), ir.VectorType(_F32, 8))
_V64I8, _V16I32, _V16F32 = ir.VectorType(_I8, 64), ir.VectorType(_I32, 16), ir.VectorType(_F32, 16)


class _Vnni:
    """Two blocks' u . x in one 512-bit `vpdpbusd` (unsigned bytes u x signed bytes x, four products summed
    per 32-bit lane: lanes 0-7 the first block's, 8-15 the second's).
    Signed weights w ("i8"): u = w xor 0x80 = w + 128 is unsigned, and u . x = w . x + 128 * sum(x); the
    accumulator vpdpbusd adds into starts at -128 * sum(x) (a token's own lanes, once per block, shared by
    every row), so the lanes come out as exactly w . x with one instruction per row and token and one `vpxor`
    per row (the sign trick _Avx2 needs costs a `vpsignb` per row and token and a `vpabsb` per row)."""

    def __init__(self, builder: ir.IRBuilder, kind: str):
        self.builder, self.kind = builder, kind
        self.vpdpbusd = builder.module.declare_intrinsic("llvm.x86.avx512.vpdpbusd.512",
                                                         fnty=ir.FunctionType(_V16I32, [_V16I32, _V16I32, _V16I32]))

    def token(self, x: ir.Value):  # x: one token's 64 int8 activations, two blocks (v64i8)
        x = self.builder.bitcast(x, _V16I32)
        if self.kind != "i8":
            return x, ir.Constant(_V16I32, None)
        shift = self.builder.call(self.vpdpbusd, [ir.Constant(_V16I32, None), ir.Constant(_V16I32, [-0x7F7F7F80] * 16), x])
        return x, self.builder.sub(ir.Constant(_V16I32, None), shift)  # -128 * sum(x) per lane

    def row(self, u: ir.Value):  # u: one row's 64 weight bytes, two blocks (v64i8; unsigned, or signed for "i8")
        if self.kind == "i8":
            u = self.builder.xor(u, ir.Constant(_V64I8, [-128] * 64))
        return self.builder.bitcast(u, _V16I32)

    def dot(self, row, token) -> ir.Value:  # -> v16i32, lane i = sum of products of bytes 4i..4i+3
        x, start = token
        return self.builder.call(self.vpdpbusd, [start, row, x])


class _Avx2:
    """u . x with AVX2, a 32-byte block at a time, in two steps that land on the lanes of `vpdpbusd`:

        32 bytes u, x  --vpmaddubsw-->  16 x s16, lane j = u[2j] x[2j] + u[2j+1] x[2j+1]   (saturating)
                       --vpmaddwd by ones-->  8 x s32, lane i = s16 lanes 2i + 2i+1 = bytes 4i..4i+3

    Both work lane by lane (no crossing between 128-bit halves), so lane i is vpdpbusd's lane i. With
    activations in -127..127 (never -128: quantize_activations rounds to +-127):

    "nib" (u in 0..15): a pair sums to at most 2 * 15 * 127 = 3810, so u . x goes in directly.
    "i8" (signed w in -128..127), as llama.cpp does: multiply |w| (0..128, unsigned: |-128| is the byte
        0x80, which reads as 128) by x carrying w's sign (`vpsignb`, in -127..127): pairs stay within
        2 * 128 * 127 = 32512, and the lanes are w . x.
    "u8" (u in 0..255): u * x pairs can reach 2 * 255 * 127 = 64770 and would saturate. So take w = u - 128
        (u xor 0x80) through the "i8" steps, then u . x = w . x + 128 * sum(x), the last term a token's
        own lanes (once per block, shared by every row) added in 32 bits.
    Every step is exact, so the lanes equal vpdpbusd's bit for bit. Two blocks (64 bytes) come in and 16
    lanes go out, as _Vnni's."""

    def __init__(self, builder: ir.IRBuilder, kind: str):
        self.builder, self.kind = builder, kind
        module = builder.module
        self.maddubs = module.declare_intrinsic("llvm.x86.avx2.pmadd.ub.sw", fnty=ir.FunctionType(_V16I16, [_V32I8, _V32I8]))
        self.maddwd = module.declare_intrinsic("llvm.x86.avx2.pmadd.wd", fnty=ir.FunctionType(_V8I32, [_V16I16, _V16I16]))
        self.sign = module.declare_intrinsic("llvm.x86.avx2.psign.b", fnty=ir.FunctionType(_V32I8, [_V32I8, _V32I8]))
        self.abs = module.declare_intrinsic("llvm.abs.v32i8", fnty=ir.FunctionType(_V32I8, [_V32I8, _I1]))

    def _pairs_of_pairs(self, u: ir.Value, x: ir.Value) -> ir.Value:
        return self.builder.call(self.maddwd, [self.builder.call(self.maddubs, [u, x]), ir.Constant(_V16I16, [1] * 16)])

    def _halves(self, v: ir.Value) -> list:
        return [self.builder.shuffle_vector(v, v, _indices(range(h * 32, h * 32 + 32))) for h in range(2)]

    def token(self, x: ir.Value):
        out = []
        for half in self._halves(x):
            shift = None if self.kind != "u8" else self.builder.call(
                self.maddwd, [self.builder.call(self.maddubs, [ir.Constant(_V32I8, [1] * 32), half]),
                              ir.Constant(_V16I16, [128] * 16)])  # 128 * sum(x) per lane
            out.append((half, shift))
        return out

    def row(self, u: ir.Value):
        out = []
        for half in self._halves(u):
            if self.kind == "nib":
                out.append((half, None))
                continue
            w = self.builder.xor(half, ir.Constant(_V32I8, [-128] * 32)) if self.kind == "u8" else half
            out.append((self.builder.call(self.abs, [w, ir.Constant(_I1, 0)]), w))
        return out

    def dot(self, row, token) -> ir.Value:
        lanes = []
        for (u, w), (x, shift) in zip(row, token, strict=True):
            if self.kind == "nib":
                lanes.append(self._pairs_of_pairs(u, x))
                continue
            signed = self._pairs_of_pairs(u, self.builder.call(self.sign, [x, w]))
            lanes.append(signed if shift is None else self.builder.add(signed, shift))
        return self.builder.shuffle_vector(lanes[0], lanes[1], _indices(range(16)))


EMITTERS = {"avx512-vnni": _Vnni, "avx2": _Avx2}


def _indices(values) -> ir.Constant:
    values = list(values)
    return ir.Constant(ir.VectorType(_I32, len(values)), values)


def lane_kernel(isa: str, kind: str):
    """A jitted lanes(u (N, 32) weight bytes, x (N, 32) int8, out (N, 8) int32), N even: each block's integer
    lanes as `isa` computes them inside the matmul kernels for weights of `kind` ("nib": values 0..15, "u8":
    unsigned bytes, "i8": signed bytes; unpacked), two blocks at a time as there, so tests can hold them to
    their definition."""

    def codegen(context, builder, signature, args):
        u, x, out = (context.make_array(t)(context, builder, a) for t, a in zip(signature.args, args, strict=True))
        emit = EMITTERS[isa](builder, kind)
        load = lambda arr: builder.load(builder.bitcast(arr.data, _V64I8.as_pointer()), align=1)  # noqa: E731
        builder.store(emit.dot(emit.row(load(u)), emit.token(load(x))), builder.bitcast(out.data, _V16I32.as_pointer()), align=1)
        return context.get_dummy_value()

    @intrinsic
    def pair(typingctx, u, x, out):
        return types.none(u, x, out), codegen

    @njit
    def lanes(u, x, out):
        if u.shape[0] % 2:
            raise ValueError("lanes: an even number of blocks")
        for i in range(0, u.shape[0], 2):
            pair(u[i:i + 2], x[i:i + 2], out[i:i + 2])

    return lanes


# ---------------------------------------------------------------------------------------------------------
# one tile of rows x tokens (LLVM IR)
# ---------------------------------------------------------------------------------------------------------

def _spread(builder: ir.IRBuilder, vec: ir.Value, width: int = 16) -> ir.Value:
    """vec's n lanes -> width lanes: lane 0 in the first width / n, lane 1 in the next, ..."""
    n = vec.type.count
    return builder.shuffle_vector(vec, vec, _indices(i * n // width for i in range(width)))


def _place(builder: ir.IRBuilder, vec: ir.Value, width: int = 16) -> ir.Value:
    """vec's n lanes -> width lanes: lane i in lane i * width / n, zeros in every other lane."""
    n, stride = vec.type.count, width // vec.type.count
    return builder.shuffle_vector(vec, ir.Constant(vec.type, None),
                                  _indices(lane // stride if lane % stride == 0 else n for lane in range(width)))


def _hsum(builder: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Sum of 16 lanes in a fixed order: lane i + lane i + 8 (the even blocks' partial sums with the odd
    ones'), then (0+4, 1+5, 2+6, 3+7), then pairs, then the last two."""
    idx = lambda *i: _indices(i)  # noqa: E731
    v8 = builder.fadd(builder.shuffle_vector(v, v, _indices(range(8))), builder.shuffle_vector(v, v, _indices(range(8, 16))))
    v4 = builder.fadd(builder.shuffle_vector(v8, v8, idx(0, 1, 2, 3)), builder.shuffle_vector(v8, v8, idx(4, 5, 6, 7)))
    v2 = builder.fadd(builder.shuffle_vector(v4, v4, idx(0, 1)), builder.shuffle_vector(v4, v4, idx(2, 3)))
    return builder.fadd(builder.extract_element(v2, ir.Constant(_I32, 0)), builder.extract_element(v2, ir.Constant(_I32, 1)))


def _rows_codegen(isa: str, kind: str, sub16: bool, group: int, tokens: int, half: bool):
    """IR writing out[t0 + k, r0 + g] (g < group, k < tokens) for consecutive weight rows and tokens:

        out[t, r] = sum_b scale_rt(b) * (u_rb . xq_tb)  +  sum_s m_rs * X_ts,   scale_rt(b) = d_rb * dx_tb

    Arguments: w (R, bytes per row) uint8, r0, xq (T, K) int8, t0, d (R, subs), xd (T, K/32), m (R, subs)
    offsets (as d: half floats with `half`) and X (T, subs) = dx * sum(xq) per sub-block (both unread for
    "i8", a type without offsets), out (T, R). The offsets' share goes into the same chain as the rest, one
    FMA per pair of blocks with the sub-blocks' m and X in the lanes their first element's partial sum sits
    in (zeros elsewhere): a separate short dot per output element cost more than the blocks' integer work on
    small matrices. Each (row, token) pair is its own accumulation chain, 16 float lanes wide: blocks are
    taken two at a time (lanes 0-7 the even block's 8 partial sums, 8-15 the odd one's; an odd count's last
    block pairs with zeros), summed at the end by _hsum. Chains are interleaved only to share loads (a row's unpacked bytes serve every token) and to hide
    latency. A chain's operations and their order do not depend on `group` or `tokens`, so any grouping
    gives the same bits: the kernels built on this are batch-invariant.

    kind:    "nib": u packed two per byte (16 bytes per block: low nibble element j, high element j + 16);
             "u8": unsigned bytes; "i8": signed bytes (then the type has no offsets: none to add).
    sub16:   a scale per 16 elements (lanes 0-3 and 4-7 of a block's partial sums get different scales).
    half:    d and m hold IEEE half floats (uint16 bits), widened on load (vcvtph2ps): half the bytes.
    isa:     which instructions compute the integer lanes (EMITTERS); the float work is the same for all."""

    def codegen(context, builder, signature, args):
        arrays = [context.make_array(t)(context, builder, a) if isinstance(t, types.Array) else a
                  for t, a in zip(signature.args, args, strict=True)]
        w, r0, xq, t0, d, xd, m, X, out = arrays
        offsets = kind != "i8"
        blocks = builder.extract_value(xd.shape, 1)
        module = builder.module
        emit = EMITTERS[isa](builder, kind)
        nibbles = kind == "nib"
        fma = module.declare_intrinsic("llvm.fma.v16f32", fnty=ir.FunctionType(_V16F32, [_V16F32, _V16F32, _V16F32]))
        i8p = _I8.as_pointer()
        prefetch = module.declare_intrinsic("llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [i8p, _I32, _I32, _I32]))
        scale_ty = ir.IntType(16) if half else _F32
        one, zero = ir.Constant(_I64, 1), ir.Constant(_I64, 0)
        const = lambda v: ir.Constant(_I64, v)  # noqa: E731
        block_bytes = 16 if nibbles else 32
        per_block = 2 if sub16 else 1  # scales per block

        def rows_of(arr, first, count, ty):
            stride = builder.extract_value(arr.strides, 0)
            base = builder.bitcast(arr.data, i8p)
            return [builder.bitcast(builder.gep(base, [builder.mul(builder.add(first, const(i)), stride)]), ty)
                    for i in range(count)], stride

        def load(ptr, ty, n, count, align):  # `count` consecutive `ty` values from ptr + n (in ty units), a vector
            return builder.load(builder.bitcast(builder.gep(ptr, [n]), ir.VectorType(ty, count).as_pointer()), align=align)

        def padded(vec, width):  # vec (n lanes) -> width lanes, the rest zero
            n = vec.type.count
            return builder.shuffle_vector(vec, ir.Constant(vec.type, None), _indices(list(range(n)) + [n] * (width - n)))

        def floats(ptr, n, count, tail, f16):  # `count` values (a pair's) from ptr + n, a f32 vector; a tail's half, then zeros
            got = count // 2 if tail else count
            vec = load(ptr, ir.IntType(16) if f16 else _F32, n, got, 2 if f16 else 4)
            if f16:
                vec = builder.fpext(builder.bitcast(vec, ir.VectorType(ir.HalfType(), got)), ir.VectorType(_F32, got))
            return padded(vec, count) if tail else vec

        wrows, w_stride = rows_of(w, r0, group, i8p)
        drows, d_stride = rows_of(d, r0, group, scale_ty.as_pointer())
        xrows, _ = rows_of(xq, t0, tokens, i8p)
        xdrows, _ = rows_of(xd, t0, tokens, _F32.as_pointer())
        orows, _ = rows_of(out, t0, tokens, _F32.as_pointer())
        if offsets:
            mrows, m_stride = rows_of(m, r0, group, scale_ty.as_pointer())
            Xrows, _ = rows_of(X, t0, tokens, _F32.as_pointer())
        chains = [(g, k) for g in range(group) for k in range(tokens)]

        def step(b, accs, tail):
            """The pair of blocks b, b + 1 (tail: block b alone, with zeros) into every chain's accumulator."""
            # prefetch this block of the rows PREFETCH_GROUPS groups further down (and their scales) into L2
            # (locality 2, prefetcht1), not L1: a core has few L1 miss buffers, and filling them with prefetches
            # held a one-token matvec streaming from DRAM to ~8 GB/s a core (Q8_0 lm_head of Gemma-3, AMD EPYC
            # Zen 4), against ~13 through L2
            ahead = builder.add(builder.mul(b, const(block_bytes)), builder.mul(w_stride, const(PREFETCH_GROUPS * group)))
            for g in range(group):
                builder.call(prefetch, [builder.gep(wrows[g], [ahead]), ir.Constant(_I32, 0), ir.Constant(_I32, 2), ir.Constant(_I32, 1)])
            # the group's scales (and offsets) are one stretch of memory: walk it as the blocks go
            size = 2 if half else 4
            for base, stride in [(drows[0], d_stride)] + ([(mrows[0], m_stride)] if offsets else []):
                far = builder.add(builder.mul(stride, const(PREFETCH_GROUPS * group)), builder.mul(b, const(per_block * size * group)))
                builder.call(prefetch, [builder.gep(builder.bitcast(base, i8p), [far]), ir.Constant(_I32, 0),
                                        ir.Constant(_I32, 2), ir.Constant(_I32, 1)])
            n = 32 if tail else 64
            xs, dxs, Xs = [], [], []
            first_sub = builder.mul(b, const(per_block))
            for k in range(tokens):  # the tokens' side of this pair
                x = load(xrows[k], _I8, builder.mul(b, const(32)), n, 1)
                xs.append(emit.token(padded(x, 64) if tail else x))
                dxs.append(_spread(builder, floats(xdrows[k], b, 2, tail, False)))
                if offsets:
                    Xs.append(_place(builder, floats(Xrows[k], first_sub, 2 * per_block, tail, False)))
            new = {}
            for g in range(group):
                if nibbles:
                    packed = load(wrows[g], _I8, builder.mul(b, const(16)), n // 2, 1)
                    packed = padded(packed, 32) if tail else packed
                    mask = ir.Constant(_V32I8, [15] * 32)
                    lo = builder.and_(packed, mask)
                    hi = builder.and_(builder.lshr(packed, ir.Constant(_V32I8, [4] * 32)), mask)
                    # block b: low nibbles of its 16 bytes, then high; block b + 1 the same from the next 16
                    u = builder.shuffle_vector(lo, hi, _indices([*range(16), *range(32, 48), *range(16, 32), *range(48, 64)]))
                else:
                    u = load(wrows[g], _I8, builder.mul(b, const(32)), n, 1)
                    u = padded(u, 64) if tail else u
                u = emit.row(u)
                # the row's scales in every lane (sub16: a block's first in its lanes 0-3, second in 4-7), built
                # once per row and pair; a chain's scale d * dx is then one vector multiply
                dg = _spread(builder, floats(drows[g], first_sub, 2 * per_block, tail, half))
                mg = _place(builder, floats(mrows[g], first_sub, 2 * per_block, tail, half)) if offsets else None
                for k in range(tokens):
                    isum = emit.dot(u, xs[k])
                    acc = builder.call(fma, [builder.sitofp(isum, _V16F32), builder.fmul(dg, dxs[k]), accs[g, k]])
                    new[g, k] = builder.call(fma, [mg, Xs[k], acc]) if offsets else acc
            return new

        pairs = builder.ashr(blocks, one)
        entry = builder.block
        loop = builder.append_basic_block("vnni.loop")
        after = builder.append_basic_block("vnni.after")
        tail = builder.append_basic_block("vnni.tail")
        done = builder.append_basic_block("vnni.done")
        builder.cbranch(builder.icmp_signed(">", pairs, zero), loop, after)

        builder.position_at_end(loop)
        p = builder.phi(_I64)
        p.add_incoming(zero, entry)
        accs = {}
        for c in chains:
            accs[c] = builder.phi(_V16F32)
            accs[c].add_incoming(ir.Constant(_V16F32, None), entry)
        looped = step(builder.add(p, p), accs, tail=False)
        p2 = builder.add(p, one)
        p.add_incoming(p2, builder.block)
        for c in chains:
            accs[c].add_incoming(looped[c], builder.block)
        builder.cbranch(builder.icmp_signed("<", p2, pairs), loop, after)

        def merge(sources):  # every phi first: LLVM wants them at the top of the block
            merged = {}
            for c in chains:
                merged[c] = builder.phi(_V16F32)
                for values, block in sources:
                    merged[c].add_incoming(values[c] if isinstance(values, dict) else values, block)
            return merged

        builder.position_at_end(after)
        summed = merge([(ir.Constant(_V16F32, None), entry), (looped, loop)])
        builder.cbranch(builder.trunc(builder.and_(blocks, one), _I1), tail, done)

        builder.position_at_end(tail)
        tailed = step(builder.sub(blocks, one), summed, tail=True)
        tail_end = builder.block
        builder.branch(done)

        builder.position_at_end(done)
        finals = merge([(summed, after), (tailed, tail_end)])
        for (g, k), acc in finals.items():
            builder.store(_hsum(builder, acc), builder.gep(orows[k], [builder.add(r0, const(g))]))
        return context.get_dummy_value()

    return codegen


def _make_rows(isa: str, kind: str, sub16: bool, group: int, tokens: int, half: bool):
    @intrinsic
    def rows(typingctx, w, r0, xq, t0, d, xd, m, X, out):
        return types.none(w, r0, xq, t0, d, xd, m, X, out), _rows_codegen(isa, kind, sub16, group, tokens, half)

    # The linear kernels hold these in their closures, and numba's cache key hashes a closure's pickle,
    # which holds an intrinsic's uuid: a random one (numba's default) would miss the cache in every process.
    rows._set_uuid(f"fak.vnni.rows:{isa}:{kind}{int(sub16)}{int(half)}:{group}x{tokens}")
    return rows


PREFETCH_GROUPS = 2  # software prefetch distance, in groups of rows
# (rows, tokens) per call when there are several tokens: independent accumulation chains keep the FMA
# pipeline busy, and a row's unpacked bytes serve every token. AVX2 has 16 vector registers, not 32.
TILES = {"avx512-vnni": (4, 4), "avx2": (2, 2)}
# One kind per (layout, scales stored as half); each has intrinsics for a full tile, rows x 1 token, 1 x 1.
KINDS = [(layout, half) for layout in ("nib", "u8_32", "u8_16", "i8_32", "i8_16") for half in (False, True)]


# ---------------------------------------------------------------------------------------------------------
# activations and the matmul kernels
# ---------------------------------------------------------------------------------------------------------


@njit(fastmath=FAST, inline="always", cache=True)
def _quantize_token(x: np.ndarray, xq: np.ndarray, xd: np.ndarray, xs16: np.ndarray) -> None:
    """One token's x (K,) f32 -> xq (K,) int8, xd (K/32,) block scales, xs16 (K/16,) = dx * sum(xq) per 16.

    xq = round-half-to-even(x / dx) with dx = max|x| / 127 per 32-element block (0 for an all-zero block)."""
    for b in range(x.shape[0] // 32):
        blk = x[b * 32:b * 32 + 32]
        amax = np.float32(0.0)
        for j in range(32):
            amax = max(amax, abs(blk[j]))
        d = amax / np.float32(127.0)
        inv = np.float32(127.0) / amax if amax > np.float32(0.0) else np.float32(0.0)
        xd[b] = d
        out = xq[b * 32:b * 32 + 32]
        for j in range(32):
            out[j] = np.int8(np.rint(blk[j] * inv))
        for half in range(2):
            total = 0
            for j in range(16):
                total += out[half * 16 + j]
            xs16[b * 2 + half] = d * np.float32(total)


@njit(fastmath=FAST, cache=True)
def quantize_activations(x: np.ndarray, xq: np.ndarray, xd: np.ndarray, xs16: np.ndarray) -> None:
    """x (T, K) f32 -> xq (T, K) int8, xd (T, K/32), xs16 (T, K/16): _quantize_token for every token."""
    for t in range(x.shape[0]):
        _quantize_token(x[t], xq[t], xd[t], xs16[t])


def _make_linear(isa: str, layout: str, half: bool):
    group, tokens = TILES[isa]
    kind, sub16 = layout.split("_")[0], layout.endswith("_16")  # "nib", "u8_32" -> "u8", "i8_16" -> "i8"
    offsets = kind != "i8"  # signed bytes: a type without offsets
    tile, rows_one, one_one = (_make_rows(isa, kind, sub16, g, t, half) for g, t in ((group, tokens), (group, 1), (1, 1)))

    def linear(u, d, m, x, out):
        """Weights u (R, subs, bytes) with scales d and offsets m (R, subs; both half bits or float32) x activations x (T, K)
        f32, quantized here to int8 -> out (T, R): a tile of rows x tokens at a time through the
        intrinsics, the offsets' share included (none for "i8").
        Every output element comes from its own (row, token) computation (see _rows_codegen), whatever
        the grouping."""
        T, K = x.shape
        xq = np.empty((T, K), np.int8)
        xd = np.empty((T, K // 32), np.float32)
        xs16 = np.empty((T, K // 16), np.float32)
        if T >= 8:  # tokens are independent: a prefill's split between threads
            for t in prange(T):
                _quantize_token(x[t], xq[t], xd[t], xs16[t])
        else:  # a few decode rows: not worth waking the threads twice
            for t in range(T):
                _quantize_token(x[t], xq[t], xd[t], xs16[t])
        if sub16 or not offsets:
            X = xs16
        else:  # per 32-element sub-block
            X = np.empty((T, K // 32), np.float32)
            for t in range(T):
                for b in range(K // 32):
                    X[t, b] = xs16[t, 2 * b] + xs16[t, 2 * b + 1]
        R = u.shape[0]
        rows = u.reshape(R, u.shape[1] * u.shape[2])
        for g in prange((R + group - 1) // group):
            r0 = g * group
            if r0 + group <= R:
                full = T - T % tokens
                for t in range(0, full, tokens):
                    tile(rows, r0, xq, t, d, xd, m, X, out)
                for t in range(full, T):
                    rows_one(rows, r0, xq, t, d, xd, m, X, out)
            else:
                for r in range(r0, R):
                    for t in range(T):
                        one_one(rows, r, xq, t, d, xd, m, X, out)

    # numba's on-disk cache is indexed by a function's qualified name and line: each variant gets its own
    # name, so no variant can ever be served another's compiled code.
    linear.__name__ = linear.__qualname__ = f"linear_{'' if isa == 'avx512-vnni' else isa + '_'}{layout}_{'f16' if half else 'f32'}"
    return njit(parallel=True, cache=True)(linear)


# LINEARS[isa][layout, scales stored as half]: the matmul kernels of each path; numba compiles one on first call.
LINEARS = {isa: {(layout, half): _make_linear(isa, layout, half) for layout, half in KINDS} for isa in ISAS}
LINEAR = LINEARS["avx512-vnni"]
