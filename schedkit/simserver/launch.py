"""``schedkit serve sim --policy P -- [--model M --gpu G ...]``: run a simulated replica.

The entry point of ``schedkit serve``'s ``sim`` engine (group ``schedkit.serve``). It
binds the port first, so a port in use is one line naming it, then serves until SIGINT or
SIGTERM.
"""

from __future__ import annotations

import asyncio
import errno
import signal
import socket

from schedkit.config import SchedkitConfig
from schedkit.errors import SchedkitError
from schedkit.simserver.server import SimServer

__all__ = ["bind", "serve"]


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (``SchedkitError`` naming it when taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SchedkitError(
                f"schedkit serve sim: port {port} on {host} is in use; choose another with --port"
            ) from None
        raise SchedkitError(
            f"schedkit serve sim: cannot listen on {host}:{port}: {exc.strerror}"
        ) from None
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def serve(config: SchedkitConfig, engine_args: list[str]) -> int:
    """Serve until SIGINT or SIGTERM; 0 when stopped so."""
    try:
        import aiohttp  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError as exc:
        raise SchedkitError(
            f"schedkit serve sim needs {exc.name}: pip install 'schedkit[serve]'"
        ) from None
    server = SimServer.create(config, engine_args)
    sock = bind(server.args.host, server.args.port)
    asyncio.run(_serve(server, sock))
    return 0


async def _serve(server: SimServer, sock: socket.socket) -> None:
    from aiohttp import web

    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    await server.start()
    host, port = sock.getsockname()[:2]
    print(
        f"schedkit serve sim: {server.description}, policy {server.facade.label}, on"
        f" http://{host}:{port} (model {server.args.served_model_name!r},"
        f" max_model_len {server.max_model_len})",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()
        await runner.cleanup()
