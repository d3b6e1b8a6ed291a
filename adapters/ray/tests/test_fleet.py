"""The fleet as a user runs it: ``bench --engine openai`` against the Ray fleet, and the
README's fleet A/B (``benchmarks/fleet/ray_fleet.py``) in its bounded version."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import deploy, router_report
from schedkit.bench.runner import BenchSpec, run_bench
from test_replica_death import _actor_of

ROOT = Path(__file__).resolve().parents[3]


def test_a_replica_killed_mid_bench_is_reported(serve_url: str, tmp_path: Path) -> None:
    """A replica killed while a replay runs: its requests in flight fail with the reason
    naming it, every other request finishes, the router sends it nothing after its
    death, and the bench's results count the failures."""
    import ray

    deploy(3, "round-robin")
    workload = "poisson:rate=15,n=60,prompt=200,output=500"
    spec = BenchSpec(workload=workload, policies=["round-robin"], engine="openai",
                     targets=[serve_url])  # fmt: skip
    results: list[Any] = []
    replay = threading.Thread(target=lambda: results.append(run_bench(spec, tmp_path / "out")))
    replay.start()
    deadline = time.monotonic() + 30
    while True:  # a replica with requests in flight
        busy = {r: n for r, n in router_report(serve_url)["in_flight"].items() if n > 0}
        if len(busy) >= 2:
            break
        assert time.monotonic() < deadline and replay.is_alive()
        time.sleep(0.05)
    victim = max(busy, key=lambda r: busy[r])
    ray.kill(_actor_of(victim), no_restart=True)
    while victim not in router_report(serve_url)["died"]:
        assert time.monotonic() < deadline + 30, "the router was not told of the death"
        time.sleep(0.1)
    routed_at_death = sum(router_report(serve_url)["routed"].get(victim, {}).values())
    replay.join(120)
    metrics = results[0]["arms"][0]["metrics"]
    assert metrics["failed"] >= 1 and metrics["completed"] + metrics["failed"] == 60
    assert all(victim in why for why in metrics["errors"]), metrics["errors"]
    assert sum(router_report(serve_url)["routed"].get(victim, {}).values()) == routed_at_death


def test_fleet_ab_runs_beside_the_simulators_prediction(tmp_path: Path) -> None:
    """The README's fleet A/B, bounded: Ray's default router against prefix-affinity on 4
    simulated replicas, live and simulated. Every live request finishes, the paired
    verdict is there, and the live fleet's prefix hit rates are the simulator's."""
    out = tmp_path / "fleet"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/fleet/ray_fleet.py"), "--out", str(out),
         "--window", "0:30", "--arms", "ray-default,prefix-affinity"],
        capture_output=True, text=True, timeout=580,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    live = json.loads((out / "live" / "results.json").read_text())
    sim = json.loads((out / "sim" / "results.json").read_text())
    assert [a["policy"] for a in live["arms"]] == ["ray-default", "prefix-affinity"]
    for arm in live["arms"]:
        m = arm["metrics"]
        assert m["completed"] == m["requests"] and not m["errors"], m["errors"]
    assert live["comparisons"][0]["policy"] == "prefix-affinity"
    hits = {a["policy"]: a["metrics"]["prefix_hit_rate"] for a in live["arms"]}
    predicted = {a["policy"]: a["metrics"]["prefix_hit_rate"] for a in sim["arms"]}
    assert hits == pytest.approx(predicted, abs=0.02)
    table = (out / "fleet.md").read_text()
    assert "| ray-default | ttft_ms p50 |" in table and "| prefix-affinity |" in table
