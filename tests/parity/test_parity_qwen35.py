"""Qwen3.5, dense and MoE (models/qwen35.py), against HuggingFace transformers: random tiny models
(support.FAMILIES["qwen35"], ["qwen35-moe"]: Gated DeltaNet layers with plain projections, every second layer gated
attention under the multimodal RoPE's sections) from safetensors, from the published layout (the decoder inside
Qwen3_5ForConditionalGeneration, beside a vision tower; experts fused) and from GGUF files as llama.cpp's converter
writes them (F32, F16, Q8_0: value heads tiled), on the reference and numba backends: logits max |Δ| <= BOUND,
argmax at every position, decoding token by token through the cache as in one pass (bit for bit on numba).
Exact eviction of a middle span on the MoE hybrid equals a fresh prefill, bit for bit.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from fakcore.engine.backend import Segment
from fakcore.engine.eviction import evict_cache, prefill
from fakcore.engine.kvcache import cut_tokens
from fakcore.engine.transformer import Transformer, load_weights
from fakcore.models.checkpoint import load_checkpoint
from fakcore.models.config import ConfigError
from fakcore.protocol import Span

from .support import (
    COMMON,
    FAMILIES,
    assert_matches,
    export,
    fak_backend,
    fak_full,
    hf_logits,
    measure,
    save_hf,
    tokens_for,
    write_gguf,
)

BOUND = 5e-5  # claim 16's bound; measured at most 3.1e-5 (F32 / Q8_0, Intel Xeon)
CASES = [(name, fmt, backend) for name in ("qwen35", "qwen35-moe") for fmt in ("safetensors", "gguf-f32", "gguf-f16",
                                                                                "gguf-q8_0")
         for backend in ("reference", "numba")]


def transformer(path, backend: str = "numba", checkpoint_every: int = 8, config=None) -> Transformer:
    ckpt = load_checkpoint(path)
    cfg = config or ckpt.config
    be = fak_backend(backend)
    return Transformer(cfg, load_weights(cfg, ckpt.tensors, be, ckpt.source), be, checkpoint_every)


@pytest.mark.parametrize(("name", "fmt", "backend"), CASES, ids=[f"{n}-{f}-{b}" for n, f, b in CASES])
def test_logits_match_huggingface(name, fmt, backend, tmp_path):
    model, path = export(name, fmt, tmp_path)
    assert_matches(measure(f"{name} / {fmt} / {backend}", path, model, tokens_for(), backend), BOUND, backend)


def test_the_configs_say_the_hybrid_and_how_its_value_heads_lie(tmp_path):
    _, st = export("qwen35-moe", "safetensors", tmp_path / "st")
    _, gg = export("qwen35-moe", "gguf-f32", tmp_path / "gg")
    a, b = load_checkpoint(st).config, load_checkpoint(gg).config
    assert (a.arch, b.arch) == ("qwen35moe", "qwen35moe")
    assert a.linear_layers == b.linear_layers == (True, False, True, False)
    assert (a.linear_v_tiled, b.linear_v_tiled) == (False, True)  # HuggingFace groups them, the converter tiles
    assert (a.norm_offset, b.norm_offset) == (1.0, 0.0)
    fields = ("n_experts", "n_experts_used", "expert_ffn_dim", "shared_expert_ffn_dim", "expert_weights_norm",
              "shared_expert_gate", "rotary_dim", "attn_gate", "linear_k_heads", "linear_v_heads", "linear_v_dim")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields] == [4, 2, 32, 64, True, True, 4, True, 2, 4, 32]
    dense = load_checkpoint(export("qwen35", "gguf-f32", tmp_path / "dense")[1]).config
    assert (dense.arch, dense.n_experts, dense.ffn_dim) == ("qwen35", 0, 128)


def test_read_grouped_a_gguf_is_another_model(tmp_path):
    """The tiling is what the file holds: read with HuggingFace's grouping, the same tensors give other logits."""
    import dataclasses

    model, path = export("qwen35", "gguf-f32", tmp_path)
    tokens = tokens_for()
    want = hf_logits(model, tokens)
    cfg = load_checkpoint(path).config
    right = fak_full(transformer(path), tokens)
    wrong = fak_full(transformer(path, config=dataclasses.replace(cfg, linear_v_tiled=False)), tokens)
    assert np.abs(right - want).max() <= BOUND
    assert np.abs(wrong - want).max() > 100 * BOUND


