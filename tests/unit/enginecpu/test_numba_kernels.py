"""The numba backend's kernels against the numpy reference, for every weight type, and their batch
invariance (a token's result does not depend on the other tokens in the call)."""

from __future__ import annotations

import numpy as np
import pytest

from fak_engine_cpu import vnni
from fak_engine_cpu.backend import NumbaBackend, QMatrix
from fakcore.engine.reference import ReferenceBackend
from fakcore.formats.quants import layout
from fakcore.formats.quants.unpack import INTEGER_TYPES
from fakcore.formats.tensor import Tensor
from tests.unit.formats.test_formats_unpack import random_blocks


@pytest.fixture(scope="module")
def nb():
    return NumbaBackend()


def quantized(qtype: str, rows: int, cols: int, seed: int = 0) -> Tensor:
    qt = layout(qtype)
    rng = np.random.default_rng(seed)
    blocks = random_blocks(qtype, rows * cols // qt.block_size, rng)
    return Tensor(name=f"w.{qtype}", qtype=qtype, shape=(rows, cols), raw=blocks.reshape(-1), source="test")


@pytest.mark.parametrize("qtype", INTEGER_TYPES + ("F32", "F16", "BF16"))
def test_linear_matches_reference_and_is_batch_invariant(nb, qtype):
    rows, cols = 40, 512
    if qtype in ("F32", "F16", "BF16"):
        values = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
        t = Tensor.from_array(f"w.{qtype}", values, qtype)
    else:
        t = quantized(qtype, rows, cols)
    w = nb.matrix(t)
    assert isinstance(w, QMatrix) == (qtype in INTEGER_TYPES)
    ref_w = ReferenceBackend().matrix(t)
    x = np.random.default_rng(2).standard_normal((13, cols)).astype(np.float32)
    y = nb.linear(x, w)
    expected = x.astype(np.float64) @ ref_w.astype(np.float64).T
    np.testing.assert_allclose(y, expected, rtol=2e-5, atol=2e-5 * np.abs(expected).max())
    for t_ in range(len(x)):  # one token at a time: bit for bit the rows of the batched call
        assert np.array_equal(nb.linear(x[t_:t_ + 1], w)[0], y[t_])
    assert np.array_equal(nb.linear(x[3:9], w), y[3:9])


def test_quantized_matrix_is_resident_in_integer_form(nb):
    t = quantized("Q6_K", 16, 256)
    w = nb.embedding(t)
    assert w.q.dtype == np.int8 and w.q.shape == (16, 16, 16)
    assert nb.matrix(t) is w  # a tied LM head is the embedding table: one resident copy
    w4 = nb.matrix(quantized("Q4_K", 16, 256))
    assert w4.nibbles and w4.q.shape == (16, 8, 16) and w4.shape == (16, 256)  # two values a byte


@pytest.mark.parametrize("cols", [64, 96, 160, 576, 1536])
@pytest.mark.parametrize("qtype", ["F32", "Q4_1", "Q8_0"])
def test_lone_token_gets_the_bits_of_a_batched_one(nb, qtype, cols):
    """A decode step (one token) must reproduce prefill's bits exactly, at every width the models use."""
    rows = 24
    values = np.random.default_rng(cols).standard_normal((rows, cols)).astype(np.float32)
    t = Tensor.from_array("w", values) if qtype == "F32" else quantized(qtype, rows, cols, seed=cols)
    w = nb.matrix(t)
    x = np.random.default_rng(5).standard_normal((7, cols)).astype(np.float32)
    batched = nb.linear(x, w)
    for i in range(7):
        assert np.array_equal(nb.linear(x[i:i + 1], w)[0], batched[i])


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_1", "Q4_0"])
def test_embedding_rows_equal_dequantized_rows(nb, qtype):
    t = quantized(qtype, 50, 64)
    ids = np.array([3, 0, 49, 3])
    np.testing.assert_allclose(nb.embed(nb.embedding(t), ids, 1.0), t.dequantize()[ids], rtol=1e-6, atol=1e-6)


def test_elementwise_ops_match_reference(nb):
    ref = ReferenceBackend()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 4, 16)).astype(np.float32)
    w = rng.standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(nb.rmsnorm(x, w, 1e-6), ref.rmsnorm(x, w, 1e-6), rtol=1e-5, atol=1e-6)
    from fakcore.models.config import RopeScaling

    pos = np.array([0, 1, 2, 50, 51, 700, 3])
    np.testing.assert_allclose(nb.rope(x, pos, nb.rope_table(16, 10000.0, RopeScaling("none"))),
                               ref.rope(x, pos, ref.rope_table(16, 10000.0, RopeScaling("none"))), rtol=1e-5, atol=1e-5)
    g, u = rng.standard_normal((2, 5, 32)).astype(np.float32)
    for act in ("silu", "gelu_tanh"):
        np.testing.assert_allclose(nb.gated(g, u, act), ref.gated(g, u, act), rtol=1e-5, atol=1e-6)


