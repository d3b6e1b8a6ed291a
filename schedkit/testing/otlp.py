"""An OTLP/HTTP trace receiver on loopback, for tests: what an engine's OpenTelemetry
exporter sends (``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``), as one dict per
span (its name and attributes). Decoding needs ``opentelemetry-proto``, which the engines'
tracing extras install."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["otlp_receiver"]


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(the endpoint URL to export to, the spans received so far) while open."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    spans: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            for resource in ExportTraceServiceRequest.FromString(body).resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        values = {kv.key: _value(kv.value) for kv in span.attributes}
                        spans.append({"name": span.name, **values})
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1/traces", spans
    finally:
        httpd.shutdown()
        httpd.server_close()


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None
