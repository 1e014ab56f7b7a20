"""engine-cuda's paged KV memory (backend.KVPages, CudaKVCache): the device holds the cache, the host a mirror.

- the forward pass writes the pages alone: nothing comes back per step, the mirror is brought up only by what
  reads it (a digest, a move), and then holds the pages' bits;
- sequences whose pages interleave in the pool decode, batched, with the bits each has alone in a fresh cache;
- the KV-MMU's moves (drop, copy_prefix, rerotate) run on the device, leaving the mirror behind, and give the
  bits KVCache's host arithmetic gives on the same slots;
- a freed cache's pages go back to the pool and are reused; a full pool grows, the pages it held keep their
  bits; a device out of memory while growing is an error with the numbers.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from fak_engine_cuda.backend import CudaBackend, KVPages
from fakcore.engine.backend import BackendError, Segment
from fakcore.engine.eviction import prefill
from fakcore.engine.kvcache import KVCache
from tests.cuda.support import MODEL_LANES, SIMULATED, TINY, tiny_tensors, transformer

rng = np.random.default_rng(5)
TOKENS = rng.integers(0, TINY.vocab_size, 64).tolist()


@pytest.fixture
def tf():
    """A tiny Llama on a backend of its own, so that its pool's counts are this test's."""
    be = CudaBackend(lanes=MODEL_LANES, max_grid=1 if SIMULATED else 0)
    return transformer(be, tiny_tensors())


def pool(tf) -> KVPages:
    (pages,) = tf.be._pages.values()
    return pages


def test_the_forward_pass_writes_the_pages_alone_and_a_digest_brings_the_mirror_up(tf):
    cache = tf.new_cache()
    prefill(tf, cache, TOKENS[:20], chunk=8)
    n = cache.length
    assert cache.host_upto == 0 and not cache.k[:, :, :n].any()  # nothing came back to the host
    keys, values, pre = cache.device_rows(0, n)
    assert keys.any() and values.any() and pre.any()
    digest = cache.digest()
    assert cache.host_upto == n
    assert np.array_equal(cache.k[:, :, :n], keys) and np.array_equal(cache.v[:, :, :n], values)
    assert np.array_equal(cache.k_pre[:, :, :n], pre)
    prefill(tf, cache, TOKENS[20:24])  # rows past the mirror: it falls behind again, from there
    assert cache.host_upto == n and cache.digest() != digest and cache.host_upto == n + 4


def test_sequences_whose_pages_interleave_decode_with_the_bits_each_has_alone(tf):
    page = tf.be.k.PAGE
    a, b = tf.be.new_cache(tf.cfg, capacity=page), tf.be.new_cache(tf.cfg, capacity=page)
    seq_a, seq_b = TOKENS[:2 * page], TOKENS[2 * page:4 * page]
    for i in range(0, 2 * page, page):  # a and b grow in turn, a page at a time: their pages alternate
        prefill(tf, a, seq_a[i:i + page])
        prefill(tf, b, seq_b[i:i + page])
    assert len(a.page_ids) == len(b.page_ids) == 2
    assert sorted(a.page_ids + b.page_ids) == list(range(4)) and a.page_ids != sorted(a.page_ids + b.page_ids)[:2]
    both = tf.forward(np.asarray([3, 5], np.int64), [Segment(a, slice(0, 1)), Segment(b, slice(1, 2))])
    alone = []
    for seq, nxt in ((seq_a, 3), (seq_b, 5)):
        fresh = tf.new_cache()  # one contiguous run of pages
        prefill(tf, fresh, seq)
        alone.append(tf.forward(np.asarray([nxt], np.int64), [Segment(fresh, slice(0, 1))])[0])
        assert fresh.digest() == (a if seq is seq_a else b).digest()
    assert np.array_equal(both[0], alone[0]) and np.array_equal(both[1], alone[1])


def test_the_moves_run_on_the_device_with_the_bits_of_the_host_arithmetic(tf):
    cache = tf.new_cache()
    prefill(tf, cache, TOKENS[:40], chunk=16)
    host = KVCache(*cache.shape, capacity=64, rope=tf.be.host_rope)  # the same slots, moved on the host
    host.copy_prefix(cache, 40)  # (brings the mirror up once: sync_host)
    assert cache.host_upto == 40
    for c in (cache, host):
        c.drop(5, 19)  # the gap closed: 26 slots left, 21 of them moved
        c.rerotate(5, c.length, tf.rope)
    assert cache.host_upto == 5  # the moves ran on the pages: the mirror is behind from the first moved slot
    for mine, theirs in zip(cache.device_rows(0, cache.length), host._arrays(), strict=True):
        assert np.array_equal(mine, theirs[:, :, :cache.length])
    copied = tf.new_cache()
    copied.copy_prefix(cache, 20)  # device to device
    assert copied.host_upto == 0 and copied.tokens == cache.tokens[:20]
    for mine, theirs in zip(copied.device_rows(0, 20), cache.device_rows(0, 20), strict=True):
        assert np.array_equal(mine, theirs)
    assert cache.digest() == host.digest() and cache.host_upto == cache.length


def test_a_freed_cache_gives_its_pages_back_and_a_full_pool_grows_keeping_them(tf):
    first = tf.new_cache()
    pages = pool(tf)
    total, held = pages.total, pages.used
    assert held == len(first.page_ids) == -(-64 // tf.be.k.PAGE)
    prefill(tf, first, TOKENS[:10])
    before = first.device_rows(0, 10)
    caches = [tf.new_cache() for _ in range(total // held + 1)]  # more than the pool holds: it grows
    assert pages.total > total and pages.used == held * (len(caches) + 1)
    for mine, was in zip(first.device_rows(0, 10), before, strict=True):
        assert np.array_equal(mine, was)
    grown = pages.total
    del caches
    gc.collect()
    assert pages.used == held
    again = [tf.new_cache() for _ in range(grown // held - 1)]  # the freed pages serve these
    assert pages.total == grown and pages.used == held * len(again) + held


def test_a_device_out_of_memory_while_growing_is_an_error_with_the_numbers(tf, monkeypatch):
    tf.new_cache()
    pages = pool(tf)

    def full(*args, **kwargs):
        raise RuntimeError("[2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY")

    monkeypatch.setattr(tf.be.cuda, "device_array", full)
    with pytest.raises(BackendError) as err:
        pages.take(pages.total + 1)
    msg = str(err.value)
    for part in ("KV pages of (2, 1, 16)", "out of device memory", f"from {pages.total} to", "FAK_KV_BUDGET"):
        assert part in msg, msg
