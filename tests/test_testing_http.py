"""schedkit.testing.http: the body goes out byte for byte, or not at all."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from schedkit.testing.http import post_headers_only, post_raw

LIMIT = 100  # the test server refuses bodies declared larger, before reading them


class _Echo(BaseHTTPRequestHandler):
    """Answers 413 to a declared length over ``LIMIT`` without reading the body, else
    200 with the body's bytes (as a list) and the Content-Type it came with."""

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        if length > LIMIT:
            self._answer(413, {"error": "too large", "length": length})
            return
        body = self.rfile.read(length)
        if len(body) < length:  # the client went away without its body
            return
        self._answer(200, {"body": list(body), "type": self.headers["Content-Type"]})

    def _answer(self, status: int, answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_post_raw_sends_the_bytes_as_they_are_and_reads_any_status(base: str) -> None:
    data = '{"a": "é"}'.encode("utf-16")  # no client library would send this for JSON
    code, answer = post_raw(f"{base}/x", data, {"Content-Type": "application/json"})
    assert code == 200 and bytes(answer["body"]) == data
    assert answer["type"] == "application/json"
    code, answer = post_raw(f"{base}/x", b"x" * (LIMIT + 1), {})
    assert code == 413 and answer == {"error": "too large", "length": LIMIT + 1}


def test_post_headers_only_gets_the_answer_without_sending_a_body(base: str) -> None:
    code, answer = post_headers_only(base, "/x", LIMIT + 5)
    assert code == 413 and answer["length"] == LIMIT + 5
    # Under the limit the server waits for a body that never comes: the timeout says so.
    with pytest.raises(TimeoutError):
        post_headers_only(base, "/x", 3, timeout_s=0.5)
