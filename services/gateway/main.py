"""gateway: the HTTP app (app.py) served by uvicorn; the bus connection lives in the app's lifespan."""

from __future__ import annotations

import uvicorn

from fak_gateway.app import create_app
from fakcore.service import setup_logging
from fakcore.settings import Settings


async def main(settings: Settings) -> None:
    setup_logging(settings.log_level, "gateway")
    config = uvicorn.Config(create_app(settings), host=settings.host, port=settings.port, log_level="warning",
                            access_log=False, lifespan="on", timeout_graceful_shutdown=10)
    await uvicorn.Server(config).serve()
