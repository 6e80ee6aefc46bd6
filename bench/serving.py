"""Running a bench server process until it is told to stop."""

from __future__ import annotations

import asyncio
import signal
import ssl

from aiohttp import web


async def serve_until_signalled(
    app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> None:
    """Serve ``app`` until SIGTERM or SIGINT, then close cleanly (the bench stops its servers
    with SIGTERM and reads their exit code)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
