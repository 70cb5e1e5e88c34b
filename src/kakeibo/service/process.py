"""Run ``kakeibo serve`` as a separate process on loopback (for load and crash tests, and local use)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx

__all__ = ["free_port", "start_server"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    config: str | os.PathLike[str], port: int, *, timeout: float = 30
) -> subprocess.Popen[bytes]:
    """Start ``kakeibo serve --config config --port port`` and return once it answers HTTP (the process is
    killed and RuntimeError raised if it does not within ``timeout`` seconds)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "kakeibo.cli", "serve", "--config", os.fspath(config), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1)
            return server
        except httpx.HTTPError:
            time.sleep(0.05)
    server.kill()
    raise RuntimeError(f"the service did not answer on port {port} within {timeout:g} s.")
