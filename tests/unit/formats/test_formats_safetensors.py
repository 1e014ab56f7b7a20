"""load_safetensors against files written by the `safetensors` package and by hand (BF16, broken files)."""

import json

import gguf
import numpy as np
import pytest
import safetensors.numpy
from formats_helpers import safetensors_file

from fakcore.formats import SafetensorsError, load_safetensors


def bf16_bytes(values: np.ndarray) -> bytes:
    return gguf.quants.quantize(values.astype(np.float32), gguf.GGMLQuantizationType.BF16).tobytes()


def test_single_file_written_by_the_safetensors_package(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "model.embed_tokens.weight": rng.standard_normal((10, 8)).astype(np.float32),
        "model.norm.weight": rng.standard_normal(8).astype(np.float16),
        "lm_head.weight": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "scalar": np.array(2.5, dtype=np.float32),
    }
    safetensors.numpy.save_file(arrays, tmp_path / "model.safetensors", metadata={"format": "pt"})
    for path in (tmp_path / "model.safetensors", tmp_path):  # the file, or its directory
        tensors = load_safetensors(path)
        assert set(tensors) == set(arrays)
        for name, values in arrays.items():
            t = tensors[name]
            assert t.qtype == {np.float32: "F32", np.float16: "F16"}[values.dtype.type]
            assert t.shape == values.shape and t.source == str(tmp_path / "model.safetensors")
            assert not t.raw.flags.writeable  # a view of the mmap
            assert np.array_equal(t.dequantize(), values.astype(np.float32))


def test_bf16(tmp_path):
    values = np.array([[1.5, -2.0, 0.0, -0.0], [3.0e38, 1e-40, 65504.0, 0.1]], dtype=np.float32)
    path = tmp_path / "w.safetensors"
    path.write_bytes(safetensors_file({"w": ("BF16", [2, 4], bf16_bytes(values))}))
    expected = gguf.quants.dequantize(np.frombuffer(bf16_bytes(values), np.uint8).reshape(8, 2),
                                      gguf.GGMLQuantizationType.BF16).reshape(2, 4)
    got = load_safetensors(path)["w"]
    assert got.qtype == "BF16" and np.array_equal(got.dequantize().view(np.uint32), expected.view(np.uint32))


def write_sharded(root, shards: dict[str, dict[str, np.ndarray]], weight_map: dict[str, str] | None = None):
    for shard, arrays in shards.items():
        safetensors.numpy.save_file(arrays, root / shard)
    if weight_map is None:
        weight_map = {name: shard for shard, arrays in shards.items() for name in arrays}
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


SHARDS = {
    "model-00001-of-00002.safetensors": {"a": np.ones((2, 2), np.float32), "b": np.zeros(3, np.float16)},
    "model-00002-of-00002.safetensors": {"c": np.full((4,), 7.0, np.float32)},
}
SHARDS_1, SHARDS_2 = list(SHARDS)


def test_sharded_directory(tmp_path):
    write_sharded(tmp_path, SHARDS)
    tensors = load_safetensors(tmp_path)
    assert list(tensors) == ["a", "b", "c"]
    assert tensors["c"].source == str(tmp_path / "model-00002-of-00002.safetensors")
    assert np.array_equal(tensors["c"].dequantize(), np.full(4, 7.0, np.float32))


def fails(path, *fragments: str) -> str:
    with pytest.raises(SafetensorsError) as info:
        load_safetensors(path)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_index_names_a_tensor_missing_from_its_shard(tmp_path):
    weight_map = {"a": SHARDS_1, "b": SHARDS_1, "c": SHARDS_2, "d": SHARDS_2}
    write_sharded(tmp_path, SHARDS, weight_map)
    fails(tmp_path, "model.safetensors.index.json", "tensor 'd'", SHARDS_2)


def test_shard_tensor_missing_from_index(tmp_path):
    write_sharded(tmp_path, SHARDS, {"a": SHARDS_1, "c": SHARDS_2})
    fails(tmp_path, SHARDS_1, "tensor 'b'", "not listed")


def test_tensor_in_the_wrong_shard(tmp_path):
    write_sharded(tmp_path, SHARDS, {"a": SHARDS_1, "b": SHARDS_2, "c": SHARDS_2})
    fails(tmp_path, SHARDS_1, "tensor 'b'", SHARDS_2)


def test_index_names_a_missing_shard(tmp_path):
    write_sharded(tmp_path, SHARDS, {"a": SHARDS_1, "b": SHARDS_1, "c": "model-00003.safetensors"})
    fails(tmp_path, "model.safetensors.index.json", "model-00003.safetensors", "does not exist")


def test_index_without_weight_map(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text("{}")
    fails(tmp_path, "model.safetensors.index.json", "'weight_map'")



def test_unsupported_dtype(tmp_path):
    path = tmp_path / "ids.safetensors"
    path.write_bytes(safetensors_file({"position_ids": ("I64", [2], bytes(16))}))
    fails(path, str(path), "tensor 'position_ids'", "dtype I64")


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"\x05\x00", "truncated"),
        ((1 << 40).to_bytes(8, "little") + b"{}", "header length"),
        ((7).to_bytes(8, "little") + b"{nope!}", "not valid JSON"),
        ((2).to_bytes(8, "little") + b"[]", "not an object"),
        ((16).to_bytes(8, "little") + b'{"a":1, "a":2}  ', "appears twice"),
    ],
)
def test_bad_header(tmp_path, data, fragment):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    fails(path, str(path), fragment)


def test_offsets_beyond_file(tmp_path):
    path = tmp_path / "short.safetensors"
    path.write_bytes(safetensors_file({"w": ("F32", [4], bytes(16))})[:-4])
    fails(path, str(path), "tensor 'w'", "past the end")


def test_shape_does_not_match_byte_span(tmp_path):
    path = tmp_path / "mismatch.safetensors"
    path.write_bytes(safetensors_file({"w": ("F32", [5], bytes(16))}))
    fails(path, str(path), "tensor 'w'", "needs 20 bytes", "span 16")


@pytest.mark.parametrize(
    "entry, fragment",
    [
        ({"dtype": "F32", "shape": [1]}, "needs dtype, shape and data_offsets"),
        ({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}, "shape"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}, "data_offsets"),
    ],
)
def test_malformed_entries(tmp_path, entry, fragment):
    path = tmp_path / "entry.safetensors"
    path.write_bytes(safetensors_file({"ok": ("F32", [1], bytes(4))}, header_extra={"w": entry}))
    fails(path, str(path), "tensor 'w'", fragment)


def test_directory_without_model_files(tmp_path):
    fails(tmp_path, str(tmp_path), "model.safetensors")


def test_missing_file(tmp_path):
    fails(tmp_path / "absent.safetensors", "absent.safetensors", "cannot open")
