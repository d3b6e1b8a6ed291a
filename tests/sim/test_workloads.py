from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import math
import statistics
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedkit.errors import SchedkitError
from schedkit.workload import KNOWN_WORKLOADS, TraceRequest, Workload, load_workload

# --- bundled real traces (facts from the traces' README) ----------------------------------------


def test_azure_conv_matches_the_published_trace() -> None:
    w = load_workload("azure-conv")
    arrivals = [r.arrival_s for r in w.requests]
    assert len(w.requests) == 19_366
    assert arrivals[0] == 0.0
    assert arrivals == sorted(arrivals)
    assert 57 * 60 < arrivals[-1] < 59 * 60
    s = w.summary()
    assert s["requests"] == 19_366
    assert s["prompt_p50"] == 1020
    assert abs(int(str(s["prompt_p90"])) - 2734) <= 2
    assert s["prompt_max"] == 14_050
    assert s["output_p50"] == 129
    assert s["output_p90"] == 424
    assert s["output_max"] == 1000
    assert s["tenants"] == ["default"]
    assert s["hash_block_tokens"] == 0
    assert 5.3 < float(str(s["rate_rps"])) < 5.7
    assert "CC-BY 4.0" in w.source and "Splitwise" in w.source
    assert w.requests[123].request_id == "azure-conv-000123"
    assert len({r.request_id for r in w.requests}) == len(w.requests)


def test_azure_code_matches_the_published_trace() -> None:
    s = load_workload("azure-code").summary()
    assert s["requests"] == 8_819
    assert s["prompt_p50"] == 1469
    assert s["prompt_max"] == 7437
    assert s["output_p50"] == 13
    assert s["output_max"] == 1899


def test_mooncake_carries_prefix_block_hashes() -> None:
    w = load_workload("mooncake-conv")
    assert len(w.requests) == 12_031
    assert w.hash_block_tokens == 512
    assert w.requests[0].arrival_s == 0.0
    assert 58 * 60 < w.requests[-1].arrival_s < 60 * 60
    # one hash per 512 prompt tokens, the last block possibly partial
    assert all(len(r.hash_ids) == math.ceil(r.prompt_tokens / 512) for r in w.requests)
    refs = [h for r in w.requests for h in r.hash_ids]
    reuse = 1 - len(set(refs)) / len(refs)
    assert 0.30 < reuse < 0.45  # README: about 37% of block references are reuses
    assert "Apache-2.0" in w.source


def test_bundled_traces_are_package_data_with_licences() -> None:
    data = resources.files("schedkit") / "data"
    for name in (
        "azure-2023-conv.csv.gz",
        "azure-2023-code.csv.gz",
        "mooncake-fast25-conversation.jsonl.gz",
        "two-tenant-flood.toml",
        "two-class.toml",
    ):
        assert (data / name).is_file(), name
    licences = (data / "TRACES-LICENSES.md").read_text(encoding="utf-8")
    for text in ("CC-BY 4.0", "Apache", "Splitwise", "Mooncake", "AzurePublicDataset"):
        assert text in licences


def test_loaded_traces_are_cached_per_process() -> None:
    assert load_workload("azure-conv") is load_workload("azure-conv")
    assert load_workload("azure-conv", seed=3) is load_workload("azure-conv")


# --- Workload operations -----------------------------------------------------------------------


def test_scaling_by_two_halves_the_span() -> None:
    w = load_workload("azure-code")
    fast = w.scaled(2.0)
    assert len(fast.requests) == len(w.requests)
    assert fast.requests[-1].arrival_s == pytest.approx(w.requests[-1].arrival_s / 2)
    assert [r.prompt_tokens for r in fast.requests] == [r.prompt_tokens for r in w.requests]
    assert float(str(fast.summary()["rate_rps"])) == pytest.approx(
        2 * float(str(w.summary()["rate_rps"]))
    )
    assert w.scaled(1.0) is w


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_scaling_rejects_non_positive_factors(bad: float) -> None:
    with pytest.raises(SchedkitError, match="rate_scale"):
        load_workload("azure-code").scaled(bad)


