"""Gated DeltaNet's recurrence: the numpy reference (fakcore.engine.deltanet.delta_scan) against engine-cpu's
numba kernel (fak_engine_cpu.deltanet.deltanet_scan), one linear layer after its projections.

    python -m bench deltanet [--shape qwen3-next-80b] [--tokens 512] [--steps 64] [--repeat 5] [--threads 2] [--quick]

Both run in this process on the same seeded inputs. Prefill: --tokens tokens in one call from the zero state.
Decode: --steps single-token calls from the state after that prefill, each carrying its state to the next, so
every call is one token. The kernel's first call (numba compiles it, or loads it from its cache) is timed
apart, and one untimed prefill follows it (the first touch of arrays that size costs page faults). Per case: median and p90 ms per call over --repeat runs (decode: over every step of every run), tokens/s,
and the kernel's speed-up over the reference. The outputs and the final state must agree within BOUND of each
array's largest |value| (tests/unit/engine/test_deltanet_kernel.py says why that bound); else exit 1.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.engine import commit, machine
from bench.llamacpp import cpu_flags

BOUND = 1e-5  # max |kernel - reference| over the reference's max |value|, per array

# (hk, hv, dk, dv, K): key heads, value heads, their dims, the conv's kernel
SHAPES = {
    "qwen3-next-80b": (16, 32, 128, 128, 4),  # Qwen3-Next-80B-A3B's linear layers
    "qwen3.5-0.8b": (16, 16, 128, 128, 4),  # a small hybrid's: one value head per key head
    "tiny": (2, 4, 16, 8, 4),  # --quick's: a smoke run of a few seconds
}
SIMD = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")  # the flags worth naming


def inputs(T: int, hk: int, hv: int, dk: int, dv: int, K: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One layer's weights and T tokens' projections. The decay is drawn as HuggingFace initialises it (A in
    [1, 16], dt = softplus(a + dt_bias) around 1e-3 … 1e-1), so S remembers for many tokens and neither blows up
    nor decays to denormals; the rest as the kernel test draws it."""
    f32 = np.float32
    C = 2 * hk * dk + hv * dv
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), hv))
    return dict(weights=dict(conv_w=(0.5 * rng.standard_normal((K, C))).astype(f32),
                             A=-rng.uniform(1.0, 16.0, hv).astype(f32),
                             dt_bias=(dt + np.log(-np.expm1(-dt))).astype(f32),  # softplus(dt_bias) = dt
                             norm=rng.standard_normal(dv).astype(f32)),
                tokens=dict(mixed=rng.standard_normal((T, C)).astype(f32), z=rng.standard_normal((T, hv, dv)).astype(f32),
                            b=rng.standard_normal((T, hv)).astype(f32), a=rng.standard_normal((T, hv)).astype(f32)))


def rel_diff(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max(initial=0.0) / max(float(np.abs(want).max(initial=0.0)), 1e-30))


def prefill(scan, weights: dict, tokens: dict, state: dict, repeat: int) -> tuple[list[float], tuple]:
    """repeat calls over all the tokens from `state`: each call's seconds, and the last call's result."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = scan(**tokens, **weights, **state, start=0)
        times.append(time.perf_counter() - t0)
    return times, result


def decode(scan, weights: dict, tokens: dict, state: dict, start: int, repeat: int) -> tuple[list[float], tuple]:
    """repeat runs of one call per token from `state`, each carrying conv and S on: every call's seconds, and the
    last run's outputs (steps, Hv, dv) and final conv and S."""
    steps = len(tokens["mixed"])
    times = []
    for _ in range(repeat):
        conv, S, outs = state["conv"], state["S"], []
        for i in range(steps):
            step = {k: v[i:i + 1] for k, v in tokens.items()}
            t0 = time.perf_counter()
            out, conv, S, _ = scan(**step, **weights, conv=conv, S=S, hk=state["hk"], eps=state["eps"],
                                   start=start + i, every=state["every"])
            times.append(time.perf_counter() - t0)
            outs.append(out)
    return times, (np.concatenate(outs), conv, S)