def test_classic_decoder_ops_match_reference_and_are_batch_invariant(nb):
    """LayerNorm (shared gains with bias; per-head gains without), the plain MLP's activations, partial RoPE
    (8 of 16 dims turn, the rest pass) with a longrope attention factor."""
    from fakcore.models.config import RopeScaling

    ref = ReferenceBackend()
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((7, 4, 16)) + 0.5).astype(np.float32)
    w, b = rng.standard_normal((2, 16)).astype(np.float32)
    heads = rng.standard_normal(4 * 16).astype(np.float32)
    for args in ((w, b), (heads, None)):
        got = nb.layernorm(x, *args, 1e-5)
        np.testing.assert_allclose(got, ref.layernorm(x, *args, 1e-5), rtol=1e-5, atol=1e-5)
        assert np.array_equal(nb.layernorm(x[2:3], *args, 1e-5), got[2:3])  # one token alone: the same bits
    h = rng.standard_normal((5, 96)).astype(np.float32) * 3
    for act in ("gelu", "gelu_tanh"):
        np.testing.assert_allclose(nb.activation(h, act), ref.activation(h, act), rtol=1e-5, atol=1e-6)
    pos = np.array([0, 1, 2, 50, 51, 700, 3])
    scaling = RopeScaling("longrope", factors=(1.0, 2.0, 3.0, 4.0), attention_factor=1.2)
    got = nb.rope(x, pos, nb.rope_table(8, 10000.0, scaling))
    np.testing.assert_allclose(got, ref.rope(x, pos, ref.rope_table(8, 10000.0, scaling)), rtol=1e-5, atol=1e-5)
    assert np.array_equal(got[..., 8:], x[..., 8:])


# ---------------------------------------------------------------------------------------------------------
# the int8-activation path, on every instruction set this CPU runs (AVX-512 VNNI, AVX2)
# ---------------------------------------------------------------------------------------------------------

INT8_PATHS = [isa for isa in vnni.ISAS if not vnni.missing_features(isa)]
NO_OFFSETS8 = np.zeros((0, 0), np.float32)  # what the signed kinds' kernels get for offsets
KIND_RANGES = {"nib": (0, 16), "u8": (0, 256), "i8": (-128, 128), "i6": (-32, 32), "i5": (-16, 16)}  # values [lo, top)


def test_int8_path_is_chosen_from_the_cpu_and_a_forced_one_it_lacks_is_an_error(monkeypatch):
    from fakcore.engine.backend import BackendError

    if INT8_PATHS:  # no flag needed: the best path this CPU has
        be = NumbaBackend(activations="int8")
        assert (be.name, be.isa) == ("numba-int8", INT8_PATHS[0])
    for isa in vnni.ISAS:  # a path this CPU cannot run, asked for by name, fails loudly naming what is missing
        if isa not in INT8_PATHS:
            with pytest.raises(BackendError, match=f"{isa} int8 path needs CPU features {vnni.missing_features(isa)[0]}"):
                NumbaBackend(activations="int8", isa=isa)
    # the same on CPUs with less, whatever this one has: AVX-VNNI without AVX-512 (a client core), then
    # neither VNNI: the best path left chosen, a better one forced an error
    cpus = [({"avx512-vnni": ["avx512vnni"], "avx-vnni": [], "avx2": []}, "avx-vnni"),
            ({"avx512-vnni": ["avx512vnni"], "avx-vnni": ["avxvnni"], "avx2": []}, "avx2")]
    for lacks, best in cpus:
        monkeypatch.setattr(vnni, "missing_features", lambda isa="avx512-vnni", lacks=lacks: lacks[isa])
        assert NumbaBackend(activations="int8").isa == best
        with pytest.raises(BackendError, match="avx512-vnni int8 path needs CPU features avx512vnni"):
            NumbaBackend(activations="int8", isa="avx512-vnni")
    with pytest.raises(BackendError, match="avx-vnni int8 path needs CPU features avxvnni"):
        NumbaBackend(activations="int8", isa="avx-vnni")
    with pytest.raises(BackendError, match="int8 paths are"):
        NumbaBackend(activations="int8", isa="sse2")
    with pytest.raises(BackendError, match="activations"):
        NumbaBackend(activations="fp8")
    with pytest.raises(BackendError, match="isa"):
        NumbaBackend(isa="avx2")  # an int8 path for f32 activations