def test_truncation_keeps_the_first_requests() -> None:
    w = load_workload("azure-conv")
    short = w.truncated(100)
    assert short.requests == w.requests[:100]
    assert short.name == w.name and short.source == w.source
    assert w.truncated(10**9) is w
    with pytest.raises(SchedkitError, match="max_requests"):
        w.truncated(0)


def test_default_slos_fill_only_what_requests_leave_unset() -> None:
    w = Workload(
        "w",
        (
            TraceRequest("a", 0.0, 10, 2),
            TraceRequest("b", 1.0, 10, 2, slo_ttft_ms=250.0),
            TraceRequest("c", 2.0, 10, 2, slo_tpot_ms=5.0),
        ),
    )
    filled = w.with_default_slos(800.0, 40.0)
    assert [(r.slo_ttft_ms, r.slo_tpot_ms) for r in filled.requests] == [
        (800.0, 40.0),
        (250.0, 40.0),
        (800.0, 5.0),
    ]
    assert [
        dataclasses.replace(r, slo_ttft_ms=None, slo_tpot_ms=None) for r in filled.requests
    ] == [dataclasses.replace(r, slo_ttft_ms=None, slo_tpot_ms=None) for r in w.requests]
    assert filled.with_default_slos(1.0, 1.0) is filled  # nothing left unset
    assert w.with_default_slos(None, None) is w
    ttft_only = w.with_default_slos(800.0, None)
    assert [r.slo_tpot_ms for r in ttft_only.requests] == [None, None, 5.0]
    for bad in (0, -1.0, math.inf, math.nan, True, "1000"):
        with pytest.raises(SchedkitError, match="default SLO ttft_ms"):
            w.with_default_slos(bad, None)  # type: ignore[arg-type]


def test_workload_sorts_requests_stably() -> None:
    reqs = [
        TraceRequest("b", 2.0, 1, 1),
        TraceRequest("a1", 1.0, 1, 1),
        TraceRequest("a2", 1.0, 1, 1),
    ]
    w = Workload("w", tuple(reqs))
    assert [r.request_id for r in w.requests] == ["a1", "a2", "b"]


def test_summary_of_empty_workload() -> None:
    s = Workload("empty", ()).summary()
    assert s["requests"] == 0 and s["span_s"] == 0.0 and s["prompt_p50"] == 0


# --- synthetic streams -------------------------------------------------------------------------


def test_synthetic_is_deterministic_per_seed() -> None:
    spec = "poisson:rate=5,n=500"
    assert load_workload(spec, seed=1).requests == load_workload(spec, seed=1).requests
    assert load_workload(spec, seed=1).requests != load_workload(spec, seed=2).requests
    inline = load_workload("gamma:rate=5,cv=2,n=500,seed=7").requests
    assert inline != load_workload("gamma:rate=5,cv=2,n=500,seed=8").requests
    assert inline == load_workload("gamma:rate=5,cv=2,n=500", seed=7).requests


def test_poisson_mean_rate() -> None:
    w = load_workload("poisson:rate=5,n=20000,seed=11")
    assert len(w.requests) == 20_000
    assert len(w.requests) / w.requests[-1].arrival_s == pytest.approx(5.0, rel=0.05)
    gaps = _gaps(w)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, rel=0.1)


def test_gamma_arrivals_have_the_requested_burstiness() -> None:
    w = load_workload("gamma:rate=5,cv=3,n=50000,seed=5")
    gaps = _gaps(w)
    assert 1 / statistics.fmean(gaps) == pytest.approx(5.0, rel=0.15)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(3.0, rel=0.2)


def test_length_distributions() -> None:
    const = load_workload("poisson:rate=5,n=200,prompt=const:512,output=const:64")
    assert {r.prompt_tokens for r in const.requests} == {512}
    assert {r.output_tokens for r in const.requests} == {64}
    drawn = load_workload("poisson:rate=5,n=20000,prompt=1000,output=lognormal:100:0.5")
    assert statistics.fmean(r.prompt_tokens for r in drawn.requests) == pytest.approx(
        1000, rel=0.05
    )
    assert statistics.fmean(r.output_tokens for r in drawn.requests) == pytest.approx(100, rel=0.05)
    assert len({r.prompt_tokens for r in drawn.requests}) > 100


