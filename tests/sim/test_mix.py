"""Mixed workloads (schedkit.workload.mix): two workloads as the online and offline
classes, their shaping, the bundled online-offline mix, bad specs refused with the field
named; and the per-class columns the bench's metrics gain (output rate, deadlines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedkit.bench.stats.metrics import compute_metrics
from schedkit.errors import SchedkitError
from schedkit.records import RequestRecord, RunResult
from schedkit.workload import KNOWN_WORKLOADS, load_workload

ONLINE = """
[[part]]
class = "online"
workload = "{online}"
slo_ttft_ms = 500
"""
OFFLINE = """
[[part]]
class = "offline"
workload = "{offline}"
arrival = "backlog"
start_s = 2.5
deadline_s = 60
"""


def write(tmp_path: Path, text: str, name: str = "mix.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def jsonl(tmp_path: Path, name: str, rows: list[dict[str, object]]) -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_two_workloads_become_two_classes(tmp_path: Path) -> None:
    jsonl(tmp_path, "chat.jsonl", [{"arrival_s": 1.0 * i, "prompt_tokens": 10,
                                     "output_tokens": 5, "slo_ttft_ms": 100} for i in range(4)])  # fmt: skip
    jsonl(tmp_path, "batch.jsonl", [{"arrival_s": 7.0 * i, "prompt_tokens": 900,
                                      "output_tokens": 20} for i in range(3)])  # fmt: skip
    spec = (
        'name = "m"\n' + ONLINE.format(online="chat.jsonl") + OFFLINE.format(offline="batch.jsonl")
    )
    w = load_workload(str(write(tmp_path, spec)))  # parts found beside the mix file
    online = [r for r in w.requests if r.tenant == "online"]
    offline = [r for r in w.requests if r.tenant == "offline"]
    assert [r.arrival_s for r in online] == [0.0, 1.0, 2.0, 3.0]
    assert [r.arrival_s for r in offline] == [2.5, 2.5, 2.5]  # a backlog at start_s
    assert {r.priority for r in online} == {0} and {r.priority for r in offline} == {1}
    assert [r.slo_ttft_ms for r in online] == [100.0] * 4  # its own target stands
    assert {r.deadline_s for r in offline} == {60.0} and {r.deadline_s for r in online} == {None}
    assert all(r.request_id.startswith(f"{r.tenant}-") for r in w.requests)
    assert [r.arrival_s for r in w.requests] == sorted(r.arrival_s for r in w.requests)


def test_the_bundled_mix() -> None:
    assert "online-offline" in KNOWN_WORKLOADS
    w = load_workload("online-offline")
    online = [r for r in w.requests if r.tenant == "online"]
    offline = [r for r in w.requests if r.tenant == "offline"]
    assert (len(online), len(offline)) == (3000, 2000)
    assert {r.arrival_s for r in offline} == {0.0}
    assert {(r.slo_ttft_ms, r.slo_tpot_ms) for r in online} == {(1000.0, 50.0)}
    assert {r.deadline_s for r in offline} == {900.0}
    assert "conversation" in w.source and "code" in w.source and "CC-BY 4.0" in w.source


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ('name = "m"' + ONLINE.format(online="azure-conv"), "part: List should have at least 2"),
        (
            'name = "m"' + ONLINE.format(online="azure-conv") * 2,
            "one part of each class, online and offline",
        ),
        (
            'name = "m"' + ONLINE.format(online="azure-conv")
            + OFFLINE.format(offline="azure-code").replace("backlog", "burst"),
            "part[1].arrival",
        ),
        (
            'name = "m"' + ONLINE.format(online="azure-chat") + OFFLINE.format(offline="azure-code"),
            "online part: unknown workload 'azure-chat'",
        ),
        (
            'name = "m"' + ONLINE.format(online="online-offline")
            + OFFLINE.format(offline="azure-code"),
            "a mix's part cannot itself be a mix",
        ),
        (
            'name = "m"\nrate = 3' + ONLINE.format(online="azure-conv")
            + OFFLINE.format(offline="azure-code"),
            "rate: Extra inputs are not permitted",
        ),
    ],
)  # fmt: skip
def test_bad_mixes_are_refused_naming_the_field(tmp_path: Path, spec: str, expected: str) -> None:
    with pytest.raises(SchedkitError, match=r"invalid mix spec|part") as info:
        load_workload(str(write(tmp_path, spec)))
    assert expected in str(info.value)
    assert str(tmp_path / "mix.toml") in str(info.value)


def record(rid: str, tenant: str, finish: float | None, deadline: float | None) -> RequestRecord:
    r = RequestRecord(rid, tenant, 0, 0.0, 10, 4, deadline_s=deadline)
    if finish is not None:
        r.finish_reason, r.scheduled_s, r.first_token_s, r.finish_s = "length", 0.1, 0.2, finish
        r.output_tokens = 4
    return r


def test_per_class_output_rate_and_deadlines() -> None:
    records = [
        record("on-1", "online", 1.0, None),
        record("off-1", "offline", 5.0, 10.0),  # in time
        record("off-2", "offline", 15.0, 10.0),  # late
        record("off-3", "offline", None, 10.0),  # never finished
    ]
    run = RunResult(policy="fcfs", records=records, duration_s=20.0)
    tenants = compute_metrics(run, slo_ttft_ms=None, slo_tpot_ms=None)["tenants"]
    assert tenants["offline"]["deadline_met"] == 1
    assert tenants["offline"]["deadline_attainment"] == pytest.approx(1 / 3)
    assert tenants["offline"]["throughput_tok_s"] == pytest.approx(8 / 20)
    assert tenants["online"]["deadline_met"] is None
    assert tenants["online"]["throughput_tok_s"] == pytest.approx(4 / 20)
