"""llama.cpp as a benchmark reference: find it, or build it from the llama-cpp-python sdist's vendored source.

The build lives outside the repository (FAK_BENCH_DIR, default ~/.cache/fak/bench) and is never committed.
It is a comparison bar only: nothing in fak calls it.

The build enables every x86 SIMD level the machine reports except AMX: AMX needs a per-process permission
from the kernel that some VMs never grant (llama.cpp's AMX kernels then die with SIGILL), and fak has no AMX
path either, so leaving it out keeps the comparison matched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

SDIST = "llama-cpp-python==0.3.36"


def bench_dir() -> Path:
    return Path(os.environ.get("FAK_BENCH_DIR") or Path.home() / ".cache" / "fak" / "bench")


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# Older CPUs to build for on a newer one (/proc/cpuinfo's names of what each has; `python -m bench engine --cpu`)
CPUS = {"avx2": {"avx", "avx2", "fma", "f16c"}}


def cmake_flags(flags: set[str] | None = None) -> list[str]:
    """The build's instruction sets: this machine's (flags None), or the set `flags` names."""
    f = cpu_flags() if flags is None else flags
    on = lambda cond: "ON" if cond else "OFF"  # noqa: E731
    return [
        "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
        f"-DGGML_AVX={on('avx' in f)}", f"-DGGML_AVX2={on('avx2' in f)}", f"-DGGML_FMA={on('fma' in f)}",
        f"-DGGML_F16C={on('f16c' in f)}", f"-DGGML_AVX512={on('avx512f' in f)}",
        f"-DGGML_AVX512_VNNI={on('avx512_vnni' in f)}", f"-DGGML_AVX512_BF16={on('avx512_bf16' in f)}",
        f"-DGGML_AVX512_VBMI={on('avx512vbmi' in f)}", f"-DGGML_AVX_VNNI={on('avx_vnni' in f)}",
        "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF",
    ]


def llama_bench_binary(log=print, cpu: str = "host") -> Path:
    """The llama-bench executable: FAK_LLAMA_BENCH if set (for this machine's build), else a cached build, else
    build it now (~10 min). cpu: "host", or one of CPUS (a build of its own, for that CPU's instructions)."""
    if os.environ.get("FAK_LLAMA_BENCH") and cpu == "host":
        return Path(os.environ["FAK_LLAMA_BENCH"])
    root = bench_dir()
    build = "build" if cpu == "host" else f"build-{cpu}"
    binary = root / "llama.cpp" / build / "bin" / "llama-bench"
    if binary.exists():
        return binary
    root.mkdir(parents=True, exist_ok=True)
    src = root / "llama.cpp"
    if not (src / "CMakeLists.txt").exists():
        log(f"llama.cpp: fetching the {SDIST} sdist (its vendored llama.cpp is the reference)")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", str(root), SDIST],
                       check=True)
        sdist = next(root.glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            tar.extractall(root, filter="data")
        vendored = next(root.glob("llama_cpp_python-*/vendor/llama.cpp"))
        shutil.move(str(vendored), str(src))
    log(f"llama.cpp: building llama-bench{'' if cpu == 'host' else ' for ' + cpu} (about 10 minutes on 2 cores)")
    subprocess.run(["cmake", "-S", str(src), "-B", str(src / build), *cmake_flags(None if cpu == "host" else CPUS[cpu])],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(src / build), "--target", "llama-bench", "-j", str(os.cpu_count() or 2)], check=True,
                   stdout=subprocess.DEVNULL)
    return binary


def run_llama_bench(model: Path, threads: int, pp: int = 512, tg: int = 128, reps: int = 3, cpu: str = "host") -> dict[str, float]:
    """{'pp512': tokens/s, 'tg128': tokens/s} from llama-bench's JSON output (built for `cpu`: llama_bench_binary)."""
    binary = llama_bench_binary(cpu=cpu)
    env = {**os.environ, "LD_LIBRARY_PATH": f"{binary.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    out = subprocess.run([str(binary), "-m", str(model), "-t", str(threads), "-p", str(pp), "-n", str(tg), "-r", str(reps),
                          "-o", "json"], check=True, capture_output=True, text=True, env=env)
    results = {}
    for row in json.loads(out.stdout):
        if row.get("n_prompt") and not row.get("n_gen"):
            results[f"pp{row['n_prompt']}"] = float(row["avg_ts"])
        elif row.get("n_gen") and not row.get("n_prompt"):
            results[f"tg{row['n_gen']}"] = float(row["avg_ts"])
    return results