def test_duration_bounds_the_stream() -> None:
    w = load_workload("poisson:rate=10,duration=60")
    assert all(r.arrival_s < 60 for r in w.requests)
    assert 450 < len(w.requests) < 750


@settings(max_examples=30, deadline=None)
@given(
    rate=st.floats(0.1, 100),
    cv=st.one_of(st.none(), st.floats(0.2, 5)),
    n=st.integers(1, 300),
    seed=st.integers(0, 10**6),
)
def test_synthetic_invariants(rate: float, cv: float | None, n: int, seed: int) -> None:
    spec = f"gamma:rate={rate},cv={cv},n={n}" if cv else f"poisson:rate={rate},n={n}"
    w = load_workload(spec + ",prompt=300,output=lognormal:50:1.5", seed=seed)
    arrivals = [r.arrival_s for r in w.requests]
    assert len(w.requests) == n
    assert arrivals == sorted(arrivals) and arrivals[0] >= 0
    assert all(1 <= r.prompt_tokens <= 8 * 300 for r in w.requests)
    assert all(1 <= r.output_tokens <= 8 * 50 for r in w.requests)
    assert len({r.request_id for r in w.requests}) == n


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("poisson:rate=0,n=10", "rate"),
        ("poisson:n=10", "rate"),
        ("poisson:rate=5", "exactly one of n and duration"),
        ("poisson:rate=5,n=10,cv=2", "cv"),
        ("gamma:rate=5,n=10", "cv"),
        ("poisson:rate=5,n=10,colour=red", "colour"),
        ("poisson:rate=5,n=ten", "n="),
        ("poisson:rate=5,n=10,prompt=huge", "prompt="),
    ],
)
def test_bad_inline_specs_name_the_problem(spec: str, needle: str) -> None:
    with pytest.raises(SchedkitError, match="Syntax") as info:
        load_workload(spec)
    assert needle in str(info.value)


# --- workload-spec files -----------------------------------------------------------------------

_SPEC = """
name = "mix"
n = 3000
seed = 4
[[tenant]]
name = "big"
rate = 20.0
arrival = "gamma"
cv = 2.0
priority = 1
prompt_mean = 2000
output_mean = 200
slo_class = "batch"
[[tenant]]
name = "small"
rate = 2.0
priority = 0
prompt_mean = 100
prompt_sigma = 0
output_mean = 10
slo_class = "interactive"
[slo_class.interactive]
ttft_ms = 250
tpot_ms = 40
[slo_class.batch]
ttft_ms = 5000
"""


def test_multi_tenant_spec_mixes_tenants_with_their_slos(tmp_path: Path) -> None:
    path = tmp_path / "mix.toml"
    path.write_text(_SPEC)
    w = load_workload(str(path))
    assert w.name == "mix" and len(w.requests) == 3000
    by_tenant = {t: [r for r in w.requests if r.tenant == t] for t in ("big", "small")}
    big, small = by_tenant["big"], by_tenant["small"]
    assert 6 < len(big) / len(small) < 15  # rates 20 vs 2
    assert {(r.priority, r.slo_ttft_ms, r.slo_tpot_ms) for r in big} == {(1, 5000.0, None)}
    assert {(r.priority, r.slo_ttft_ms, r.slo_tpot_ms) for r in small} == {(0, 250.0, 40.0)}
    assert {r.prompt_tokens for r in small} == {100}
    assert small[0].request_id == "small-000000"
    assert [r.arrival_s for r in w.requests] == sorted(r.arrival_s for r in w.requests)
    assert load_workload(str(path)).requests == w.requests
    assert load_workload(str(path), seed=1).requests != w.requests


def test_json_spec_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    spec = {"name": "one", "duration_s": 20, "tenant": [{"name": "t", "rate": 3}]}
    path.write_text(json.dumps(spec))
    w = load_workload(str(path))
    assert {r.tenant for r in w.requests} == {"t"}
    assert all(r.arrival_s < 20 for r in w.requests)