def composite(tmp_path, tie: bool):
    """The published layout: Qwen3_5ForConditionalGeneration (a one-layer vision tower beside the decoder)."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    fam = FAMILIES["qwen35"]
    text = COMMON | fam.config | {"tie_word_embeddings": tie}
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=4,
                  num_position_embeddings=16)
    torch.manual_seed(0)
    model = Qwen3_5ForConditionalGeneration(Qwen3_5Config(text_config=text, vision_config=vision,
                                                          tie_word_embeddings=tie)).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.ndim == 1 and "visual" not in pname:
                p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(pname))))
        for layer in model.model.language_model.layers:
            if hasattr(layer, "linear_attn"):  # support.qwen3next_decay's rates
                layer.linear_attn.A_log.copy_(torch.empty(layer.linear_attn.A_log.shape).uniform_(0.02, 0.3).log())
    return model, save_hf(model, tmp_path / "hf")


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_the_published_layout_reads_the_decoder_and_leaves_the_vision_tower(tie, tmp_path):
    model, path = composite(tmp_path, tie)
    names = load_file(path / "model.safetensors")
    assert any(n.startswith("model.visual.") for n in names) and any(n.startswith("model.language_model.") for n in names)
    ckpt = load_checkpoint(path)
    assert (ckpt.config.arch, ckpt.config.tie_embeddings, "output.weight" in ckpt.tensors) == ("qwen35", tie, not tie)
    tokens = tokens_for()
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(tokens)[None]).logits[0].float().numpy()
    for backend in ("reference", "numba"):
        got = fak_full(transformer(path, backend), tokens)
        assert np.abs(got - want).max() <= BOUND
        assert (got.argmax(-1) == want.argmax(-1)).all()


def test_fused_experts_load_as_the_per_expert_ones(tmp_path):
    """The published MoE checkpoints store each layer's experts as gate_up_proj (E, 2F, dim) and down_proj
    (E, dim, F): the same canonical tensors as save_pretrained's one tensor per expert."""
    _, path = export("qwen35-moe", "safetensors", tmp_path)
    per_expert = load_checkpoint(path)
    tensors = load_file(path / "model.safetensors")
    fused = {}
    for name, t in tensors.items():
        parts = name.split(".")
        if ".mlp.experts." not in name:
            fused[name] = t
        elif parts[5] == "0" and parts[6] == "gate_proj":
            prefix = ".".join(parts[:5])
            gate = [tensors[f"{prefix}.{e}.gate_proj.weight"] for e in range(4)]
            up = [tensors[f"{prefix}.{e}.up_proj.weight"] for e in range(4)]
            fused[f"{prefix}.gate_up_proj"] = torch.stack([torch.cat([g, u]) for g, u in zip(gate, up, strict=True)])
            fused[f"{prefix}.down_proj"] = torch.stack([tensors[f"{prefix}.{e}.down_proj.weight"] for e in range(4)])
    save_file(fused, path / "model.safetensors")
    loaded = load_checkpoint(path)
    assert sorted(loaded.tensors) == sorted(per_expert.tensors)
    for name, t in per_expert.tensors.items():
        assert np.array_equal(loaded.tensors[name].dequantize(), t.dequantize()), name


def mtp_block(tensors: dict) -> None:
    """What the converter adds for a checkpoint's multi-token-prediction layer: one more block past the decoder."""
    for name in [n for n in tensors if n.startswith("blk.3.")]:
        tensors["blk.4." + name[len("blk.3."):]] = tensors[name] * 0.5
    for name in ("nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight"):
        tensors["blk.4." + name] = np.ones((64, 128) if "eh_proj" in name else (64,), np.float32)


def test_a_gguf_with_the_mtp_block_runs_the_decoder_alone(tmp_path):
    model, hf_dir = export("qwen35", "safetensors", tmp_path)
    path = write_gguf(hf_dir, "qwen35", "F32", tmp_path / "mtp.gguf", edit=mtp_block, drop_keys=("qwen35.block_count",),
                      add_keys={"qwen35.block_count": 5, "qwen35.nextn_predict_layers": 1})
    ckpt = load_checkpoint(path)
    assert ckpt.config.n_layers == 4 and not any(n.startswith("blk.4.") for n in ckpt.tensors)
    assert np.abs(fak_full(transformer(path), tokens_for()) - hf_logits(model, tokens_for())).max() <= BOUND