def test_auto_activations_take_the_best_path_this_cpu_runs(monkeypatch):
    auto = NumbaBackend(activations="auto")
    assert (auto.name, auto.isa, auto.device) == (("numba-int8", INT8_PATHS[0], f"cpu:{INT8_PATHS[0]}") if INT8_PATHS
                                                  else ("numba", "", "cpu"))
    monkeypatch.setattr(vnni, "missing_features", lambda isa="avx512-vnni": ["avx2"])  # a CPU without an int8 path
    assert (NumbaBackend(activations="auto").name, NumbaBackend(activations="auto").activations) == ("numba", "f32")


@pytest.fixture(scope="module", params=INT8_PATHS or [None])
def nb8(request):
    # Fails, not skips, on a CPU that runs no int8 path: the path's claims cannot be witnessed there.
    if request.param is None:
        pytest.fail(f"this machine runs no int8 path ({[(isa, vnni.missing_features(isa)) for isa in vnni.ISAS]})")
    return NumbaBackend(activations="int8", isa=request.param)


@pytest.mark.parametrize("kind", list(KIND_RANGES))
def test_int8_lanes_are_exact_integer_dot_products(nb8, kind):
    """Each path's 16 lanes per 64-byte vector are the sums of 4 adjacent w x xq products (vpdpbusd's lanes),
    exactly, with the running sum started as the kernels start it (the signed bytes' and AVX2's unsigned
    bytes' correction), including the worst cases for AVX2's saturating 16-bit pair sums (u = 255, w = -128
    against +-127), for 4-bit values, unsigned bytes, signed bytes and signed values of 6 and 5 bits."""
    lo, top = KIND_RANGES[kind]
    dtype = np.uint8 if kind in ("nib", "u8") else np.int8
    uu, xx = np.meshgrid(np.arange(lo, top), np.arange(-127, 128), indexing="ij")  # every (w, x), 4 per lane
    u = np.repeat(uu.reshape(-1, 1), 64, 1).astype(dtype)
    x = np.repeat(xx.reshape(-1, 1), 64, 1).astype(np.int8)
    rng = np.random.default_rng(7)
    u = np.concatenate([u, rng.integers(lo, top, (4096, 64)).astype(dtype)])
    x = np.concatenate([x, rng.integers(-127, 128, (4096, 64)).astype(np.int8)])
    lanes = np.empty((len(u), 16), np.int32)
    vnni.lane_kernel(nb8.isa, kind)(u, x, lanes)
    np.testing.assert_array_equal(lanes, (u.astype(np.int32) * x).reshape(-1, 16, 4).sum(-1))


