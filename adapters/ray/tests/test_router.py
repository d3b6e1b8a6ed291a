"""The router on a real local Ray: the policy's choice is where requests go, faults fall
back to Ray's power-of-two choice and are counted, no policy is Ray's own router."""

from __future__ import annotations

from collections import Counter

import requests
from conftest import REPLICA_HEADER, complete, deploy, router_report


def test_the_policy_chooses_the_replica(serve_url: str) -> None:
    deploy(3, "test-by-tenant")
    served = [complete(serve_url, tenant="last").headers[REPLICA_HEADER] for _ in range(6)]
    report = router_report(serve_url)
    replicas = report["replicas"]  # index order: sorted replica ids
    assert len(replicas) == 3
    assert served == [replicas[-1]] * 6
    assert report["routed"] == {replicas[-1]: {"policy": 6}}
    served = [complete(serve_url, tenant="first").headers[REPLICA_HEADER] for _ in range(4)]
    assert served == [replicas[0]] * 4
    assert router_report(serve_url)["fallbacks"] == {}


def test_faults_fall_back_to_ray_and_are_counted(serve_url: str) -> None:
    deploy(3, "test-by-tenant", budget_ms=50.0)
    for tenant in ("raise", "invalid", "anyone"):
        for _ in range(4):
            answer = complete(serve_url, tenant=tenant)
            assert answer.status_code == 200 and answer.json()["choices"][0]["text"]
    slow = complete(serve_url, tenant="slow")
    assert slow.status_code == 200
    report = router_report(serve_url)
    assert report["fallbacks"] == {"raised": 4, "invalid": 4, "none": 4, "timeout": 1}
    by = Counter()
    for counts in report["routed"].values():
        by.update(counts)
    assert by == {"fallback": 13}
    # Ray's power-of-two choice spread them (all on one of three: about 3 in 10^6)
    assert len(report["routed"]) > 1
    metrics = requests.get(f"{serve_url}/metrics", timeout=10).text
    assert 'schedkit_ray_fallbacks_total{reason="raised"} 4' in metrics


def test_no_policy_is_rays_own_router(serve_url: str) -> None:
    deploy(2, None)
    served = Counter(complete(serve_url).headers[REPLICA_HEADER] for _ in range(12))
    assert requests.get(f"{serve_url}/schedkit/router", timeout=10).json() == []
    assert len(served) == 2  # random choices: all 12 on one replica has odds 1 in 2048


def test_prefix_affinity_sends_a_shared_prefix_back(serve_url: str) -> None:
    # test-by-tenant sends tenant "last" to the highest index; everyone else is routed by
    # prefix-affinity, whose only reason to pick that replica over index 0 (same load)
    # is the prefix the router saw go there
    deploy(3, "test-by-tenant+prefix-affinity")
    shared = " ".join(f"w{i}" for i in range(96))
    first = complete(serve_url, shared + " one", tenant="last")
    home = first.headers[REPLICA_HEADER]
    again = [complete(serve_url, shared + f" then {i}") for i in range(3)]
    assert {a.headers[REPLICA_HEADER] for a in again} == {home}
    cached = [a.json()["usage"]["prompt_tokens_details"]["cached_tokens"] for a in again]
    assert min(cached) > 0  # the engine there had the prefix
    report = router_report(serve_url)
    assert report["routed"][home] == {"policy": 4}
    assert report["prefix_blocks"][home] >= 96 // 16
    other = complete(serve_url, "a different prompt " * 20)
    assert other.headers[REPLICA_HEADER] != home  # nothing cached: ties go to index 0


def test_chat_and_models_pass_through(serve_url: str) -> None:
    deploy(2, "prefix-affinity")
    models = requests.get(f"{serve_url}/v1/models", timeout=10).json()
    assert models["data"][0]["id"] == "Llama-3-8B"
    assert requests.get(f"{serve_url}/health", timeout=10).status_code == 200
    body = {"model": "Llama-3-8B", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2, "stream": True}  # fmt: skip
    answer = requests.post(f"{serve_url}/v1/chat/completions", json=body, timeout=60)
    events = [line for line in answer.text.split("\n\n") if line]
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "data: [DONE]" and "chat.completion.chunk" in events[0]
    refused = complete(serve_url, max_tokens=-1)
    assert refused.status_code == 400 and "error" in refused.json()
