"""The engine's side of screening's probe (screening/probe.py): each token's hidden state after a layer,
projected on a direction the asker sends.

    text  ->  tokens with their character offsets, in pieces of at most PROBE_CHUNK (each read from its own BOS)
    piece ->  Transformer.hidden(piece, layer): (T, dim), on a cache of its own, thrown away
          ->  hidden @ direction: (T,) one value per token (the BOS's dropped)

A worker answers on subjects.probe(model) (worker.py): the tokenizing runs on its prompt threads, each piece's
forward on the scheduler thread between two batch steps (Scheduler.call), so streams being decoded wait for
at most one piece. Nothing is generated and no KV cache outlives the request; only numbers leave.
"""

from __future__ import annotations

import numpy as np

from fakcore.engine.loader import LoadedModel
from fakcore.protocol import ErrorCode, ProbeRequest

PROBE_CHUNK = 512  # tokens read at once, from a BOS of their own (what the shipped probes were trained on)
MAX_PROBE_CHARS = 32768  # characters of text one request may carry (an asker splits longer text)


class ProbeError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def check(model: LoadedModel, req: ProbeRequest) -> None:
    """ProbeError (invalid request) unless the request fits the model: its layer, its direction's width."""
    cfg = model.config
    if not 1 <= req.layer <= cfg.n_layers:
        raise ProbeError(ErrorCode.INVALID, f"{model.name} has layers 1..{cfg.n_layers}: no hidden state after layer {req.layer}")
    if len(req.direction) != cfg.dim:
        raise ProbeError(ErrorCode.INVALID, f"the direction has {len(req.direction)} values; {model.name}'s hidden state has {cfg.dim}")
    if req.weights_digest and req.weights_digest != model.weights_digest:
        raise ProbeError(ErrorCode.UNSUPPORTED, f"the probe was trained on other weights ({req.weights_digest[:12]}…) than "
                                                f"{model.name}'s here ({model.weights_digest[:12]}…): its direction means nothing on them")
    if len(req.text) > MAX_PROBE_CHARS:
        raise ProbeError(ErrorCode.INVALID, f"{len(req.text)} characters: a probe reads at most {MAX_PROBE_CHARS} a request")


def pieces(model: LoadedModel, text: str, chunk: int = PROBE_CHUNK) -> list[tuple[np.ndarray, list[tuple[int, int]]]]:
    """The text's tokens in pieces of at most `chunk` - 1, each with the BOS first (if the model has one):
    [(ids (T,), offsets of the tokens after the BOS)]."""
    tok = model.tokenizer
    ids, offsets = tok.encode_with_offsets(text)
    lead = [tok.bos_id] if tok.bos_id is not None else []
    step = chunk - len(lead)
    return [(np.asarray(lead + ids[a:a + step], np.int64), offsets[a:a + step]) for a in range(0, len(ids), step)]


def project(model: LoadedModel, pieces: list[np.ndarray], layer: int, direction: np.ndarray) -> list[np.ndarray]:
    """Each piece's hidden states after `layer` (read in one batch), times `direction`: [(T_i,) float32], the
    BOS's dropped."""
    lead = 1 if model.tokenizer.bos_id is not None else 0
    d = direction.astype(np.float32)
    return [(h[lead:].astype(np.float32) @ d).astype(np.float32) for h in model.transformer.hidden(pieces, layer)]
