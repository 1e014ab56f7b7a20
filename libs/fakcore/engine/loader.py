"""Loading a model reference into a runnable bundle: transformer + tokenizer + chat template + digest.

`load_model("synthetic" | "smollm2-135m" | path | "hf://org/repo", backend)` resolves the reference
(models/sources.py), reads the file (formats/), derives the config with the family named by the file's
architecture string (models/<arch>.py), checks every tensor, and places the weights on the backend.
`make_backend(name)` builds a backend registered under that name (engine/registry.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

import fakcore.engine.reference  # noqa: F401  registers "reference", the backend shared code ships
from fakcore.engine.backend import Backend, BackendError, Segment
from fakcore.engine.deltanet import CHECKPOINT_EVERY
from fakcore.engine.registry import BACKENDS
from fakcore.engine.transformer import Transformer, load_weights
from fakcore.formats.tensor import Tensor
from fakcore.models.config import ModelConfig
from fakcore.text.byte_tokenizer import ByteTokenizer
from fakcore.text.chat import ChatTemplate
from fakcore.text.tokenizer import Tokenizer

T = TypeVar("T")


@dataclass
class LoadedModel:
    name: str  # the reference it was loaded by ("synthetic", "smollm2-135m", a path…)
    config: ModelConfig
    transformer: Transformer
    tokenizer: Tokenizer
    template: ChatTemplate | None  # None: raw prompts only
    weights_digest: str  # sha256 over every tensor's name, type, shape and bytes
    source: str
    sampling: dict[str, float] = field(default_factory=dict)  # its makers' (models/sources.py), for knobs a request leaves unset

    @property
    def backend(self) -> Backend:
        return self.transformer.be


def digest_tensors(tensors: dict[str, Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"{name}|{t.qtype}|{tuple(t.shape)}|".encode())
        h.update(memoryview(t.raw))
        if t.columns is not None:  # GPTQ act-order: the same bytes in another column order are another model
            h.update(t.columns.astype(np.int64).tobytes())
    return h.hexdigest()


# Who registers each backend fak knows of, for the error when one is asked for in a process that lacks it.
PROVIDERS = {
    "reference": "fakcore.engine.reference",
    "numba": "engine-cpu (its module fak_engine_cpu.backend registers it)",
    "cuda": "engine-cuda",
}


def make_backend(name: str, **options: Any) -> Backend:
    """The backend named by FAK_BACKEND, from those registered. An unknown or absent one is an explicit error."""
    factory = BACKENDS.get(name)
    if factory is not None:
        return factory(**options)
    if name in PROVIDERS:
        raise BackendError(f"backend {name!r} is not registered in this process: the {name} backend is served by "
                           f"{PROVIDERS[name]}")
    raise BackendError(f"unknown backend {name!r}: expected {', '.join(PROVIDERS)}")


def load_model(ref: str, backend: Backend, cache_dir: str = "", checkpoint_every: int = CHECKPOINT_EVERY) -> LoadedModel:
    """checkpoint_every: a hybrid model's state checkpoint spacing (FAK_STATE_CHECKPOINT_EVERY; Transformer)."""
    if ref == "synthetic":
        return _load_synthetic(backend)
    from fakcore.models.sources import catalogue_sampling, resolve

    path = resolve(ref, cache_dir)
    from fakcore.models.checkpoint import load_checkpoint

    ckpt = load_checkpoint(path)
    weights = load_weights(ckpt.config, ckpt.tensors, backend, ckpt.source)
    return LoadedModel(name=ref, config=ckpt.config, transformer=Transformer(ckpt.config, weights, backend, checkpoint_every),
                       tokenizer=ckpt.tokenizer, template=ckpt.template, weights_digest=digest_tensors(ckpt.tensors),
                       source=ckpt.source, sampling=catalogue_sampling(ref) or ckpt.sampling)  # the file's own: read once, by the checkpoint


def _load_synthetic(backend: Backend) -> LoadedModel:
    from fakcore.models import synthetic

    cfg = synthetic.CONFIG
    tensors = synthetic.tensors(cfg)
    tok = ByteTokenizer(list(synthetic.SPECIALS), bos="<|bos|>", eos=("<|eos|>", "<|im_end|>"))
    template = ChatTemplate(synthetic.CHAT_TEMPLATE, bos_token="<|bos|>", eos_token="<|eos|>", name="synthetic")
    weights = load_weights(cfg, tensors, backend, "synthetic")
    return LoadedModel(name="synthetic", config=cfg, transformer=Transformer(cfg, weights, backend), tokenizer=tok,
                       template=template, weights_digest=digest_tensors(tensors), source="synthetic")


async def in_own_thread(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) in a thread of its own that ends with it (not asyncio's pooled executor threads, which live on).

    For the start-up work of an engine (loading, warming up) before its scheduler thread takes over: numba's
    OpenMP layer gives every thread that starts a parallel region a team of worker threads, kept as long as
    that thread lives. A second team (say, a pooled thread's from warming up) outnumbers the cores, and the
    OpenMP runtime then throttles its spin-waiting for every team: each of the hundreds of parallel regions
    of a decode step waits on sleeping threads, about half the single-stream decode speed on 2 cores
    (measured: 34-43 against 60-75 tok/s, SmolLM2 Q4_1, tests/unit/engine/test_compute_threads.py)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if done.cancelled():
            return
        if exc is None:
            done.set_result(result)
        else:
            done.set_exception(exc)

    def run() -> None:
        try:
            result, exc = fn(*args), None
        except BaseException as e:  # handed to the awaiting coroutine
            result, exc = None, e
        loop.call_soon_threadsafe(settle, result, exc)

    thread = threading.Thread(target=run, name=f"fak-{getattr(fn, '__name__', 'start')}", daemon=True)
    thread.start()
    result = await done
    thread.join()  # it has returned: gone in a moment, its team with it
    return result


def warm_up(model: LoadedModel) -> None:
    """Run each kind of step the scheduler takes once (a prefill; a batched decode of two sequences), so that a
    compiling backend compiles, or loads from its cache, every kernel before the worker takes a request."""
    if callable(bind := getattr(model.backend, "bind", None)):
        bind()
    tf = model.transformer
    a, b = tf.new_cache(), tf.new_cache()
    tokens = np.array([model.config.bos_id if model.config.bos_id is not None else 0] * 3, np.int64)
    tf.forward(tokens, [Segment(a, slice(0, 2)), Segment(b, slice(2, 3))], np.array([1, 2]))
    tf.forward(tokens[:2], [Segment(a, slice(0, 1)), Segment(b, slice(1, 2))], np.array([0, 1]))


def describe(model: LoadedModel) -> dict[str, Any]:
    c = model.config
    return {"model": model.name, "arch": c.arch, "layers": c.n_layers, "dim": c.dim, "vocab": c.vocab_size,
            "context_length": c.context_length, "backend": model.backend.name, "digest": model.weights_digest[:16]}
