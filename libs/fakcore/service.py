"""The shape every fak service shares: connect, wire handlers, heartbeat, wait for a signal, drain.

A service is a `bootstrap(svc)` coroutine that subscribes its handlers and registers clean-up on
`svc.stack`; `run_service` does everything around it. Shutdown order on SIGINT/SIGTERM: stop taking new
work (the bootstrap's own clean-ups, LIFO), drain the NATS connection (in-flight messages are delivered),
stop the /metrics server.

Supervision: every long-lived task or thread of a service is started through `svc.supervise` (or reports
through `svc.fail`). When one dies the service does not live on wedged: /healthz turns not-ok, the process
stops and exits non-zero, and whoever runs it (`fak up`, compose, Kubernetes) restarts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client as NATS

from fakcore import bus
from fakcore.metrics import Metrics, MetricsServer
from fakcore.protocol import Heartbeat, encode, subjects
from fakcore.settings import Settings

log = logging.getLogger("fak.service")

DRAIN_S = 2.0  # the longest a stopping service waits for in-flight bus messages (normally milliseconds)
SHUTDOWN_S = 4.0  # the longest a stopping service takes, bus or not (then it exits hard, status 70)


# Each service is its own package, run as `python -m PACKAGE` (`fak serve NAME` and `fak up` do just that):
# shared code names the services but imports none of them (docs/architecture.md §1).
PACKAGES = {"gateway": "fak_gateway", "adjudicator": "fak_adjudicator", "kvmmu": "fak_kvmmu",
            "engine-cpu": "fak_engine_cpu", "engine-cuda": "fak_engine_cuda"}


def foreground(name: str, main: Callable[[Settings], Awaitable[int | None]], argv: list[str] | None = None) -> int:
    """A service's `__main__`: its settings from FAK_* and the command line (a bad one: one line, exit 2),
    then `main` until a signal; the exit status."""
    import argparse

    from fakcore import settings as settings_mod
    from fakcore.settings import SettingsError

    parser = argparse.ArgumentParser(prog=f"python -m {PACKAGES[name]}", description=f"fak's {name}, in the foreground")
    settings_mod.add_arguments(parser)
    try:
        settings = Settings.load(args=parser.parse_args(argv))
    except SettingsError as exc:
        print(f"fak {name}: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(main(settings)) or 0
    except KeyboardInterrupt:
        return 0


def setup_logging(level: str, name: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s {name}[%(process)d] %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )


def instance_name(service: str) -> str:
    return f"{service}-{socket.gethostname()}-{os.getpid()}"


@dataclass
class Service:
    name: str
    settings: Settings
    nc: NATS
    metrics: Metrics
    stack: AsyncExitStack
    stop: asyncio.Event
    instance: str = ""
    metrics_url: str = ""
    started: float = field(default_factory=time.time)
    # Extra fields for /healthz; a bootstrap may set `healthy` to a callable returning (ok, detail).
    health_detail: dict[str, Any] = field(default_factory=dict)
    healthy: Callable[[], tuple[bool, str]] = lambda: (True, "")
    heartbeat: Callable[[], Any] | None = None  # a bootstrap may replace the heartbeat message
    failure: str = ""  # set when a supervised task or thread died: the service is going down
    starting: str = "starting"  # what bootstrap is doing (loading, compiling): /healthz is not ok until it is ""
    loop: asyncio.AbstractEventLoop | None = None  # the service's event loop (fail() may come from a thread)

    def supervise(self, coro: Awaitable[Any], what: str) -> asyncio.Task:
        """Run a long-lived coroutine; if it ends (with an error or not) before the service stops, fail."""
        task = asyncio.ensure_future(coro)

        def ended(t: asyncio.Task) -> None:
            if t.cancelled() or self.stop.is_set():
                return
            exc = t.exception()
            self.fail(f"{what} {'died: ' + repr(exc) if exc else 'ended'}", exc)

        task.add_done_callback(ended)
        self.stack.callback(task.cancel)
        return task

    def fail(self, reason: str, exc: BaseException | None = None) -> None:
        """A part this service cannot run without is gone: report it and stop with a non-zero exit.
        Callable from any thread."""
        if self.failure:
            return
        self.failure = reason
        log.critical("%s: %s; stopping so that it is restarted", self.name, reason, exc_info=exc)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is self.loop:
            self.stop.set()
        elif self.loop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)

    def health(self) -> dict[str, Any]:
        ok, detail = self.healthy()
        if self.failure:
            ok, detail = False, self.failure
        elif self.starting:
            ok, detail = False, self.starting
        ok = ok and self.nc.is_connected
        return {"ok": ok, "service": self.name, "instance": self.instance, "nats": self.nc.is_connected,
                "uptime_s": round(time.time() - self.started, 1), "detail": detail, **self.health_detail}

    def default_heartbeat(self) -> Heartbeat:
        ok, detail = self.healthy()
        return Heartbeat(service=self.name, instance=self.instance, ok=ok, detail=detail,
                         metrics_url=self.metrics_url, ts=time.time())


async def run_service(name: str, settings: Settings, bootstrap: Callable[[Service], Awaitable[None]],
                      *, metrics_server: bool = True) -> int:
    """Run one service until SIGINT/SIGTERM (exit status 0) or until a supervised part dies (1).
    `bootstrap` subscribes handlers and registers clean-ups. A signal during start-up (the bus unreachable,
    a model loading) abandons it; from the signal on, the process ends within SHUTDOWN_S whatever happens."""
    setup_logging(settings.log_level, name)
    stop, signalled = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    watchdog: list[threading.Timer] = []  # armed once stopping begins: at the signal, or when a part died

    def stopping() -> None:
        if not watchdog:
            watchdog.append(_exit_watchdog(name))
        signalled.set()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping)
    try:
        async with AsyncExitStack() as stack:
            svc = await _unless(signalled, _start(name, settings, bootstrap, stack, stop, loop, metrics_server))
            if svc is None:
                log.info("%s: stopped during start-up", name)
                return 0
            svc.starting = ""
            svc.supervise(_heartbeat(svc), "the heartbeat")
            log.info("%s: ready (%s)", name, svc.instance)
            await stop.wait()
            log.info("%s: stopping%s", name, f" ({svc.failure})" if svc.failure else "")
            if not watchdog:
                watchdog.append(_exit_watchdog(name))
        log.info("%s: stopped", name)
        return 1 if svc.failure else 0
    finally:
        for timer in watchdog:
            timer.cancel()  # stopped in time


async def _start(name: str, settings: Settings, bootstrap: Callable[[Service], Awaitable[None]], stack: AsyncExitStack,
                 stop: asyncio.Event, loop: asyncio.AbstractEventLoop, metrics_server: bool) -> Service:
    """Connect, serve /metrics, run the bootstrap: the service, ready but for its heartbeat."""
    nc = await bus.connect(settings, name)
    stack.push_async_callback(_drain, nc)
    svc = Service(name=name, settings=settings, nc=nc, metrics=Metrics(name), stack=stack, stop=stop,
                  instance=instance_name(name), loop=loop)
    if metrics_server:
        server = MetricsServer(svc.metrics, svc.health)
        svc.metrics_url = await server.start(settings.metrics_host, settings.metrics_port)
        stack.push_async_callback(server.stop)
        log.info("%s: metrics and health on %s", name, svc.metrics_url)
    await bootstrap(svc)
    return svc


async def _unless(event: asyncio.Event, coro: Awaitable[Service]) -> Service | None:
    """What `coro` returns, or None (and `coro` cancelled) if `event` is set first."""
    task, waiter = asyncio.ensure_future(coro), asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    # Cancelled until it ends: nats.py's connect loop can take a cancellation that lands as its connect
    # timeout fires for a timeout, and retry (the watchdog bounds all this anyway).
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    with contextlib.suppress(asyncio.CancelledError, Exception):
        task.result()
    return None


async def _drain(nc: NATS) -> None:
    """Deliver what is in flight, then close; with the server gone there is nothing to deliver: close now."""
    try:
        if nc.is_connected:
            await asyncio.wait_for(nc.drain(), timeout=DRAIN_S)
        else:
            await asyncio.wait_for(nc.close(), timeout=1.0)
    except Exception as exc:  # already closed, or the server went away meanwhile
        log.debug("drain: %s", exc)


def _exit_watchdog(name: str) -> threading.Timer:
    """Stopping must end within SHUTDOWN_S whatever the state of the bus: past it, exit hard. The caller
    cancels the timer once the service has stopped."""
    def expire() -> None:
        log.error("%s: shutdown took longer than %gs; exiting now, from:", name, SHUTDOWN_S)
        faulthandler.dump_traceback(all_threads=True)  # where it was stuck
        logging.shutdown()
        os._exit(70)

    timer = threading.Timer(SHUTDOWN_S, expire)
    timer.daemon = True
    timer.start()
    return timer


async def _heartbeat(svc: Service) -> None:
    while True:
        try:
            msg = svc.heartbeat() if svc.heartbeat else svc.default_heartbeat()
            subject = subjects.ANNOUNCE if msg.__class__.__name__ == "Announce" else subjects.health(svc.name)
            await svc.nc.publish(subject, encode(msg))
        except Exception as exc:  # disconnected: the next beat will try again
            log.debug("heartbeat: %s", exc)
        await asyncio.sleep(svc.settings.announce_interval_s)
