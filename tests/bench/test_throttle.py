"""The shaping proxy of the streaming study (bench.objectstore.throttle) over real TCP: it caps the bandwidth from the
server to its clients, adds its delay, and counts the bytes it carried."""

from __future__ import annotations

import http.server
import threading
import time
import urllib.request

import pytest

from bench.objectstore.throttle import ShapedLink

BODY = bytes(range(256)) * 4096  # 1 MiB


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()


def _get(port: int) -> tuple[bytes, float]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as r:
        body = r.read()
    return body, time.perf_counter() - t0


def test_the_link_caps_delays_and_counts(server):
    with ShapedLink(server, rate_bytes_s=4e6, delay_s=0.05) as link:
        body, took = _get(link.port)
        assert body == BODY
        assert took >= len(BODY) / 4e6 + 0.05 * 0.9  # 1 MiB at 4 MB/s, plus the delay at least once
        assert len(BODY) <= link.bytes_down < len(BODY) + 4096  # the body and the response's headers
        _get(link.port)
        assert link.bytes_down >= 2 * len(BODY)


def test_an_open_link_is_not_slowed(server):
    with ShapedLink(server) as link:
        body, took = _get(link.port)
    assert body == BODY and took < 1.0