@pytest.mark.parametrize("kind", list(KIND_RANGES))
def test_int8_lanes_exact_over_a_whole_set(nb8, kind):
    """A 16-group set's 8 vectors into one set of lanes, exactly: the AVX2 path sums small values' 16-bit pairs
    over runs of vectors before widening them (4-bit values 8 vectors, at most 8 x 3810; -16..15 shifted to
    0..31, 4 x 7874; -32..31 shifted to 0..63, 2 x 16002), so the extremes (every weight at its largest or
    smallest against +-127 in every vector, and mixed signs) and random runs must come out as the sums."""
    lo, top = KIND_RANGES[kind]
    dtype = np.uint8 if kind in ("nib", "u8") else np.int8
    V = 8
    rng = np.random.default_rng(11)
    extremes = [(w, xv) for w in (lo, top - 1) for xv in (-127, 127)]
    u = np.array([np.full(V * 64, w) for w, _ in extremes] + [rng.integers(lo, top, V * 64) for _ in range(512)]).astype(dtype)
    x = np.array([np.full(V * 64, xv) for _, xv in extremes] + [rng.integers(-127, 128, V * 64) for _ in range(256)]
                 + [rng.choice([-127, 127], V * 64) for _ in range(256)]).astype(np.int8)
    u[-256:] = top - 1  # the largest weights against +-127 of random signs
    lanes = np.empty((len(u), 16), np.int32)
    vnni.lane_kernel(nb8.isa, kind, V)(u, x, lanes)
    expected = (u.astype(np.int32) * x).reshape(-1, V, 16, 4).sum((1, 3))
    np.testing.assert_array_equal(lanes, expected)
    if kind == "nib":
        assert np.abs(expected).max() == V * 4 * 15 * 127  # the run's bound reached


@pytest.mark.parametrize("kind", ["i5", "i6"])
@pytest.mark.parametrize("G", [32, 16])
def test_narrow_signed_kinds_give_the_i8_kernels_bits(nb8, kind, G):
    """Rows whose values fit 5 or 6 signed bits are stored as "i8" rows are; their kernels (the AVX2 path sums
    their products in 16 bits over runs of vectors) give the "i8" kernels' outputs bit for bit: the integer
    lanes are exact either way. Every tile shape (1, 3, 16 and 37 tokens; 13 rows), half and float32
    scales, row lengths with tail sets, the extremes of the range in every row."""
    lo, top = KIND_RANGES[kind]
    rng = np.random.default_rng(G)
    for K in (64, 576, 640, 2048):
        groups = K // G
        q = rng.integers(lo, top, (13, groups, G)).astype(np.int8)
        q[0], q[1] = lo, top - 1
        w = vnni.interleave(q, False)
        sets = vnni.Sets.of(K, G)
        for half in (False, True):
            d = rng.random((13, groups)).astype(np.float16)
            d = vnni.padded_groups(d.view(np.uint16) if half else d.astype(np.float32), G)
            for T in (1, 3, 16, 37):
                x = rng.standard_normal((T, K)).astype(np.float32)
                x[0, :8] = 0.0  # a zero block's scale too
                narrow, wide = np.empty((T, 13), np.float32), np.empty((T, 13), np.float32)
                vnni.LINEARS[nb8.isa][f"{kind}_{G}", half](w, d, NO_OFFSETS8, x, sets.tables, sets.full, sets.tails, narrow)
                vnni.LINEARS[nb8.isa][f"i8_{G}", half](w, d, NO_OFFSETS8, x, sets.tables, sets.full, sets.tails, wide)
                assert np.array_equal(narrow.view(np.uint32), wide.view(np.uint32)), (K, half, T)