def test_bundled_example_specs() -> None:
    assert {"two-tenant-flood", "two-class"} <= set(KNOWN_WORKLOADS)
    flood = load_workload("two-tenant-flood")
    counts = {t: sum(r.tenant == t for r in flood.requests) for t in ("flood", "quiet")}
    assert 6 < counts["flood"] / counts["quiet"] < 15
    assert {r.priority for r in flood.requests} == {0}
    two = load_workload("two-class")
    prio = {r.tenant: r.priority for r in two.requests}
    assert prio == {"interactive": 0, "batch": 1}
    assert {r.slo_ttft_ms for r in two.requests if r.tenant == "interactive"} == {500.0}


@pytest.mark.parametrize(
    ("edit", "needles"),
    [
        (("rate = 2.0", "rate = -1.0"), ["tenant[1] ('small').rate", "greater than 0"]),
        (("prompt_sigma = 0", "prompt_sigm = 0"), ["tenant[1] ('small').prompt_sigm", "Extra"]),
        (('slo_class = "batch"', 'slo_class = "bulk"'), ["'bulk'", "not defined"]),
        (("cv = 2.0", ""), ["tenant[0] ('big')", "needs cv"]),
        (('name = "mix"\nn = 3000', 'name = "mix"'), ["exactly one of duration_s"]),
        (("rate = 20.0", 'rate = "fast"'), ["tenant[0] ('big').rate"]),
    ],
)
def test_bad_spec_fields_are_named(
    tmp_path: Path, edit: tuple[str, str], needles: list[str]
) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(_SPEC.replace(*edit, 1))
    with pytest.raises(SchedkitError) as info:
        load_workload(str(path))
    message = str(info.value)
    assert "broken.toml" in message
    for needle in needles:
        assert needle in message


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "junk.toml"
    path.write_text("name = \n")
    with pytest.raises(SchedkitError, match=r"junk\.toml.*not valid TOML"):
        load_workload(str(path))


# --- trace files -------------------------------------------------------------------------------

_CSV = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 23:59:59.5000000,100,10\n"
    "2023-11-17 00:00:00.2500000,200,20\n"
    "2023-11-16 23:59:59.7500000,300,30\n"
)


def test_azure_csv_file_plain_and_gzipped(tmp_path: Path) -> None:
    plain, packed = tmp_path / "mine.csv", tmp_path / "packed.csv.gz"
    plain.write_text(_CSV)
    packed.write_bytes(gzip.compress(_CSV.encode()))
    w = load_workload(str(plain))
    assert w.name == "mine"
    assert [(r.request_id, r.arrival_s, r.prompt_tokens) for r in w.requests] == [
        ("mine-000000", 0.0, 100),
        ("mine-000002", pytest.approx(0.25), 300),
        ("mine-000001", pytest.approx(0.75), 200),  # crosses midnight
    ]
    assert load_workload(str(packed)).requests[0].request_id == "packed-000000"


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("2023-11-16 23:59:59.9,100", "expected 3 columns"),
        ("2023-11-16 23:59:59.9,lots,10", "ContextTokens 'lots'"),
        ("2023-11-16 23:59:59.9,100,-5", "GeneratedTokens must be a non-negative integer"),
        ("2023-11-16 25:00:00.0,100,10", "bad TIMESTAMP"),
        ("yesterday,100,10", "bad TIMESTAMP"),
    ],
)
def test_malformed_csv_line_is_reported_with_file_and_line(
    tmp_path: Path, row: str, needle: str
) -> None:
    path = tmp_path / "trace.csv"
    lines = _CSV.splitlines()
    path.write_text("\n".join([*lines[:2], row, *lines[2:]]) + "\n")
    with pytest.raises(SchedkitError) as info:
        load_workload(str(path))
    message = str(info.value)
    assert "trace.csv: line 3:" in message
    assert needle in message


def test_csv_without_the_azure_header(tmp_path: Path) -> None:
    path = tmp_path / "headless.csv"
    path.write_text("1,2,3\n")
    with pytest.raises(SchedkitError, match=r"headless\.csv: line 1: expected the Azure"):
        load_workload(str(path))


def _jsonl(path: Path, rows: Sequence[object]) -> str:
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return str(path)


