"""The real-engine replay kit (``schedkit.bench.engines.real_arm.RealArm``), with no engine behind it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from schedkit.bench.engines.real_arm import RealArm
from schedkit.bench.engines.requests import ModelInfo
from schedkit.bench.runner import Bench, BenchSpec
from schedkit.errors import SchedkitError
from schedkit.records import RunResult

# (arrival, prompt, output); the file is out of arrival order on purpose.
TRACE = [(0.3, 32, 8), (0.1, 20, 4), (0.2, 100, 50)]


class FakeArm(RealArm):
    """An arm whose 'engine' is a script: ``run`` gives each request its outputs."""

    engine_name = "fake"
    fail = False

    def __init__(self, bench: Bench, index: int, rate_scale: float, info: ModelInfo) -> None:
        super().__init__(bench, index, rate_scale, info, block_size=8)
        self.closed = 0

    def run(self) -> RunResult:
        if self.fail:
            raise RuntimeError("engine lost")
        for rec in self.records:
            self.record_tokens(rec, rec.max_tokens, rec.arrival_s + 1.0)
            self.end(rec, "length", None, rec.arrival_s + 1.0)
        return self.finish_run(9.0, steps=3)

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 512,
        "max_position_embeddings": 2048,
    }
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    return tmp_path / "model"


@pytest.fixture
def bench(tmp_path: Path, model_dir: Path) -> Bench:
    trace = tmp_path / "trace.jsonl"
    lines = [{"arrival_s": a, "prompt_tokens": p, "output_tokens": o} for a, p, o in TRACE]
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return Bench(BenchSpec(workload=str(trace), policies=["fcfs"], model=str(model_dir)))


def _arm(bench: Bench, max_positions: int = 2048) -> FakeArm:
    return FakeArm(bench, 0, 1.0, ModelInfo(Path("/models/tiny"), 512, max_positions))


def test_arm_replays_in_arrival_order_on_the_wall_clock(bench: Bench) -> None:
    arm = _arm(bench)
    assert [r.arrival_s for r in arm.records] == [0.1, 0.2, 0.3]
    assert [len(p) for p in arm.prompts] == [20, 100, 32]
    assert all(8 <= t < 512 for p in arm.prompts for t in p)  # in the model's vocabulary
    assert arm.result.policy == "fcfs" and arm.block_size == 8
    info = bench.engine_info
    assert info["gpu"] == "this machine (wall clock)" and "cost_model" not in info
    assert info["real"] == {
        "model_dir": "/models/tiny",
        "max_model_len": 151,
        "clipped_requests": 0,
        "clock": "wall",
    }
    assert info["real"] is arm.real_info  # engines add their own keys there


def test_requests_longer_than_the_model_are_clipped_with_a_warning(
    bench: Bench, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="schedkit"):
        arm = _arm(bench, max_positions=64)
    assert caplog.messages == ["--engine fake: 1 of 3 requests clipped to the model's 64 positions"]
    assert (arm.records[1].prompt_tokens, arm.records[1].max_tokens) == (14, 50)
    assert bench.engine_info["real"]["clipped_requests"] == 1
    assert bench.engine_info["real"]["max_model_len"] == 64


def test_tokens_count_one_gap_each_and_none_within_one_output(bench: Bench) -> None:
    arm = _arm(bench)
    rec = arm.records[2]  # 8 tokens
    assert [arm.record_tokens(rec, n, t) for n, t in [(1, 0.5), (2, 0.6), (5, 0.9)]] == [1, 1, 3]
    assert arm.record_tokens(rec, 5, 0.95) == 0  # an output with no new token
    assert arm.record_tokens(rec, 8, 1.0) == 3
    assert (rec.first_token_s, rec.finish_s, rec.output_tokens) == (0.5, 1.0, 8)
    other = arm.records[0]
    assert arm.record_tokens(other, 3, 2.0) == 3  # the first output carries three tokens
    assert other.first_token_s == 2.0
    result = arm.finish_run(0.0, steps=0)
    # 0.5 -> 0.6 -> 0.9 (+2 together) -> 1.0 (+2 together); 2 together after the first.
    assert result.itl == [(0.0, 6), (0.1, 2), (0.3, 1)]
    assert sum(n for _, n in result.itl) == (8 - 1) + (3 - 1)


def test_a_single_new_token_adds_no_zero_gap(bench: Bench) -> None:
    arm = _arm(bench)
    rec = arm.records[0]
    arm.record_tokens(rec, 1, 0.5)
    arm.record_tokens(rec, 2, 0.75)
    assert arm.finish_run(0.0, steps=0).itl == [(0.25, 1)]


@pytest.mark.parametrize(
    ("reason", "message", "finish_reason", "reject_reason"),
    [
        ("abort", "rejected: tenant over quota", "rejected", "tenant over quota"),
        ("abort", "rejected:", "rejected", "rejected"),
        ("abort", "client gone", "aborted", ""),
        ("abort", None, "aborted", ""),
        ("stop", "rejected: not an abort", "stop", ""),
        ("length", None, "length", ""),
    ],
)
def test_end_reads_rejections_from_abort_messages(
    bench: Bench, reason: str, message: object, finish_reason: str, reject_reason: str
) -> None:
    arm = _arm(bench)
    rec = arm.records[0]
    finished = arm.end(rec, reason, message, 1.5)
    assert rec.finish_reason == finish_reason and rec.reject_reason == reject_reason
    assert finished is (reject_reason == "")
    assert rec.finish_s == (None if reject_reason else 1.5)
    assert arm.result.rejections == ({reject_reason: 1} if reject_reason else {})


def test_a_rejection_clears_times_and_counts_by_reason(bench: Bench) -> None:
    arm = _arm(bench)
    first, second = arm.records[0], arm.records[1]
    first.scheduled_s = 0.2
    arm.record_tokens(first, 1, 0.4)
    arm.reject(first, "late")
    arm.reject(second, "late")
    cleared = arm.records[0]  # first, read afresh (a type checker keeps the 0.2 set above)
    assert cleared is first
    assert (cleared.scheduled_s, cleared.first_token_s, cleared.finish_s) == (None, None, None)
    assert first.rejected and second.rejected
    assert arm.result.rejections == {"late": 2}


def test_kv_pre_check_rejects_what_could_never_fit(bench: Bench) -> None:
    arm = _arm(bench)
    rec = arm.records[0]  # 20 + 4 tokens: 3 blocks of 8
    assert arm.fits_kv(rec, 3) and rec.finish_reason == ""
    assert not arm.fits_kv(rec, 2)
    assert rec.rejected
    assert rec.reject_reason == "prompt + max_tokens need 3 KV blocks, capacity is 2"
    assert arm.result.rejections == {rec.reject_reason: 1}


def test_run_arm_runs_and_closes_the_arm(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    arms: list[FakeArm] = []
    init = FakeArm.__init__

    def keep(self: FakeArm, *args: Any) -> None:
        init(self, *args)
        arms.append(self)

    monkeypatch.setattr(FakeArm, "__init__", keep)
    result = FakeArm.run_arm(bench, 0, 1.0)
    assert arms[0].closed == 1 and arms[0].info.vocab_size == 512
    assert result.steps == 3 and all(r.finish_reason == "length" for r in result.records)
    assert result.duration_s == 1.3  # the last finish, not the replay's end
    monkeypatch.setattr(FakeArm, "fail", True)
    with pytest.raises(RuntimeError, match="engine lost"):
        FakeArm.run_arm(bench, 0, 1.0)
    assert arms[1].closed == 1


def test_run_arm_needs_a_model_directory(tmp_path: Path) -> None:
    bench = Bench(BenchSpec(workload="poisson:rate=20,n=2", policies=["fcfs"]))
    with pytest.raises(SchedkitError, match="--engine fake needs --model PATH"):
        FakeArm.run_arm(bench, 0, 1.0)
