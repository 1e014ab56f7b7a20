"""`python -m bench engine --cpu avx2`: fak's kernels and llama.cpp both built for an older CPU on this one."""

from __future__ import annotations

from bench import engine, llamacpp


def test_llama_cpp_builds_for_the_named_cpu_only():
    flags = dict(f[2:].split("=") for f in llamacpp.cmake_flags(llamacpp.CPUS["avx2"]) if f.startswith("-DGGML_"))
    assert (flags["GGML_AVX2"], flags["GGML_FMA"], flags["GGML_F16C"], flags["GGML_NATIVE"]) == ("ON", "ON", "ON", "OFF")
    assert all(flags[k] == "OFF" for k in flags if k.startswith(("GGML_AVX512", "GGML_AMX")) or k == "GGML_AVX_VNNI")


def test_every_cpu_has_a_numba_target_and_a_llama_cpp_build():
    assert set(engine.CODE_FOR) == set(llamacpp.CPUS)
    for cpu, (name, features) in engine.CODE_FOR.items():
        named = {f[1:] for f in features.split(",") if f.startswith("+")}
        assert name and named == llamacpp.CPUS[cpu]  # numba's features are the build's (same names for these)
