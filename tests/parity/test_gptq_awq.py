"""GPTQ and AWQ checkpoints against HuggingFace: a random Llama whose linears are quantized by fak's packers
(formats/gptq.py, formats/awq.py) and saved as the real formats name them (`<layer>.qweight`, `.qzeros`,
`.scales`, `.g_idx`; embeddings, norms and the head unquantized), with a `quantization_config` in config.json.
The HuggingFace model runs the dequantized weights; fak (reference and numba backends) must match it within
the bounds every parity test asserts (claim 16's), and numba must keep the weights 4-bit ("nib" QMatrix).

Wider than support.py's tiny Llama (hidden 128, ffn 256) so that group size 128 spans four 32-element blocks.
Act-order files get one input permutation per input the linears share (q/k/v, gate/up), as GPTQ's Hessian
order gives, and one case with a permutation per linear, which numba cannot fuse.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
import torch

from fakcore.formats import awq, gptq
from fakcore.models.checkpoint import load_checkpoint
from fakcore.models.config import ConfigError
from fakcore.models.shapes import WeightError

from .support import COMMON, SEQ, fak_transformer, measure, save_hf, tokens_for
from .test_parity_families import CACHED_BOUND, LOGITS_BOUND

WIDE = COMMON | dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                     num_hidden_layers=2, tie_word_embeddings=False,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj")
SHARED_INPUT = {"self_attn.k_proj": "self_attn.q_proj", "self_attn.v_proj": "self_attn.q_proj",
                "mlp.up_proj": "mlp.gate_proj"}


def build_model(seed: int = 0) -> torch.nn.Module:
    """support.build_hf_model's recipe for the wide Llama: random init, norm gains moved off one."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **WIDE), attn_implementation="eager",
                                             dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return model


def export_quantized(tmp: Path, method: str, group_size: int, sym: bool = False, act_order: str = "") -> tuple:
    """(the HF model with dequantized linears, the checkpoint directory). act_order: "" none, "shared" one
    permutation per shared input, "each" one per linear."""
    model = build_model()
    rng = np.random.default_rng(7)
    hf_dir = save_hf(model, tmp / "hf")
    tensors: dict[str, np.ndarray] = {}
    perms: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            module, _, leaf = name.rpartition(".")
            kind = module.split(".", 3)[-1] if module.startswith("model.layers.") else ""
            if kind not in LINEARS:
                tensors[name] = p.numpy().copy()
                continue
            w = p.numpy()
            if method == "awq":
                packed, deq = awq.quantize(w, group_size)
            else:
                perm = None
                if act_order:
                    key = module if act_order == "each" else module.replace(kind, SHARED_INPUT.get(kind, kind))
                    perm = perms.setdefault(key, rng.permutation(w.shape[1]))
                packed, deq = gptq.quantize(w, group_size, sym, perm)
            p.copy_(torch.from_numpy(deq))
            tensors |= {f"{module}.{part}": value for part, value in packed.items()}
    safetensors.numpy.save_file(tensors, hf_dir / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((hf_dir / "config.json").read_text())
    if method == "awq":
        config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": group_size,
                                         "zero_point": True, "version": "gemm"}
    else:
        config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": group_size,
                                         "desc_act": bool(act_order), "sym": sym, "checkpoint_format": "gptq"}
    (hf_dir / "config.json").write_text(json.dumps(config))
    return model, hf_dir


CASES = {  # id: (method, group_size, sym, act_order)
    "gptq-g32-sym": ("gptq", 32, True, ""),
    "gptq-g128-asym": ("gptq", 128, False, ""),
    "gptq-g32-asym-actorder": ("gptq", 32, False, "shared"),
    "gptq-g128-sym-actorder": ("gptq", 128, True, "shared"),
    "gptq-g64-asym-actorder-each": ("gptq", 64, False, "each"),
    "awq-g32": ("awq", 32, False, ""),
    "awq-g128": ("awq", 128, False, ""),
}


@pytest.mark.parametrize("backend", ["reference", "numba"])
@pytest.mark.parametrize("case", list(CASES))
def test_quantized_logits_match_huggingface(case, backend, tmp_path):
    model, path = export_quantized(tmp_path, *CASES[case])
    m = measure(f"llama {case} / {backend}", path, model, tokens_for(), backend=backend)
    assert m.logits_max_abs <= LOGITS_BOUND
    assert m.argmax_agree == m.positions == SEQ
    assert m.cached_max_abs <= CACHED_BOUND


