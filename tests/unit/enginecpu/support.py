"""What the real-weight fast-path tests share."""

from __future__ import annotations

import numpy as np

from fakcore.engine.backend import Segment


def greedy(model, ids: list[int], n: int) -> tuple[list[int], np.ndarray]:
    """`n` greedy tokens after the prompt `ids`, one forward step each, and the logits each was chosen from."""
    tf = model.transformer
    cache = tf.new_cache()
    logits = tf.forward(np.array(ids), [Segment(cache, slice(0, len(ids)))], np.array([len(ids) - 1]))
    out, rows = [], []
    for _ in range(n):
        rows.append(logits[0])
        token = int(np.argmax(logits[0]))
        out.append(token)
        logits = tf.forward(np.array([token]), [Segment(cache, slice(0, 1))], np.array([0]))
    return out, np.array(rows)