def test_mooncake_format_file(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 1500, "input_length": 100, "output_length": 3, "hash_ids": [0]},
    ]
    w = load_workload(_jsonl(tmp_path / "mc.jsonl", rows))
    assert w.hash_block_tokens == 512
    assert [(r.arrival_s, r.hash_ids) for r in w.requests] == [(0.0, (0, 1)), (0.5, (0,))]


def test_schedkit_jsonl_file(tmp_path: Path) -> None:
    rows: list[object] = [
        {"workload": {"name": "own", "hash_block_tokens": 16, "source": "made by hand"}},
        {"arrival_s": 0.5, "prompt_tokens": 40, "output_tokens": 4, "hash_ids": [7, 8, 9]},
        {"arrival_s": 0.1, "prompt_tokens": 10, "output_tokens": 2, "tenant": "b", "priority": 2},
        {"arrival_s": 0.9, "prompt_tokens": 10, "output_tokens": 2, "slo_ttft_ms": 300},
    ]
    w = load_workload(_gz(tmp_path / "own.jsonl.gz", rows))
    assert (w.name, w.source, w.hash_block_tokens) == ("own", "made by hand", 16)
    assert [r.request_id for r in w.requests] == ["own-000001", "own-000000", "own-000002"]
    assert w.requests[0] == TraceRequest("own-000001", 0.1, 10, 2, tenant="b", priority=2)
    assert w.requests[1].hash_ids == (7, 8, 9)
    assert w.requests[2].slo_ttft_ms == 300.0


def _gz(path: Path, rows: Sequence[object]) -> str:
    path.write_bytes(gzip.compress("\n".join(json.dumps(r) for r in rows).encode()))
    return str(path)


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('{"arrival_s": 1.0, "prompt_tokens": 5', "not valid JSON"),
        ('{"arrival_s": 1.0, "prompt_tokens": 5}', "missing required field(s) ['output_tokens']"),
        ('{"arrival_s": 1.0, "prompt_tokens": -5, "output_tokens": 1}', "prompt_tokens must"),
        ('{"arrival_s": 1.0, "prompt_tokens": 5.5, "output_tokens": 1}', "prompt_tokens must"),
        ('{"arrival_s": 1.0, "prompt_tokens": 5, "output_tokens": 1, "x": 1}', "unknown field"),
        ('{"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 1, "hash_ids": [1]}', "block"),
        ('{"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 1, "request_id": "a"}', "dup"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_malformed_jsonl_line_is_reported_with_file_and_line(
    tmp_path: Path, line: str, needle: str
) -> None:
    path = tmp_path / "bad.jsonl"
    first = '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "request_id": "a"}'
    path.write_text(f"{first}\n\n{line}\n")
    with pytest.raises(SchedkitError) as info:
        load_workload(str(path))
    assert "bad.jsonl: line 3:" in str(info.value)
    assert needle in str(info.value)


def test_malformed_mooncake_line(tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 5, "output_length": 1}, {"timestamp": 5}]
    with pytest.raises(SchedkitError, match=r"mc\.jsonl: line 2: missing required field"):
        load_workload(_jsonl(tmp_path / "mc.jsonl", rows))


def test_edited_file_is_parsed_again(tmp_path: Path) -> None:
    path = tmp_path / "live.csv"
    path.write_text(_CSV)
    assert len(load_workload(str(path)).requests) == 3
    path.write_text(_CSV + "2023-11-17 00:00:01.0,1,1\n")
    assert len(load_workload(str(path)).requests) == 4


def test_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.jsonl"
    with pytest.raises(SchedkitError, match=r"nowhere\.jsonl.*does not exist"):
        load_workload(str(missing))


def test_unknown_workload_lists_known_names_and_syntaxes() -> None:
    with pytest.raises(SchedkitError) as info:
        load_workload("azure-chat")
    message = str(info.value)
    assert "'azure-chat'" in message
    for name in KNOWN_WORKLOADS:
        assert name in message
    assert "poisson:rate=" in message and "gamma:" in message and ".jsonl" in message


def _gaps(w: Workload) -> list[float]:
    arrivals = [0.0] + [r.arrival_s for r in w.requests]
    return [b - a for a, b in itertools.pairwise(arrivals)]
