"""tiers proof: interactive and batch traffic in one fleet against separate fleets of the
same size, plain priority and fcfs, on the simulator (see tiers.md).

    python benchmarks/policies/tiers_proof.py --windows 0 6000 12000

For each window of the Azure conversation trace (``--online`` requests from request
``window``, at ``--online-rate`` times the recorded rate), the online class is that
stream (SLO 1 s TTFT, 50 ms TPOT) and the offline class a backlog of ``--offline``
Azure code-trace requests (the trace repeated as needed) submitted at 0 s with a
deadline. A fleet of ``--replicas`` simulated engines (round-robin) serves them:

- **separate**: online alone on ``online_replicas`` engines (the smallest that holds the
  SLO: 1 of 2 by default), offline alone on the rest, both fcfs;
- **shared**: the mix on every engine, under fcfs, priority and tiers.

Printed per window and arm: online SLO attainment (with a paired bootstrap 95% interval
of the change against online alone), p90 TTFT and TPOT; offline requests and tokens
completed per second while online traffic arrives (0 s to its last arrival: after it,
a shared fleet would have every engine for batch work and the comparison would flatter
it), and the share finished within the deadline.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1] / "stats"))  # bootstrap.py

from bootstrap import paired_bootstrap

from schedkit.bench.runner import Bench, BenchSpec
from schedkit.bench.stats.estimators import Mean
from schedkit.bench.stats.metrics import latencies_ms, meets_slo
from schedkit.records import RequestRecord, RunResult
from schedkit.workload import TraceRequest, load_workload

SLO_TTFT_MS, SLO_TPOT_MS = 1000.0, 50.0
SHARED = ("fcfs", "priority")


def write_jsonl(path: Path, requests: Sequence[TraceRequest]) -> None:
    with path.open("w") as out:
        for r in requests:
            row = {k: v for k, v in dataclasses.asdict(r).items() if v not in (None, ())}
            out.write(json.dumps(row) + "\n")


def streams(window: int, online: int, rate: float, offline: int, deadline: float, tmp: Path):
    """The online stream, the offline backlog and their mix, as workload files."""
    conv = load_workload("azure-conv").requests[window : window + online]
    start = conv[0].arrival_s
    on = [
        dataclasses.replace(
            r,
            request_id=f"online-{r.request_id}",
            arrival_s=(r.arrival_s - start) / rate,
            tenant="online",
            slo_ttft_ms=SLO_TTFT_MS,
            slo_tpot_ms=SLO_TPOT_MS,
        )
        for r in conv
    ]
    code = load_workload("azure-code").requests
    off = [
        dataclasses.replace(
            code[i % len(code)],
            request_id=f"offline-{i:06d}",
            arrival_s=0.0,
            tenant="offline",
            priority=1,
            deadline_s=deadline,
        )
        for i in range(offline)
    ]
    files = {}
    for name, requests in (("online", on), ("offline", off), ("mix", on + off)):
        files[name] = tmp / f"{name}.jsonl"
        write_jsonl(files[name], sorted(requests, key=lambda r: r.arrival_s))
    return files, on[-1].arrival_s


def run(workload: Path, policy: str, replicas: int) -> RunResult:
    spec = BenchSpec(workload=str(workload), policies=[policy], replicas=replicas, jobs=1)
    return Bench(spec).run_arm(0, 1.0)


def online_of(run: RunResult) -> dict[str, RequestRecord]:
    return {r.request_id: r for r in run.records if r.tenant == "online"}


def offline_rate(runs: Sequence[RunResult], until: float) -> tuple[float, float, float]:
    """Offline requests/s and tokens/s completed by ``until``, and the share done within
    the deadline, over ``runs`` (a separate fleet's engines, or one shared fleet)."""
    done = [r for run in runs for r in run.records if r.tenant == "offline"]
    early = [r for r in done if r.finish_reason in ("length", "stop") and r.finish_s <= until]
    tokens = sum(r.prompt_tokens + r.output_tokens for r in early)
    ontime = [
        r
        for r in done
        if r.finish_s is not None and r.deadline_s and r.finish_s - r.arrival_s <= r.deadline_s
    ]
    if len(early) == len(done):
        print(f"warning: the backlog drained before {until:.0f} s; its rate is a lower bound"
              " (raise --offline)", file=sys.stderr)  # fmt: skip
    return len(early) / until, tokens / until, len(ontime) / max(1, len(done))


def online_row(base: dict[str, RequestRecord], other: dict[str, RequestRecord], seed: int):
    ids = sorted(base, key=lambda i: base[i].arrival_s)
    met_a = [float(meets_slo(base[i], None, None)) for i in ids]
    met_b = [float(meets_slo(other[i], None, None)) for i in ids]
    boot = paired_bootstrap({"att": (met_a, met_b, Mean())}, seed=seed, block=100)["att"]
    ttft = sorted(latencies_ms(other[i])["ttft_ms"] or 0.0 for i in ids)
    tpot = sorted(v for i in ids if (v := latencies_ms(other[i])["tpot_ms"]) is not None)
    lo, hi = boot["ci"] or (float("nan"), float("nan"))
    return (
        f"{boot['b']:.1%} ({boot['diff']:+.1%}, CI {lo:+.1%} .. {hi:+.1%})"
        f" | {ttft[int(0.9 * len(ttft))]:,.0f} | {tpot[int(0.9 * len(tpot))]:,.1f}"
    )


def one_window(window: int, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as name:
        files, until = streams(
            window, args.online, args.online_rate, args.offline, args.deadline_s, Path(name)
        )
        alone = run(files["online"], "fcfs", args.online_replicas)
        batch = run(files["offline"], "fcfs", args.replicas - args.online_replicas)
        base = online_of(alone)
        req_s, tok_s, ontime = offline_rate([batch], until)
        print(
            f"| {window} | separate ({args.online_replicas}+"
            f"{args.replicas - args.online_replicas}) | {online_row(base, base, window)}"
            f" | {req_s:.2f} | {tok_s:,.0f} | {ontime:.1%} |"
        )
        tiers = [json.dumps({"policy": "tiers", "options": {"tiers": json.loads(o)}})
                 for o in args.tiers]  # fmt: skip
        for label, policy in [
            *zip(SHARED, SHARED, strict=True),
            *zip(args.tiers, tiers, strict=True),
        ]:
            shared = run(files["mix"], policy, args.replicas)
            req_s, tok_s, ontime = offline_rate([shared], until)
            label = label if label in SHARED else f"tiers {label}"
            print(
                f"| {window} | shared, {label} | {online_row(base, online_of(shared), window)}"
                f" | {req_s:.2f} | {tok_s:,.0f} | {ontime:.1%} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[0, 6000, 12000])
    parser.add_argument("--online", type=int, default=6000, help="online requests a window")
    parser.add_argument("--online-rate", type=float, default=2.0)
    parser.add_argument("--offline", type=int, default=24000, help="offline backlog")
    parser.add_argument("--deadline-s", type=float, default=900.0)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--online-replicas", type=int, default=1)
    parser.add_argument(
        "--tiers", nargs="+", default=["{}"], help="tiers arms: each its options as JSON"
    )
    args = parser.parse_args()
    print(
        f"azure-conv windows of {args.online} requests at {args.online_rate:g}x (SLO"
        f" {SLO_TTFT_MS:g} ms TTFT, {SLO_TPOT_MS:g} ms TPOT) + a backlog of {args.offline}"
        f" azure-code requests (deadline {args.deadline_s:g} s); {args.replicas} simulated"
        " engines (schedkit bench's defaults), round-robin\n"
    )
    print(
        "| window | fleet | online SLO attainment (change vs online alone, 95% CI)"
        " | online p90 TTFT (ms) | online p90 TPOT (ms) | offline req/s | offline tok/s"
        " | offline within deadline |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for window in args.windows:
        one_window(window, args)


if __name__ == "__main__":
    main()
