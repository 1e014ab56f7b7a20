"""`python -m fak_engine_cuda.devices`: the GPUs this process can use, as `fak up --cuda` counts them.

    exit 0, one line per GPU:       0<TAB>NVIDIA H100 80GB HBM3
    exit 1, one line saying why:    no CUDA device: numba.cuda finds no usable GPU or driver (…)

It asks numba.cuda, as the worker will, under the CUDA_VISIBLE_DEVICES it was given, so a GPU counted here
is one a worker can open. numba's simulator (NUMBA_ENABLE_CUDASIM=1) is a CPU, not a GPU: the launcher runs
this with it off. Only numba.cuda is imported: the answer takes about a second.
"""

from __future__ import annotations

import contextlib
import io
import sys


def first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def visible() -> list[str]:
    """The names of the GPUs numba.cuda sees, in index order; RuntimeError("no CUDA device: …") for none."""
    from numba import cuda

    try:
        available = cuda.is_available()
        gpus = list(cuda.gpus) if available else []
    except Exception as exc:  # the driver refuses: say why, in one line
        raise RuntimeError(f"no CUDA device: {first_line(exc)}") from exc
    if not gpus:
        reason = ""
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # detect() prints its findings: this answer is ours
                cuda.detect()
        except Exception as exc:
            reason = f" ({first_line(exc)})"
        raise RuntimeError(f"no CUDA device: numba.cuda finds no usable GPU or driver{reason}")
    names = []
    for gpu in gpus:
        name = getattr(gpu, "name", b"numba CUDA simulator")
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names


def main() -> int:
    try:
        names = visible()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    for i, name in enumerate(names):
        print(f"{i}\t{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
