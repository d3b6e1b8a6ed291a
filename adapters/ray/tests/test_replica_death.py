"""A replica killed under a stream: that request ends with the reason, the others finish,
and the router stops choosing the dead replica."""

from __future__ import annotations

import json
import threading
import time

import requests
from conftest import REPLICA_HEADER, complete, deploy, router_report


def _actor_of(replica: str) -> object:
    import ray
    from ray.util import list_named_actors

    names = [a for a in list_named_actors(all_namespaces=True) if replica in a["name"]]
    assert len(names) == 1, names
    return ray.get_actor(names[0]["name"], namespace=names[0]["namespace"])


def _stream(url: str, tenant: str, max_tokens: int) -> requests.Response:
    body = {"model": "Llama-3-8B", "prompt": "stream me " * 8, "max_tokens": max_tokens,
            "stream": True}  # fmt: skip
    return requests.post(f"{url}/v1/completions", json=body, headers={"x-tenant-id": tenant},
                         stream=True, timeout=60)  # fmt: skip


def test_a_killed_replica_fails_its_request_only(serve_url: str) -> None:
    import ray

    deploy(2, "test-by-tenant")
    doomed = _stream(serve_url, "last", 8000)  # far longer than the test
    victim = doomed.headers[REPLICA_HEADER]
    events = doomed.iter_lines(delimiter=b"\n\n")
    assert next(events).startswith(b"data: {")  # it is streaming
    survivor = _stream(serve_url, "first", 300)
    assert survivor.headers[REPLICA_HEADER] != victim
    done: list[bytes] = []
    lines = survivor.iter_lines(delimiter=b"\n\n")
    reader = threading.Thread(target=lambda: done.extend(e for e in lines if e))
    reader.start()
    ray.kill(_actor_of(victim), no_restart=True)
    rest = [e for e in events if e]
    last = json.loads(rest[-1].removeprefix(b"data: "))
    assert "error" in last and "mid-stream" in last["error"]["message"], rest[-1]
    assert victim in last["error"]["message"]
    reader.join(60)
    assert done[-1] == b"data: [DONE]"  # the other replica's stream was not lost
    deadline = time.monotonic() + 20
    while victim not in router_report(serve_url)["died"]:
        assert time.monotonic() < deadline, "the router was not told of the death"
        time.sleep(0.2)
    served = {complete(serve_url, tenant="last").headers[REPLICA_HEADER] for _ in range(5)}
    served |= {complete(serve_url).headers[REPLICA_HEADER] for _ in range(5)}
    assert victim not in served
    assert victim not in router_report(serve_url)["in_flight"]