def stats(times: list[float], tokens_per_call: int) -> tuple[float, float, float]:
    """(median ms, p90 ms, tokens/s at the median) per call."""
    med, p90 = float(np.median(times)), float(np.percentile(times, 90))
    return med * 1e3, p90 * 1e3, tokens_per_call / med


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench deltanet")
    ap.add_argument("--shape", choices=SHAPES, default="qwen3-next-80b")
    ap.add_argument("--tokens", type=int, default=512, help="prefill length")
    ap.add_argument("--steps", type=int, default=64, help="decode steps per run")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="numba threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="smoke run: the tiny shape, 16 tokens, 8 steps, 2 repeats")
    args = ap.parse_args(argv)
    if args.quick:
        args.shape, args.tokens, args.steps, args.repeat = "tiny", 16, 8, 2

    import numba

    from fak_engine_cpu.deltanet import deltanet_scan
    from fakcore.engine.deltanet import CHECKPOINT_EVERY, delta_scan

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    hk, hv, dk, dv, K = SHAPES[args.shape]
    rng = np.random.default_rng(args.seed)
    x = inputs(args.tokens, hk, hv, dk, dv, K, rng)
    weights, pre_tokens = x["weights"], x["tokens"]
    dec_tokens = inputs(args.steps, hk, hv, dk, dv, K, rng)["tokens"]
    f32 = np.float32
    zero = dict(conv=np.zeros((K - 1, 2 * hk * dk + hv * dv), f32), S=np.zeros((hv, dk, dv), f32), hk=hk,
                eps=f32(1e-6), every=CHECKPOINT_EVERY)

    one = {k: v[:1] for k, v in pre_tokens.items()}
    t0 = time.perf_counter()
    deltanet_scan(**one, **weights, **zero, start=0)
    first_call = time.perf_counter() - t0
    deltanet_scan(**pre_tokens, **weights, **zero, start=0)  # and one untimed prefill: its arrays' first touch
    delta_scan(**one, **weights, **zero, start=0)  # the reference's first call too, out of the timings

    cases = {}
    ref_times, ref_pre = prefill(delta_scan, weights, pre_tokens, zero, args.repeat)
    ker_times, ker_pre = prefill(deltanet_scan, weights, pre_tokens, zero, args.repeat)
    cases[f"prefill T={args.tokens}"] = (ref_times, ker_times, args.tokens)
    after = {**zero, "conv": ref_pre[1], "S": ref_pre[2]}  # both decode from the reference's prefill state
    ref_times, ref_dec = decode(delta_scan, weights, dec_tokens, after, args.tokens, args.repeat)
    ker_times, ker_dec = decode(deltanet_scan, weights, dec_tokens, after, args.tokens, args.repeat)
    cases[f"decode T=1 x {args.steps}"] = (ref_times, ker_times, 1)

    flags = cpu_flags()
    print(f"# Gated DeltaNet recurrence, {args.shape} (Hk {hk}, Hv {hv}, dk {dk}, dv {dv}, conv K {K}), one layer")
    print(f"machine: {machine()}; SIMD: {' '.join(f for f in SIMD if f in flags) or 'none named'}; "
          f"numba threads {numba.get_num_threads()}; commit {commit()}")
    print(f"kernel's first call (numba compile, or load from its cache): {first_call:.2f} s; "
          f"{args.repeat} runs per case\n")
    print("| case | reference median ms | p90 ms | tok/s | kernel median ms | p90 ms | tok/s | speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = []
    for name, (ref, ker, per_call) in cases.items():
        r, k = stats(ref, per_call), stats(ker, per_call)
        ratios.append(f"{name.split()[0]} {r[0] / k[0]:.1f}x")
        print(f"| {name} | {r[0]:.2f} | {r[1]:.2f} | {r[2]:.0f} | {k[0]:.3f} | {k[1]:.3f} | {k[2]:.0f} | {r[0] / k[0]:.1f}x |")
    print(f"\nkernel / reference speed-up (medians): {', '.join(ratios)}")

    diffs = {f"{case} {arr}": rel_diff(got, want)
             for case, ker, ref in (("prefill", ker_pre, ref_pre), ("decode", ker_dec, ref_dec))
             for arr, got, want in zip(("out", "conv", "S"), ker[:3], ref[:3], strict=True)}
    print(f"max |kernel - reference| / max |reference|: {', '.join(f'{n} {d:.1e}' for n, d in diffs.items())} "
          f"(bound {BOUND:.0e}); max |S| after prefill {np.abs(ref_pre[2]).max():.3g}, after decode "
          f"{np.abs(ref_dec[2]).max():.3g}")
    if (worst := max(diffs.values())) > BOUND:
        print(f"FAIL: the kernel is {worst:.1e} off the reference, over the bound {BOUND:.0e}")
        return 1
    return 0
