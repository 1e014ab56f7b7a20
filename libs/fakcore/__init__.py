"""fakcore: everything the fak services share (bus protocol, settings, models, engine, policy, CLI)."""

import os
import sys

__version__ = "0.1.0"


def _full_vectors() -> None:
    """On AVX-512 CPUs, numba's code for the whole process uses 512-bit vectors (LLVM prefers 256 there, to
    spare older chips' clock throttling; fak's kernels run about twice as fast with 512).

    It must be decided before numba compiles (or loads from its cache) anything in the process: its CPU
    target is built once, with the features of that moment, and the vector width changes the order of the
    kernels' float reductions. So a process that screened a text (screening's numba passes) before it made
    an engine backend computed other bits than an engine worker with the same weights (found as a probe's
    scores differing between the bench and the worker by up to 0.3 in a logit). Hence here, where every fak
    process starts, and before numba is imported where possible. NUMBA_CPU_FEATURES, when set, wins."""
    if os.environ.get("NUMBA_CPU_FEATURES") or os.environ.get("NUMBA_DISABLE_JIT") == "1":
        return
    from llvmlite import binding as llvm

    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" not in features:
        return
    if "numba" in sys.modules:  # imported first by the caller: its CPU target may still be unbuilt
        import numba

        if not numba.config.CPU_FEATURES:
            numba.config.CPU_FEATURES = features + ",-prefer-256-bit"
    else:
        os.environ["NUMBA_CPU_FEATURES"] = features + ",-prefer-256-bit"  # numba reads it on import


_full_vectors()