@pytest.mark.parametrize("groups,G", [(20, 32), (17, 32), (18, 32), (64, 32), (16, 16), (48, 16), (12, 16)])
@pytest.mark.parametrize("nibbles", [False, True])
def test_interleaved_sets_round_trip(groups, G, nibbles):
    """The int8 path's layout: a row's groups as sets of 16, 8, 4, 2 (padded), every value once, and back."""
    rng = np.random.default_rng(groups)
    q = rng.integers(0, 16 if nibbles else 256, (3, groups, G)).astype(np.uint8)
    sizes = vnni.set_sizes(groups, G)
    assert sum(sizes) >= groups and sum(sizes) - groups < 64 // G and all(n * G >= 64 for n in sizes)
    b = vnni.interleave(q, nibbles)
    assert b.shape == (3, sum(sizes) * G // (2 if nibbles else 1))
    np.testing.assert_array_equal(vnni.deinterleave(b, groups, G, nibbles), q)
    d = rng.standard_normal((3, groups)).astype(np.float32)
    padded = vnni.padded_groups(d, G)
    assert padded.shape == (3, sum(sizes)) and not padded[:, groups:].any()
    np.testing.assert_array_equal(padded[:, :groups], d)


@pytest.mark.parametrize("K,G", [(576, 32), (640, 32), (96, 32), (2048, 16), (80 + 16, 16), (1536, 32)])
def test_int8_activation_preparation_is_its_definition(K, G):
    """What every int8 kernel reads of its activations, against numpy: each 32-block quantized to
    round-half-to-even(x / dx) with dx = max|x| / 127 (as x * (127 / max|x|); an all-zero block gives 0 and 0),
    dx * sum(xq) per 16, the bytes interleaved as the rows are (Sets.src), and each set's lanes: the scale of
    the lane's group, its offset share, and the lane sums the signed-byte kernels start from."""
    rng = np.random.default_rng(K + G)
    T = 5
    x = (rng.standard_normal((T, K)) * np.exp(rng.uniform(-30, 30, (T, K // 32, 1))).repeat(32, 1).reshape(T, K)).astype(np.float32)
    x[0, :32] = 0.0
    x[1, 32:64] = -0.0
    x[2, :32] = rng.uniform(-1e-36, 1e-36, 32)  # tiny (127 / max|x| still finite)
    x[3, 3] = 1e-42  # a subnormal beside larger values
    got = vnni.prepare(x, G, sums=True)
    blocks = x.reshape(T, -1, 32)
    amax = np.abs(blocks).max(-1)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    xq = np.rint(blocks * inv[..., None]).astype(np.int8).reshape(T, K)
    xd = (amax / np.float32(127.0)).astype(np.float32)
    np.testing.assert_array_equal(got["xq"], xq)
    np.testing.assert_array_equal(got["xd"].view(np.uint32), xd.view(np.uint32))
    sums16 = xq.reshape(T, -1, 16).astype(np.int32).sum(-1)
    np.testing.assert_array_equal(got["xs16"], np.repeat(xd, 2, 1) * sums16.astype(np.float32))
    sets = vnni.Sets.of(K, G)
    src = sets.src
    np.testing.assert_array_equal(got["xi"], np.where(src >= 0, xq[:, np.maximum(src, 0)], 0))
    _, base, vectors, block, group = sets.tables
    for s in range(len(base)):
        np.testing.assert_array_equal(got["dxl"][:, s], np.where(block[s] >= 0, xd[:, np.maximum(block[s], 0)], 0))
        shares = got["xs16"][:, np.maximum(group[s], 0) * (G // 16)]
        if G == 32:
            shares = shares + got["xs16"][:, np.maximum(group[s], 0) * 2 + 1]
        np.testing.assert_array_equal(got["Xl"][:, s], np.where(group[s] >= 0, shares, 0))
        lanes = got["xi"][:, base[s]:base[s] + 64 * vectors[s]].astype(np.int32).reshape(T, vectors[s], 16, 4).sum((1, 3))
        np.testing.assert_array_equal(got["S"][:, s], lanes)


def columns(qtype: str) -> list[int]:
    """512, and for the 32-element types 544 and 640 too: an odd count of blocks (padded with a zero one),
    and 20 blocks (a set of 16 and one of 4, Gemma-3's rows)."""
    return [512] + ([544, 640] if layout(qtype).block_size == 32 else [])


@pytest.mark.parametrize("qtype,cols", [(q, c) for q in INTEGER_TYPES for c in columns(q)])
@pytest.mark.parametrize("tokens", [1, 3, 4, 9])
def test_int8_linear_close_to_reference_and_batch_invariant(nb8, qtype, cols, tokens):
    rows = 37  # not a multiple of the 4-row group: the single-row kernel runs too
    t = quantized(qtype, rows, cols, seed=3)
    w = nb8.matrix(t)
    x = np.random.default_rng(tokens).standard_normal((tokens, cols)).astype(np.float32)
    y = nb8.linear(x, w)
    expected = x.astype(np.float64) @ ReferenceBackend().matrix(t).astype(np.float64).T
    # activations rounded to 8 bits per 32-element block: about 0.5% of the output's scale
    assert np.abs(y - expected).max() <= 0.02 * np.abs(expected).max()
    for i in range(tokens):
        assert np.array_equal(nb8.linear(x[i:i + 1], w)[0], y[i])


def test_int8_paths_give_the_same_bits():
    """Where the CPU runs more than one path (AVX-512 VNNI and AVX2), they agree bit for bit: same lanes,
    same float work. Elsewhere each path's lanes are held to their definition above."""
    if len(INT8_PATHS) < 2:
        pytest.skip(f"this CPU runs only the {INT8_PATHS} int8 path(s): nothing to compare")
    backends = [NumbaBackend(activations="int8", isa=isa) for isa in INT8_PATHS]
    for qtype in INTEGER_TYPES:
        for cols in columns(qtype):
            t = quantized(qtype, 37, cols, seed=4)
            x = np.random.default_rng(8).standard_normal((9, cols)).astype(np.float32)
            first, *others = (be.linear(x, be.matrix(t)) for be in backends)
            for y in others:
                assert np.array_equal(first, y), (qtype, cols)


def test_int8_embedding_and_fused_rows(nb8):
    t = quantized("Q8_0", 50, 64)
    ids = np.array([3, 0, 49, 3])
    np.testing.assert_allclose(nb8.embed(nb8.embedding(t), ids, 1.0), t.dequantize()[ids], rtol=1e-6, atol=1e-6)
    a, b = nb8.matrix(quantized("Q4_1", 8, 64, 1)), nb8.matrix(quantized("Q4_1", 12, 64, 2))
    fused = nb8.fuse([a, b])
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    assert np.array_equal(nb8.linear(x, fused), np.concatenate([nb8.linear(x, a), nb8.linear(x, b)], axis=1))
    # the kernels' 64-byte vector loads start on cache lines: resident rows begin 64-byte aligned
    assert all(m.q.ctypes.data % 64 == 0 for m in (a, b, fused, nb8.embedding(t)))


def test_gated_activations_split_between_threads_give_the_same_bits():
    """From PARALLEL_ROWS rows the gated activations run row-parallel; a row's result is the same loop's."""
    from fak_engine_cpu import kernels

    rng = np.random.default_rng(5)
    gu = (rng.standard_normal((kernels.PARALLEL_ROWS + 3, 2 * 1000)) * 4).astype(np.float32)
    gate, up = gu[:, :1000], gu[:, 1000:]  # views into one fused output, as the model passes them
    for one, rows in ((kernels.gated_silu, kernels.gated_silu_rows), (kernels.gated_gelu_tanh, kernels.gated_gelu_tanh_rows)):
        a, b = np.empty((len(gu), 1000), np.float32), np.empty((len(gu), 1000), np.float32)
        one(gate, up, a)
        rows(gate, up, b)
        assert np.array_equal(a, b)
        single = np.empty((1, 1000), np.float32)
        one(gate[3:4], up[3:4], single)
        assert np.array_equal(single[0], b[3])


def half_of(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).view(np.uint16)


def assert_half_copies_follow(cache) -> None:
    n = cache.length
    L, Hkv, blocks, D, width = cache.kt.shape  # keys in blocks of positions: back to one row per feature
    keys_t = cache.kt.transpose(0, 1, 3, 2, 4).reshape(L, Hkv, D, blocks * width)
    assert np.array_equal(keys_t[..., :n], half_of(cache.k[:, :, :n].transpose(0, 1, 3, 2)))
    assert np.array_equal(cache.vh[:, :, :n], half_of(cache.v[:, :, :n]))


def test_half_cache_copies_follow_writes_growth_and_moves_and_attend_as_rounded_float_caches(nb):
    """The int8 path's caches (NumbaKVCache, half) keep half-float copies of the keys (transposed) and values
    for the attention kernel, from the float32 truth: after the kernel's own writes, a write through the
    cache, growth, the KV-MMU's drop and a prefix copy they equal the truth rounded; and attention over a half
    cache gives the bits of attention over a float32 cache holding the rounded keys and values."""
    from types import SimpleNamespace

    from fak_engine_cpu.backend import NumbaKVCache
    from fakcore.engine.backend import Segment

    rng = np.random.default_rng(7)
    L, Hkv, H, D = 2, 2, 6, 64

    def rows(T, heads=Hkv):
        return rng.standard_normal((T, heads, D)).astype(np.float32)

    half, full = NumbaKVCache(L, Hkv, D, half=True), NumbaKVCache(L, Hkv, D)
    shape = SimpleNamespace(n_kv_layers=L, n_kv_heads=Hkv, head_dim=D)
    auto = NumbaBackend(activations="auto")  # the int8 path's caches are half ones, the f32 path's are not
    assert auto.new_cache(shape).half == (auto.activations == "int8") and not nb.new_cache(shape).half
    T = 40
    q, k, v = rows(T, H), rows(T), rows(T)
    k16, v16 = k.astype(np.float16).astype(np.float32), v.astype(np.float16).astype(np.float32)
    for layer in range(L):  # a prefill, its rows stored by the kernel
        got = nb.attention(q, k, k, v, [Segment(half, slice(0, T))], layer, 0, 0.125, 0.0)
        want = nb.attention(q, k16, k16, v16, [Segment(full, slice(0, T))], layer, 0, 0.125, 0.0)
        assert np.array_equal(got, want)
    half.commit(list(range(T)))
    full.commit(list(range(T)))
    assert_half_copies_follow(half)
    extra_k, extra_v = rows(30), rows(30)
    for layer in range(L):  # rows written through the cache, past its first capacity (64): it grows
        half.write(layer, T, extra_k, extra_k, extra_v)
    half.commit(list(range(30)))
    assert half.capacity >= 70
    assert_half_copies_follow(half)
    half.drop(3, 11)  # the KV-MMU closes a gap: keys and values move down
    assert_half_copies_follow(half)
    copy = NumbaKVCache(L, Hkv, D, half=True)
    copy.copy_prefix(half, 50)
    assert_half_copies_follow(copy)
    q1 = rows(1, H)  # a decode row over the moved cache: again the rounded float cache's bits
    rounded, n = NumbaKVCache(L, Hkv, D), copy.length
    rounded.reserve(n + 1)
    rounded.k[:, :, :n] = copy.k[:, :, :n].astype(np.float16).astype(np.float32)
    rounded.v[:, :, :n] = copy.v[:, :, :n].astype(np.float16).astype(np.float32)
    rounded.keys_changed(0, n)
    rounded.commit(copy.tokens)
    k1, v1 = rows(1), rows(1)
    k1r, v1r = k1.astype(np.float16).astype(np.float32), v1.astype(np.float16).astype(np.float32)
    got = nb.attention(q1, k1, k1, v1, [Segment(copy, slice(0, 1))], 1, 0, 0.125, 0.0)
    want = nb.attention(q1, k1r, k1r, v1r, [Segment(rounded, slice(0, 1))], 1, 0, 0.125, 0.0)
    assert np.array_equal(got, want)


GUARD = r'''
import ctypes, mmap
import numpy as np

libc, keep = ctypes.CDLL(None), []


def guarded(a):
    """A copy of `a` that ends where a PROT_NONE page begins: a read past its last byte faults."""
    page = mmap.PAGESIZE
    total = (a.nbytes + page - 1) // page * page + page
    buf = mmap.mmap(-1, total, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(ctypes.c_void_p(base + total - page), page, 0) == 0
    out = np.frombuffer((ctypes.c_char * a.nbytes).from_address(base + total - page - a.nbytes), a.dtype).reshape(a.shape)
    out[...] = a
    keep.append(buf)
    return out
'''

GUARDED_ATTENTION = GUARD + r'''
from fak_engine_cpu.backend import NumbaBackend, NumbaKVCache
from fakcore.engine.backend import Segment

nb = NumbaBackend(activations="int8")
rng = np.random.default_rng(0)
for D in (64, 16, 8):
    for Hkv, H in ((1, 1), (1, 3), (1, 4), (3, 9), (2, 10)):
        for capacity in (64, 200, 1000):
            for window in (0, 37):
                caches = []
                for guard in (False, True):
                    c = NumbaKVCache(1, Hkv, D, half=True)
                    c.reserve(capacity)
                    n = c.capacity - 1  # full after this row: the last tile reads the furthest
                    keys = np.random.default_rng(n).standard_normal((n, Hkv, D)).astype(np.float32)
                    c.write(0, 0, keys, keys, keys)
                    c.commit(list(range(n)))
                    if guard:
                        c.kt, c.vh = guarded(c.kt), guarded(c.vh)
                        c.addresses = (*c.addresses[:3], c.kt.ctypes.data, c.addresses[4])
                        c.half_values = c.vh.ctypes.data
                    caches.append(c)
                q = rng.standard_normal((1, H, D)).astype(np.float32)
                k = rng.standard_normal((1, Hkv, D)).astype(np.float32)
                plain, fenced = (nb.attention(q, k, k, k, [Segment(c, slice(0, 1))], 0, window, 0.125, 0.0) for c in caches)
                assert np.array_equal(plain, fenced), (D, H, capacity, window)
print("ok")
'''


def test_half_attention_reads_nothing_past_its_caches():
    """Attention over half caches loads whole 16-lane vectors; none may reach past the cache's arrays. Each
    case runs against a cache whose half-float keys and values end at a page the process may not read (a read
    past them faults), in a child process so that a fault fails this test rather than the run: full caches of
    several capacities, query groups of 1 to 5 heads (the scores' tiles span 32 to 128 keys), head sizes 64, 16
    and 8, a sliding window (unaligned first keys) or none; the results equal those over ordinary arrays."""
    run_guarded(GUARDED_ATTENTION)


def run_guarded(script: str) -> None:
    """Run a guarded-memory script in a child process: a read past an array faults there, failing the test
    rather than the test run."""
    import subprocess
    import sys

    if not INT8_PATHS:
        pytest.fail("this machine runs no int8 path: its kernels cannot be exercised")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])


GUARDED_LINEAR = GUARD + r'''
from fak_engine_cpu import vnni

isa = next(isa for isa in vnni.ISAS if not vnni.missing_features(isa))
rng = np.random.default_rng(0)
R = 13  # not a multiple of a tile's rows: the single-row tiles run too
SIGNED = {"i8": 128, "i6": 32, "i5": 16}
for layout in ("nib", "u8_32", "u8_16", *(f"{k}_{G}" for k in SIGNED for G in (32, 16))):
    G = 16 if layout.endswith("_16") else 32
    kind = layout.split("_")[0]
    for K in (64, 576, 640, 2048):
        groups = K // G
        if kind in SIGNED:
            q = rng.integers(-SIGNED[kind], SIGNED[kind], (R, groups, G)).astype(np.int8)
        else:
            q = rng.integers(0, 16 if layout == "nib" else 256, (R, groups, G)).astype(np.uint8)
        w = vnni.interleave(q, layout == "nib")
        sets = vnni.Sets.of(K, G)
        for half in (False, True):
            d = rng.random((R, groups)).astype(np.float16)
            d = vnni.padded_groups(d.view(np.uint16) if half else d.astype(np.float32), G)
            m = np.zeros((0, 0), np.float32)
            if kind not in SIGNED:
                m = rng.standard_normal((R, groups)).astype(np.float16)
                m = vnni.padded_groups(m.view(np.uint16) if half else m.astype(np.float32), G)
            kernel = vnni.LINEARS[isa][layout, half]
            for T in (1, 3, 16):
                x = rng.standard_normal((T, K)).astype(np.float32)
                plain, fenced = np.empty((T, R), np.float32), np.empty((T, R), np.float32)
                kernel(w, d, m, x, sets.tables, sets.full, sets.tails, plain)
                kernel(guarded(w), guarded(d), guarded(m) if m.size else m, guarded(x), sets.tables, sets.full, sets.tails, fenced)
                assert np.array_equal(plain, fenced), (layout, K, half, T)
print("ok")
'''


def test_int8_linear_reads_nothing_past_its_arrays():
    """The int8 kernels load whole vectors of weight rows, scales and activations; none may reach past their
    arrays. Every layout, scales as half or float32, row lengths of one to 16+ groups (with tail sets), 1, 3 and
    16 tokens, each array ending at a page the process may not read (child process); the results equal those
    over ordinary arrays."""
    run_guarded(GUARDED_LINEAR)