@pytest.mark.parametrize("case", ["gptq-g128-sym-actorder", "gptq-g64-asym-actorder-each", "awq-g32"])
def test_numba_keeps_the_linears_4bit(case, tmp_path):
    from fak_engine_cpu.backend import QMatrix

    method, group_size, _, act_order = CASES[case]
    _, path = export_quantized(tmp_path, *CASES[case])
    ckpt = load_checkpoint(path)
    assert ckpt.tensors["blk.0.attn_q.weight"].qtype == "Q4_G"
    assert ckpt.tensors["token_embd.weight"].qtype == "F32" and ckpt.tensors["output.weight"].qtype == "F32"
    tf = fak_transformer(ckpt, "numba")
    for L in tf.w.layers:
        mats = [m for m in (L.wqkv, L.wq, L.wk, L.wv, L.wo, L.w_gate_up, L.w_gate, L.w_up, L.w_down) if m is not None]
        assert len(mats) == (7 if act_order == "each" else 4)  # fused where the columns agree
        for m in mats:
            assert isinstance(m, QMatrix) and m.layout == "nib" and m.q.dtype == np.uint8
            assert m.q.shape[2] == 16 and m.offset is not None  # two values a byte, scale and offset per 32
            # act-order leaves one group (a trivial g_idx) where the inputs are no more than a group
            assert (m.columns is not None) == (bool(act_order) and m.shape[1] > group_size)
    assert isinstance(tf.w.output, np.ndarray)  # the head stays float


# -- errors ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gptq_dir(tmp_path_factory):
    return export_quantized(tmp_path_factory.mktemp("gptq"), "gptq", 32, False, "")[1]


def with_config(src: Path, tmp: Path, edit=None, tensors=None) -> Path:
    out = tmp / "ckpt"
    out.mkdir()
    for f in src.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    config = json.loads((src / "config.json").read_text())
    if edit:
        edit(config["quantization_config"])
    (out / "config.json").write_text(json.dumps(config))
    if tensors:
        arrays = safetensors.numpy.load_file(out / "model.safetensors")
        tensors(arrays)
        safetensors.numpy.save_file(arrays, out / "model.safetensors")
    return out


@pytest.mark.parametrize(("edit", "message"), [
    (lambda q: q.update(bits=8), r"quantization_config\.bits = 8 is not supported"),
    (lambda q: q.update(bits=3), r"quantization_config\.bits = 3"),
    (lambda q: q.update(quant_method="bitsandbytes"), r"quantization_config\.quant_method = 'bitsandbytes'"),
    (lambda q: q.update(group_size=48), r"quantization_config\.group_size = 48"),
    (lambda q: q.update(group_size=16), r"quantization_config\.group_size = 16"),
    (lambda q: q.update(checkpoint_format="marlin"), r"quantization_config\.checkpoint_format = 'marlin'"),
    (lambda q: q.update(quant_method="awq", version="gemv"), r"quantization_config\.version = 'gemv'"),
    (lambda q: q.update(quant_method="awq", version="marlin"), r"quantization_config\.version = 'marlin'"),
    (lambda q: q.update(quant_method="awq", version="exllama"), r"quantization_config\.version = 'exllama'"),
    (lambda q: q.update(quant_method="awq", zero_point=False), r"quantization_config\.zero_point = False"),
    (lambda q: q.update(quant_method="awq", group_size=-1), r"quantization_config\.group_size = -1"),
])
def test_unsupported_configs_are_config_errors(gptq_dir, tmp_path, edit, message):
    path = with_config(gptq_dir, tmp_path, edit)
    with pytest.raises(ConfigError, match=message) as e:
        load_checkpoint(path)
    assert str(path / "config.json") in str(e.value)


def test_missing_qzeros_names_the_tensor(gptq_dir, tmp_path):
    path = with_config(gptq_dir, tmp_path, tensors=lambda a: a.pop("model.layers.1.mlp.up_proj.qzeros"))
    with pytest.raises(WeightError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.qzeros'"):
        load_checkpoint(path)


def test_misshapen_scales_name_the_tensor(gptq_dir, tmp_path):
    def edit(a):
        a["model.layers.0.self_attn.o_proj.scales"] = a["model.layers.0.self_attn.o_proj.scales"][:2]

    with pytest.raises(WeightError, match=r"'model\.layers\.0\.self_attn\.o_proj\.scales' has shape \(2, 128\)"):
        load_checkpoint(with_config(gptq_dir, tmp_path, tensors=edit))


def test_g_idx_without_whole_blocks_is_a_config_error(gptq_dir, tmp_path):
    """Groups of 16 and 48 columns: no column order makes 32-column blocks of one group."""
    def edit(a):
        name = "model.layers.0.self_attn.k_proj.g_idx"
        a[name] = np.repeat(np.arange(4), [16, 48, 32, 32]).astype(np.int32)

    with pytest.raises(ConfigError, match=r"tensor 'model\.layers\.0\.self_attn\.k_proj\.g_idx': its groups do not fill"):
        load_checkpoint(with_config(gptq_dir, tmp_path, tensors=edit))
