"""The HTTP server's log lines read as the daemon's: under ``roses.http``, uvicorn's start
and stop chatter and access lines only with DEBUG, its warnings kept."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from roses_app.publish import HttpServer

REPO = Path(__file__).resolve().parent.parent


def app() -> Starlette:
    return Starlette(routes=[Route("/healthz", lambda request: PlainTextResponse("ok"))])


def send_garbage(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        sock.recv(1024)  # the server answers 400 and closes


def serve_once(access_log: bool = False) -> None:
    server = HttpServer(app(), "127.0.0.1", 0, access_log=access_log)
    server.start()
    try:
        assert httpx.get(f"{server.url}/healthz", timeout=10).text == "ok"
        send_garbage(server.port)
    finally:
        server.stop()


def test_info_log_has_one_line_of_ours_and_uvicorn_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    serve_once()
    names = {r.name for r in caplog.records}
    assert not any(name.startswith("uvicorn") for name in names), caplog.text
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len([m for m in infos if m.startswith("listening on http://127.0.0.1:")]) == 1
    assert not [m for m in infos if "Started server" in m or "Shutting down" in m]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [(r.name, r.getMessage()) for r in warnings] == [
        ("roses.http", "Invalid HTTP request received.")
    ]


def test_debug_shows_uvicorn_lines_as_roses_http(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    serve_once(access_log=True)
    debug = {(r.name, r.getMessage()) for r in caplog.records if r.levelno == logging.DEBUG}
    assert any(n == "roses.http" and "Started server process" in m for n, m in debug), debug
    assert any(n == "roses.http.access" and "GET /healthz" in m for n, m in debug), debug
    assert not any(r.name.startswith("uvicorn") for r in caplog.records)


def test_a_process_log_as_a_person_reads_it() -> None:
    """A process set up as the CLI does it (basicConfig at INFO) logs no uvicorn lines."""
    code = textwrap.dedent(
        """
        import logging, sys
        sys.path.insert(0, "tests")
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        logging.getLogger("httpx").setLevel(logging.WARNING)  # the test's client
        from test_publish_log import serve_once
        serve_once()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert "uvicorn" not in done.stderr.lower()
    assert len(lines) == 2, lines
    assert lines[0].startswith("INFO roses.http: listening on http://127.0.0.1:")
    assert lines[1] == "WARNING roses.http: Invalid HTTP request received."
