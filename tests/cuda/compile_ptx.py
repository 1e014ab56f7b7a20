"""Compile every engine-cuda kernel to PTX with the real CUDA compiler (NVVM), with or without a GPU.

    python tests/cuda/compile_ptx.py [services/engine-cuda]

Needs numba-cuda and NVVM (`pip install "numba-cuda[cu12]"`). The simulator the tests use never compiles,
so this is what catches, on a machine without a GPU, a kernel numba cannot type or one that computes in
float64 (but the sampler, whose float64 is Sampler's own arithmetic: F64_BY_DESIGN); bench/gpu_check.sh
runs it first. Each signature is the one backend.py (or sampler.py) launches the kernel with.
Not a test module (pytest does not collect it): it needs numba.cuda without the simulator.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import numba.cuda.dispatcher
from numba import cuda
from numba import types as T

# Device functions ask the current GPU for its compute capability; without one, compile for sm_80.
numba.cuda.dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(8, 0))


def array(dtype, ndim):
    return T.Array(dtype, ndim, "C")


F64_BY_DESIGN = {"sample"}  # sampler.py: float64, step for step as engine/sampling.py


def signatures(k, sampler) -> dict:
    f32, u8, u16, i64, flag = T.float32, T.uint8, T.uint16, T.int64, T.boolean
    m32, v32, x3, c4 = array(f32, 2), array(f32, 1), array(f32, 3), array(f32, 4)
    ids, table, p5 = array(i64, 1), array(T.int32, 1), array(f32, 5)  # p5: KV pages (pages, L, Hkv, PAGE, D)
    sigs = {}
    for q, (linear, lookup) in k.QUANT_KERNELS.items():
        sigs[f"linear {q}"] = (linear, (array(u8, 2), v32, m32, v32, flag, m32))
        sigs[f"lookup {q}"] = (lookup, (array(u8, 2), v32, ids, f32, m32))
    sigs |= {
        "linear_f32": (k.linear_f32, (m32, m32, v32, flag, m32)),
        "linear_bits": (k.linear_bits, (array(u16, 2), v32, m32, v32, flag, m32)),
        "lookup_f32": (k.lookup_f32, (m32, ids, f32, m32)),
        "lookup_bits": (k.lookup_bits, (array(u16, 2), v32, ids, f32, m32)),
        "rmsnorm": (k.rmsnorm, (m32, v32, f32, m32)),
        "rope": (k.rope, (x3, ids, m32, m32, x3)),
        "store_kv": (k.store_kv, (x3, x3, x3, i64, i64, p5, p5, p5, table, i64, i64)),
        "pages_to_rows": (k.pages_to_rows, (p5, table, i64, c4)),
        "rows_to_pages": (k.rows_to_pages, (c4, table, i64, p5)),
        "layer_rows": (k.layer_rows, (p5, table, i64, i64, x3)),
        "rows_to_layer": (k.rows_to_layer, (x3, table, i64, i64, p5)),
        "attention": (k.attention, (x3, i64, i64, p5, p5, table, i64, i64, i64, f32, f32, v32, v32, x3, x3)),
        "layernorm": (k.layernorm, (m32, v32, v32, flag, f32, m32)),
        "gelu_erf": (k.gelu_erf, (v32, v32)),
        "gelu_tanh": (k.gelu_tanh, (v32, v32)),
        "swiglu_oai": (k.swiglu_oai, (v32, v32, f32, f32, v32)),
        "scale": (k.scale, (v32, f32, v32)),
        "clamp": (k.clamp, (v32, f32, v32)),
        "gated_silu": (k.gated_silu, (v32, v32, v32)),
        "gated_gelu_tanh": (k.gated_gelu_tanh, (v32, v32, v32)),
        "add_into": (k.add_into, (v32, v32, v32)),
        "softcap": (k.softcap, (v32, f32, v32)),
        "take_rows": (k.take_rows, (m32, ids, m32)),
        "sample": (sampler.sample, (m32, array(T.uint32, 2), ids, array(T.float64, 2), ids, array(T.float64, 2),
                                    array(i64, 2), array(T.float64, 2), array(i64, 2))),
    }
    return sigs


def load(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(folder: str) -> int:
    bad = 0
    for name, (kernel, sig) in signatures(load(f"{folder}/kernels.py"), load(f"{folder}/sampler.py")).items():
        try:
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(8, 0))
        except Exception as exc:
            bad += 1
            print(f"FAIL {name}: {type(exc).__name__}: {str(exc)[:1500]}")
            continue
        f64 = ptx.count(".f64")
        wrong = bool(f64) and name not in F64_BY_DESIGN
        bad += wrong
        print(f"{'FAIL' if wrong else 'ok  '} {name:18s} {len(ptx):6d} chars of PTX, {f64} float64 ops")
    print(f"compile_ptx: {bad} kernel(s) failed" if bad else
          f"compile_ptx: every kernel compiles, float32 only (but {', '.join(sorted(F64_BY_DESIGN))})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "services/engine-cuda"))