def edit_config(path, **changes) -> None:
    config = path / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | changes))


@pytest.mark.parametrize(("name", "changes", "message"), [
    ("qwen35", dict(num_experts=4), "qwen3_5 with num_experts 4: the MoE is model_type qwen3_5_moe"),
    ("qwen35-moe", dict(shared_expert_intermediate_size=0), "qwen3_5_moe with shared_expert_intermediate_size 0"),
    ("qwen35-moe", dict(mlp_only_layers=[1]), "qwen3_5_moe has experts on every layer"),
    ("qwen35", dict(model_type="qwen3_5"), "model_type 'qwen3_5' without a 'text_config' object"),
    ("qwen35", dict(attention_bias=True), "attention_bias is not supported for qwen3_5"),
])
def test_unsupported_configurations_are_errors_naming_the_field(name, changes, message, tmp_path):
    _, path = export(name, "safetensors", tmp_path)
    edit_config(path, **changes)
    with pytest.raises(ConfigError, match=message):
        load_checkpoint(path)


@pytest.mark.parametrize(("name", "drop", "add", "message"), [
    ("qwen35-moe", "qwen35moe.expert_shared_feed_forward_length", {}, "qwen35moe with no shared expert"),
    ("qwen35-moe", "qwen35moe.expert_feed_forward_length", {},
     "missing GGUF metadata key 'qwen35moe.expert_feed_forward_length'"),
    ("qwen35", "qwen35.ssm.group_count", {}, "missing GGUF metadata key 'qwen35.ssm.group_count'"),
    ("qwen35", None, {"qwen35.nextn_predict_layers": 4}, "'qwen35.nextn_predict_layers' = 4 of 'qwen35.block_count' = 4"),
])
def test_a_gguf_missing_what_the_converter_writes_is_an_error_naming_the_key(name, drop, add, message, tmp_path):
    _, hf_dir = export(name, "safetensors", tmp_path)
    path = write_gguf(hf_dir, name, "F32", tmp_path / "model.gguf", drop_keys=(drop,) if drop else (), add_keys=add)
    with pytest.raises(ConfigError, match=message):
        load_checkpoint(path)


@pytest.mark.parametrize("fmt", ["safetensors", "gguf-q8_0"])
def test_exact_eviction_of_a_middle_span_equals_a_fresh_prefill(fmt, tmp_path):
    """The MoE hybrid (tiled value heads from the GGUF): checkpoints every 12, the span (16, 28) restored from 12,
    the suffix recomputed: cache (KV, conv and recurrent state, checkpoints) and the next logits bit-identical to a
    fresh prefill of the survivors, on numba."""
    _, path = export("qwen35-moe", fmt, tmp_path)
    tf = transformer(path, "numba", checkpoint_every=12)
    ids = np.random.default_rng(7).integers(0, tf.cfg.vocab_size, 49).tolist()
    prompt, last = ids[:-1], ids[-1]
    cache = tf.new_cache()
    prefill(tf, cache, prompt, chunk=16)
    cache.spans = [Span(block="quarantined", start=16, end=28)]
    r = evict_cache(tf, cache, [(16, 28)], "exact", chunk=16, verify=True)
    survivors = cut_tokens(prompt, [(16, 28)])
    fresh = tf.new_cache()
    prefill(tf, fresh, survivors, chunk=48)
    assert r.identical and r.max_abs_dev == 0.0 and r.tokens_recomputed == len(survivors) - 12
    assert cache.digest() == fresh.digest() == r.digest_after != r.digest_before
    nxt = [tf.forward(np.array([last]), [Segment(c, slice(0, 1))]) for c in (cache, fresh)]
    assert np.array_equal(nxt[0], nxt[1])


def test_float64_huggingface_sees_fak_as_accurate_as_its_own_float32(tmp_path):
    model, path = export("qwen35-moe", "gguf-f16", tmp_path)
    tokens = tokens_for()
    with torch.no_grad():
        truth = copy.deepcopy(model).double()(torch.from_numpy(tokens)[None]).logits[0].numpy()
    hf_err = float(np.abs(hf_logits(model, tokens) - truth).max())
    fak_err = float(np.abs(fak_full(transformer(path), tokens) - truth).max())
    print(f"qwen35-moe F16 GGUF vs HuggingFace float64: fak numba {fak_err:.2e}, HuggingFace float32 {hf_err:.2e}")
    assert fak_err <= max(2 * hf_err, 1e-5)
