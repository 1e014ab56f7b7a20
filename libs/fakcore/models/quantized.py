"""A HuggingFace checkpoint whose config.json has a `quantization_config`: GPTQ or AWQ 4-bit linears.

Each quantized linear's `<layer>.qweight`, `.qzeros`, `.scales` (and GPTQ's `.g_idx`) become one
`<layer>.weight` tensor of fak's Q4_G type (formats/quants/grouped.py), kept 4-bit; everything else (the
embedding, norms, an unquantized head, `modules_to_not_convert`) passes through. The family file then names
the tensors as for any checkpoint. Layouts: formats/gptq.py, formats/awq.py.

Supported: quant_method "gptq" (checkpoint_format "gptq", the v1 files, or "gptq_v2"; sym or not; desc_act
with any g_idx whose groups fill whole 32-column blocks) and "awq" (version "gemm", zero_point true); bits 4;
group_size a multiple of 32 (GPTQ also -1: one group per row). Anything else is a ConfigError naming the file
and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fakcore.formats import awq, gptq
from fakcore.formats.tensor import Tensor
from fakcore.models.config import ConfigError
from fakcore.models.shapes import WeightError

PARTS = {"gptq": ("qweight", "qzeros", "scales", "g_idx"), "awq": ("qweight", "qzeros", "scales")}
OPTIONAL = ("g_idx",)


def repack_quantized(hf: Mapping[str, Any], tensors: Mapping[str, Tensor], config_file: str) -> dict[str, Tensor]:
    """`tensors` with every quantized linear as one Q4_G `<layer>.weight`; unchanged without quantization_config."""
    qc = hf.get("quantization_config")
    if qc is None:
        return dict(tensors)
    field = f"{config_file}: quantization_config"
    if not isinstance(qc, dict):
        raise ConfigError(f"{field} is not a JSON object")
    method = qc.get("quant_method")
    if method not in PARTS:
        raise ConfigError(f"{field}.quant_method = {method!r} is not supported (gptq, awq)")
    bits = qc.get("bits", qc.get("w_bit"))
    if bits != 4:
        raise ConfigError(f"{field}.bits = {bits!r} is not supported (4 only)")
    group_size = qc.get("group_size", qc.get("q_group_size"))
    allowed = (-1,) if method == "gptq" else ()
    if type(group_size) is not int or not (group_size in allowed or (group_size > 0 and group_size % 32 == 0)):
        raise ConfigError(f"{field}.group_size = {group_size!r} is not supported (a multiple of 32"
                          f"{', or -1' if allowed else ''})")
    if method == "gptq":
        fmt = qc.get("checkpoint_format", qc.get("format", "gptq"))
        if fmt not in gptq.ZERO_OFFSET:
            raise ConfigError(f"{field}.checkpoint_format = {fmt!r} is not supported ({', '.join(gptq.ZERO_OFFSET)})")
        zero_offset = gptq.ZERO_OFFSET[fmt]
    else:
        version = qc.get("version", "gemm")
        if not isinstance(version, str) or version.lower() != "gemm":
            raise ConfigError(f"{field}.version = {version!r} is not supported (gemm; gemv, gemv_fast, marlin, "
                              f"exllama and ipex pack differently)")
        if qc.get("zero_point", True) is not True:
            raise ConfigError(f"{field}.zero_point = {qc['zero_point']!r} is not supported (true)")
        zero_offset = 0

    source = next(iter(tensors.values())).source if tensors else config_file
    out: dict[str, Tensor] = {}
    parts = PARTS[method]
    layers = [name[: -len(".qweight")] for name in tensors if name.endswith(".qweight")]
    consumed = {f"{layer}.{p}" for layer in layers for p in parts}
    for name, t in tensors.items():
        if name not in consumed:
            out[name] = t
    for layer in layers:
        found = {p: tensors.get(f"{layer}.{p}") for p in parts}
        missing = [p for p, t in found.items() if t is None and p not in OPTIONAL]
        if missing:
            raise WeightError(f"{tensors[layer + '.qweight'].source}: missing tensor '{layer}.{missing[0]}' "
                              f"({method} needs {', '.join(p for p in parts if p not in OPTIONAL)})")
        out[f"{layer}.weight"] = _linear(method, layer, found, group_size, zero_offset, source)
    return out


def _linear(method: str, layer: str, found: dict[str, Tensor | None], group_size: int, zero_offset: int,
            source: str) -> Tensor:
    qw, qz, sc, gi = found["qweight"], found["qzeros"], found["scales"], found.get("g_idx")
    assert qw is not None and qz is not None and sc is not None
    where = qw.source or source
    for t in (qw, qz) + ((gi,) if gi is not None else ()):
        if t.qtype != "I32":
            raise WeightError(f"{where}: tensor {t.name!r} is {t.qtype}, {method} stores it as I32")
    if sc.qtype not in ("F16", "BF16", "F32") or len(sc.shape) != 2:
        raise WeightError(f"{where}: tensor {sc.name!r} is {sc.qtype} {sc.shape}, expected a float (groups, out) matrix")
    if len(qw.shape) != 2:
        raise WeightError(f"{where}: tensor {qw.name!r} has shape {qw.shape}, expected 2 dims")
    if method == "gptq":
        in_features, out_features = qw.shape[0] * gptq.PACK, qw.shape[1]
    else:
        in_features, out_features = qw.shape[0], qw.shape[1] * gptq.PACK
    size = in_features if group_size == -1 else group_size
    n_groups = -(-in_features // size)
    expected = {qz.name: (n_groups, out_features // gptq.PACK), sc.name: (n_groups, out_features)}
    if gi is not None:
        expected[gi.name] = (in_features,)
    for t in (qz, sc) + ((gi,) if gi is not None else ()):
        if t.shape != expected[t.name]:
            raise WeightError(f"{where}: tensor {t.name!r} has shape {t.shape}, expected {expected[t.name]} "
                              f"for {qw.name!r} {qw.shape} with group_size {group_size}")
    qweight, qzeros = _ints(qw), _ints(qz)
    scales = sc.dequantize()
    name = f"{layer}.weight"
    if method == "gptq":
        g_idx = gptq.trivial_g_idx(in_features, group_size)
        if gi is not None:
            g_idx = _ints(gi)
            if g_idx.size and (g_idx.min() < 0 or g_idx.max() >= n_groups):
                raise WeightError(f"{where}: tensor {gi.name!r} holds groups outside 0..{n_groups - 1}")
        t = gptq.to_q4g(name, qweight, qzeros, scales, g_idx, zero_offset, where)
    else:
        t = awq.to_q4g(name, qweight, qzeros, scales, size, where)
    if t is None:
        what = f"tensor {gi.name!r}" if gi is not None else f"tensor {qw.name!r} (group_size {group_size})"
        raise ConfigError(f"{where}: {what}: its groups do not fill whole 32-column blocks in any column order, "
                          f"which fak's 4-bit kernels need")
    return t


def _ints(t: Tensor) -> np.ndarray:
    return t.raw.view("<i4").reshape(t.shape)
