"""The Prometheus file-SD list `fak up` keeps: every service's metrics endpoint, as the services announce it.

Services bind their metrics port at start-up (FAK_METRICS_PORT=0: a free one) and say where it is in their
heartbeats (Heartbeat.metrics_url, Announce.metrics_url), so a restarted worker may move. A thread of
`fak up` listens to those heartbeats and rewrites the file (atomically, only when it changes) with one
target group per instance, dropping an instance not heard from for `worker_stale_s`:

    [{"targets": ["127.0.0.1:41013"], "labels": {"job": "fak", "service": "engine-cpu", "instance": "w1",
      "model": "synthetic", "__metrics_path__": "/metrics"}}, ...]

Point Prometheus at it with `file_sd_configs: [{files: [<the path>]}]` (README, Deploying).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fakcore.protocol import Decoders, subjects
from fakcore.settings import Settings

log = logging.getLogger("fak.targets")
SERVICE_OF_ENGINE = {"fak-cpu": "engine-cpu", "fak-cuda": "engine-cuda"}


def target_group(service: str, instance: str, metrics_url: str, **labels: str) -> dict[str, Any]:
    url = urlsplit(metrics_url)
    return {"targets": [url.netloc], "labels": {"job": "fak", "service": service, "instance": instance, **labels,
                                                "__metrics_path__": url.path or "/metrics"}}


class Targets:
    """Keeps `path` current while running (start() / stop())."""

    def __init__(self, settings: Settings, path: Path):
        self.settings, self.path = settings, path
        self.seen: dict[str, tuple[float, dict[str, Any]]] = {}  # instance -> (last heard, its target group)
        self._written: list[dict[str, Any]] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> Targets:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="fak-targets", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def on_health(self, raw: bytes) -> None:
        h = Decoders.heartbeat.decode(raw)
        if h.metrics_url:
            self.seen[h.instance] = (time.monotonic(), target_group(h.service, h.instance, h.metrics_url))

    def on_announce(self, raw: bytes) -> None:
        a = Decoders.announce.decode(raw)
        if a.metrics_url:
            self.seen[a.worker] = (time.monotonic(), target_group(SERVICE_OF_ENGINE[a.engine], a.worker, a.metrics_url,
                                                                   model=a.model))

    def current(self) -> list[dict[str, Any]]:
        """The groups of every instance heard within worker_stale_s, in a stable order."""
        horizon = time.monotonic() - max(self.settings.worker_stale_s, 3 * self.settings.announce_interval_s)
        self.seen = {i: v for i, v in self.seen.items() if v[0] >= horizon}
        return sorted((g for _, g in self.seen.values()), key=lambda g: (g["labels"]["service"], g["labels"]["instance"]))

    def write(self) -> None:
        groups = self.current()
        if groups == self._written:
            return
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(json.dumps(groups, indent=1) + "\n")
        os.replace(partial, self.path)  # Prometheus never reads half a file
        self._written = groups

    async def _main(self) -> None:
        from fakcore import bus

        try:
            nc = await bus.connect(self.settings, "fak-up-targets")
        except ConnectionError as exc:
            log.warning("no Prometheus targets file: %s", exc)
            return

        def guarded(handle: Any) -> Any:
            async def cb(msg: Any) -> None:
                try:
                    handle(msg.data)
                except Exception as exc:  # a message from an older or newer peer: skip it, keep the rest
                    log.debug("targets: skipped a heartbeat: %s", exc)
            return cb

        await nc.subscribe(subjects.HEALTH, cb=guarded(self.on_health))
        await nc.subscribe(subjects.ANNOUNCE, cb=guarded(self.on_announce))
        try:
            while not self._stop.is_set():
                await asyncio.sleep(min(1.0, self.settings.announce_interval_s))
                self.write()
        finally:
            await nc.close()
