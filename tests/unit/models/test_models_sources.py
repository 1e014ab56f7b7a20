"""hf://org/repo resolves offline from a HuggingFace hub cache and verifies every snapshot file against the
hash its blob is named by (sha256 for LFS files, git blob sha1 for the rest). The cache here is fake:
the hub's layout (refs/, snapshots/<commit>/ links, blobs/<hash>) built in tmp_path."""

from __future__ import annotations

import hashlib
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
