"""The fetcher's connections: HTTP/2 where a TLS server offers it, kept alive between
fetches, and host names resolved once; against a real server (hypercorn) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from hypercorn.asyncio import serve
from hypercorn.config import Config as HypercornConfig
from test_connector_support import rss
from test_e2e import free_port, wait_for

from roses_app.config.model import FetchSettings
from roses_app.connectors.dnscache import CachingBackend
from roses_app.connectors.fetch import Fetcher

BODY = rss(("a", "One"))


@dataclass
class Seen:
    requests: list[tuple[str, tuple[str, int]]] = field(default_factory=list)  # version, client


class Hypercorn:
    """An ASGI feed server in a thread of its own; with ``cert_dir``, HTTPS offering h2."""

    def __init__(self, cert_dir: Path | None) -> None:
        self.seen = Seen()
        self.port = free_port()
        self.config = HypercornConfig()
        self.config.bind = [f"127.0.0.1:{self.port}"]
        self.config.accesslog = None
        self.config.errorlog = None
        if cert_dir is not None:
            self.config.certfile = str(cert_dir / "cert.pem")
            self.config.keyfile = str(cert_dir / "key.pem")
        self.loop = asyncio.new_event_loop()
        self.stopping = asyncio.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        wait_for(self._listening, 10, "hypercorn")

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.seen.requests.append((scope["http_version"], tuple(scope["client"])))
        headers = [(b"content-type", b"application/rss+xml")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": BODY})

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            self.stopping = asyncio.Event()
            await serve(self.app, self.config, shutdown_trigger=self.stopping.wait)  # type: ignore[arg-type]

        self.loop.run_until_complete(main())

    def _listening(self) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(10)


@pytest.fixture
def ca(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    authority = trustme.CA()
    cert = authority.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    authority.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # httpx trusts it
    yield tmp_path


def test_dns_answers_are_cached_and_shared():
    async def scenario() -> tuple[int, list[list[str]]]:
        from httpcore._backends.auto import AutoBackend

        dns = CachingBackend(AutoBackend())
        answers = await asyncio.gather(*(dns.resolve("localhost", 80) for _ in range(20)))
        answers.append(await dns.resolve("localhost", 80))
        answers.append(await dns.resolve("127.0.0.1", 80))  # an address: no look-up
        return dns.lookups, answers

    lookups, answers = asyncio.run(scenario())
    assert lookups == 1
    assert all(a == answers[0] for a in answers[:-1]) and answers[-1] == ["127.0.0.1"]


@pytest.mark.parametrize("tls", [True, False], ids=["https-h2", "http1.1"])
def test_fetches_reuse_one_connection_and_speak_h2_where_offered(ca: Path, tls: bool):
    server = Hypercorn(ca if tls else None)
    scheme = "https" if tls else "http"
    try:
        with Fetcher(FetchSettings(timeout_seconds=5.0)) as fetcher:
            results = [
                fetcher.fetch(f"{scheme}://localhost:{server.port}/f{n}.xml") for n in range(3)
            ]
    finally:
        server.close()
    assert [r.body for r in results] == [BODY] * 3
    versions = {version for version, _ in server.seen.requests}
    assert versions == ({"2"} if tls else {"1.1"})
    clients = {client for _, client in server.seen.requests}
    assert len(clients) == 1  # one connection, kept alive for the three fetches


def test_each_host_has_a_pool_of_its_own_and_idle_ones_are_closed_beyond_the_bound():
    """httpcore scans its whole pool at every request: the fetcher keeps one small pool
    per host (scheme, host, port), the least recently used closed beyond max_pools,
    never while one of its responses is still being read."""
    from test_connector_support import FeedServer, Reply

    from roses_app.connectors.hostpool import HostPools

    servers = [FeedServer() for _ in range(3)]
    for server in servers:
        server.routes["/f"] = Reply(200, BODY)
    a, b, c = (server.url("/f") for server in servers)

    async def scenario() -> list[int]:
        pools = HostPools(per_host=2, max_pools=1, http2=False)
        sizes = []
        async with httpx.AsyncClient(transport=pools) as client:
            assert (await client.get(a)).status_code == 200
            sizes.append(len(pools))
            async with client.stream("GET", b) as open_body:  # b is in flight...
                assert (await client.get(c)).status_code == 200  # ...c evicts a, keeps b
                sizes.append(len(pools))
                await open_body.aread()
            assert (await client.get(a)).status_code == 200  # evicts b and c (idle)
            sizes.append(len(pools))
            assert (await client.get(a)).status_code == 200  # reuses a's pool
            sizes.append(len(pools))
        return sizes

    try:
        assert asyncio.run(scenario()) == [1, 2, 1, 1]
        assert [len(s.hits("/f")) for s in servers] == [3, 1, 1]
    finally:
        for server in servers:
            server.close()
