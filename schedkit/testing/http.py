"""Raw HTTP for the tests of an engine's HTTP front end: a POST whose body goes out exactly
as given, and a POST of which only the headers go out.

The adapters' server suites send what a client library would tidy up or refuse to send
(bodies in other encodings, nested past a bound, larger than the limit) and read the
answer whatever its status. Standard library only."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

__all__ = ["post_headers_only", "post_raw"]


def post_raw(
    url: str, data: bytes, headers: dict[str, str], *, timeout_s: float = 60.0
) -> tuple[int, dict[str, Any]]:
    """POST ``data`` as it is: (status, JSON answer), error statuses included."""
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, dict(json.load(response))
    except urllib.error.HTTPError as error:
        return error.code, dict(json.load(error))


def post_headers_only(
    base: str, path: str, length: int, *, timeout_s: float = 60.0
) -> tuple[int, dict[str, Any]]:
    """Send only the headers of a JSON POST to ``base`` + ``path`` declaring ``length``
    bytes: (status, JSON answer). The answer comes before any body is sent (a client
    sending the body would meet a closed connection)."""
    host = urlsplit(base)
    connection = http.client.HTTPConnection(host.hostname or "", host.port, timeout=timeout_s)
    try:
        connection.putrequest("POST", path)
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(length))
        connection.endheaders()
        response = connection.getresponse()
        return response.status, dict(json.load(response))
    finally:
        connection.close()
