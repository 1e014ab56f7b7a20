"""engine-cpu's Gated DeltaNet kernels (fak_engine_cpu/deltanet.py) against the host reference
(fakcore.engine.deltanet.delta_scan): the same outputs, state and checkpoints within BOUND, the conv state bit
for bit, and the same bits however the tokens are split into calls and whatever the thread count.

BOUND: the kernels run the reference's float32 operations in its order, except exp and log1p (theirs against
numpy's, an ulp apart at times: ~1e-7 relative). The recurrence does not amplify that: exp(g) < 1 and, k being
unit length, (I - beta k k^T) S shrinks S for beta in (0, 1). Measured: at most 4e-7 of the largest value, up
to 200 tokens, on these shapes and Qwen3-Next-80B's; 1e-5 leaves room for other inputs and is still far below
any wrong formula (a missing 1/sqrt(dk) or a swapped key head is off by O(1))."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from fak_engine_cpu.backend import NumbaBackend
from fak_engine_cpu.deltanet import JB, deltanet_scan
from fakcore.engine.deltanet import delta_scan

BOUND = 1e-5  # of the largest |value| of each array (see above)
EVERY = 4

# (hk, hv, dk, dv, K): grouped value heads; one value head per key head; dv over a column block (JB) with a
# partial one and dk over numpy's 128-element pairwise block
SHAPES = [(2, 4, 16, 8, 4), (3, 3, 16, 8, 4), (1, 2, 136, JB + 8, 3)]


def inputs(T: int, hk: int, hv: int, dk: int, dv: int, K: int, start: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    f32 = np.float32
    C = 2 * hk * dk + hv * dv
    a = rng.standard_normal((T, hv)).astype(f32)
    a[0, 0] = 25.0  # softplus above its threshold: x itself
    return dict(mixed=rng.standard_normal((T, C)).astype(f32), z=rng.standard_normal((T, hv, dv)).astype(f32),
                b=rng.standard_normal((T, hv)).astype(f32), a=a,
                conv_w=(0.5 * rng.standard_normal((K, C))).astype(f32), A=-np.exp(rng.standard_normal(hv)).astype(f32),
                dt_bias=rng.standard_normal(hv).astype(f32), norm=rng.standard_normal(dv).astype(f32),
                conv=rng.standard_normal((K - 1, C)).astype(f32), S=(0.1 * rng.standard_normal((hv, dk, dv))).astype(f32),
                hk=hk, eps=f32(1e-6), start=start, every=EVERY)


def close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.abs(got - want).max(initial=0.0) <= BOUND * np.abs(want).max(initial=1.0)


def same(x, y) -> None:
    """Bit for bit: outputs, conv state, S and every checkpoint."""
    for u, v in zip(x[:3], y[:3], strict=True):
        assert np.array_equal(u, v)
    assert sorted(x[3]) == sorted(y[3])
    for p in x[3]:
        assert np.array_equal(x[3][p][0], y[3][p][0]) and np.array_equal(x[3][p][1], y[3][p][1])


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "hk{}-hv{}-dk{}-dv{}-K{}".format(*s))
@pytest.mark.parametrize(("T", "start"), [(1, 7), (37, 5)])
def test_matches_reference(shape, T, start):
    x = inputs(T, *shape, start=start)
    before = {k: v.copy() for k, v in x.items() if isinstance(v, np.ndarray)}
    out, conv, S, passed = deltanet_scan(**x)
    for k, v in before.items():  # the inputs untouched
        assert np.array_equal(x[k], v), k
    r_out, r_conv, r_S, r_passed = delta_scan(**x)
    close(out, r_out)
    close(S, r_S)
    assert np.array_equal(conv, r_conv)  # the conv state is inputs moved along: exact
    assert sorted(passed) == sorted(r_passed) == [p for p in range(start + 1, start + T + 1) if p % EVERY == 0]
    for p, (c, s) in passed.items():
        assert np.array_equal(c, r_passed[p][0])
        close(s, r_passed[p][1])


def tiled_layout(x: dict, hk: int, hv: int, dk: int, dv: int) -> tuple[dict, np.ndarray]:
    """The same layer with its value heads as llama.cpp's qwen35 converter stores them: tiled position p holds
    HuggingFace's (grouped) head (p % Hk) * r + p // Hk. Returns the inputs so laid out and that permutation."""
    r = hv // hk
    perm = np.array([(p % hk) * r + p // hk for p in range(hv)])
    qk = 2 * hk * dk
    channels = np.concatenate([np.arange(qk), qk + (perm[:, None] * dv + np.arange(dv)).reshape(-1)])
    y = dict(x, mixed=x["mixed"][:, channels], conv_w=x["conv_w"][:, channels], conv=x["conv"][:, channels],
             z=x["z"][:, perm], b=x["b"][:, perm], a=x["a"][:, perm], A=x["A"][perm], dt_bias=x["dt_bias"][perm],
             S=x["S"][perm])
    return {k: np.ascontiguousarray(v) if isinstance(v, np.ndarray) else v for k, v in y.items()}, perm


@pytest.mark.parametrize("scan", [delta_scan, deltanet_scan], ids=["reference", "kernel"])
def test_tiled_value_heads_read_the_key_head_they_are_told(scan):
    """key_head maps value heads to key heads. A layer stored tiled and read with j % Hk gives, head for head, what
    the grouped layer gives read with j // r (the default): the same bits, only the heads' order differs."""
    hk, hv, dk, dv = 2, 6, 16, 8
    x = inputs(23, hk, hv, dk, dv, 4, start=3)
    y, perm = tiled_layout(x, hk, hv, dk, dv)
    grouped, tiled = scan(**x), scan(**y, key_head=np.arange(hv) % hk)
    assert np.array_equal(tiled[0], grouped[0][:, perm])
    assert np.array_equal(tiled[2], grouped[2][perm])
    assert not np.array_equal(scan(**y)[0], tiled[0])  # read grouped, the tiled layout is another layer


@pytest.mark.parametrize("shape", SHAPES[:2], ids=lambda s: "hk{}-hv{}".format(*s[:2]))
def test_split_calls_and_threads_give_the_same_bits(shape):
    """Tokens [0:5] then [5:T] from the first call's state: the one call's bits. So with one thread."""
    T, start, cut = 37, 5, 5
    x = inputs(T, *shape, start=start)
    whole = deltanet_scan(**x)
    head = deltanet_scan(**{**x, **{k: x[k][:cut] for k in ("mixed", "z", "b", "a")}})
    tail = deltanet_scan(**{**x, **{k: x[k][cut:] for k in ("mixed", "z", "b", "a")}, "conv": head[1], "S": head[2],
                            "start": start + cut})
    same(whole, (np.concatenate([head[0], tail[0]]), tail[1], tail[2], {**head[3], **tail[3]}))
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        same(whole, deltanet_scan(**x))
    finally:
        numba.set_num_threads(threads)


def test_numba_backend_brings_it():
    """gated_deltanet takes the backend's deltanet_scan over the host reference."""
    x = inputs(9, *SHAPES[0], start=0)
    same(NumbaBackend().deltanet_scan(*x.values()), deltanet_scan(**x))
