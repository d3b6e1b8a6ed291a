"""One local Ray (and Serve) per test session: starting Ray costs ~7 s, an application
~3-6 s. Tests deploy their application under the name ``t`` at ``/`` (each replaces the
last); the test policies in ``site/`` are importable by entry point in every Ray worker."""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

SITE = str(Path(__file__).with_name("site"))
ENGINE = ["--model", "Llama-3-8B", "--gpu", "H100-SXM"]
REPLICA_HEADER = "x-schedkit-replica"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def serve_url() -> Iterator[str]:
    import ray
    from ray import serve

    os.environ["PYTHONPATH"] = os.pathsep.join([SITE, os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, SITE)
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def deploy(replicas: int, policy: str | None, **spec: Any) -> None:
    """Run the application with ``replicas`` simulated engines and ``policy``'s router."""
    from ray import serve
    from schedkit.config import load_config

    from schedkit_ray.app import AppSpec, build_app

    config = None if policy is None else load_config(policy)
    app = build_app(AppSpec(replicas, config, ENGINE, **spec))
    serve.run(app, name="t", route_prefix="/")


def complete(url: str, prompt: str = "hello there", tenant: str | None = None,
             max_tokens: int = 2, **body: Any) -> requests.Response:  # fmt: skip
    headers = {"x-tenant-id": tenant} if tenant else {}
    payload = {"model": "Llama-3-8B", "prompt": prompt, "max_tokens": max_tokens, **body}
    return requests.post(f"{url}/v1/completions", json=payload, headers=headers, timeout=60)


def router_report(url: str) -> dict[str, Any]:
    found = requests.get(f"{url}/schedkit/router", timeout=10).json()
    assert len(found) == 1, found
    report: dict[str, Any] = found[0]
    return report
