"""The simulator's disaggregated deployments against published disaggregated-vs-aggregated
results (issue #42).

Each row of ``disagg-published.toml`` is a published figure (or curve) with its source
and conditions, and names the ``[sim.*]`` deployment that reproduces it: DistServe's
OPT-13B/66B chatbot placements against its vLLM baseline (per-GPU goodput at 90% SLO
attainment, their ratio, Table 2's attainment curves), and vLLM's chunked-prefill vs
1P1D benchmark on Llama-3.1-70B (mean TTFT and ITL by rate). This script replays each
row's requests through the simulator (the bench's own arms, ``schedkit.bench``) and
prints published against simulated, their relative difference, and for disaggregated
runs where time went (the phases of ``results.json``'s ``disaggregated``).

    .venv/bin/python benchmarks/fidelity/disagg_published.py [--json FILE] [--only ID]

ShareGPT is not shipped with schedkit: DistServe's rows replay a stand-in with the
lengths of the Azure 2023 conversation trace cut as DistServe cuts ShareGPT (prompt plus
output under OPT's 2,048 positions), on Poisson arrivals; the results' md says what that
changes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schedkit.bench.arms import parse_arm
from schedkit.bench.runner import Bench
from schedkit.bench.spec import BenchSpec
from schedkit.records import RequestRecord, RunResult
from schedkit.workload.loader import load_workload

HERE = Path(__file__).parent
FIGURES = HERE / "disagg-published.toml"
REQUESTS = 1000  # per run: enough for a steady state at every rate probed
ATTAINMENT = 0.9
BISECTIONS = 6  # the goodput to within 1/64 of its bracket
SEEDS = 5  # request streams averaged for a figure at a given rate


# -- workloads ------------------------------------------------------------------------


def poisson(n: int, seed: int) -> list[float]:
    """``n`` Poisson arrivals scaled to exactly 1 req/s, so that a run's rate scale is its
    request rate."""
    rng, t, times = random.Random(seed), 0.0, []
    for _ in range(n):
        times.append(t)
        t += rng.expovariate(1.0)
    return [x * (n - 1) / times[-1] for x in times]


def sharegpt_standin(n: int, seed: int = 0, output_scale: float = 1.0) -> list[tuple[int, int]]:
    """``n`` (prompt, output) lengths drawn from azure-conv, kept as DistServe keeps
    ShareGPT's (0-prepare-dataset.py: prompt + output under 2,048, not both under 4);
    outputs times ``output_scale``."""
    lengths = [
        (r.prompt_tokens, max(1, round(r.output_tokens * output_scale)))
        for r in load_workload("azure-conv").requests
        if r.prompt_tokens + r.output_tokens < 2048
        and not (r.prompt_tokens < 4 and r.output_tokens < 4)
    ]
    return random.Random(seed).sample(lengths, n)


def workload_file(
    folder: Path, name: str, row: dict[str, Any], seed: int, output_scale: float
) -> Path:
    """The row's requests (``num_prompts`` of them, else ``REQUESTS``) as a schedkit JSONL
    trace at 1 req/s in ``folder``; ``seed`` draws the lengths (the stand-in's) and the
    arrivals."""
    n = int(row.get("num_prompts") or REQUESTS)
    if name == "sharegpt-standin":
        lengths = sharegpt_standin(n, seed, output_scale)
    else:
        lengths = [(int(row["prompt_tokens"]), int(row["output_tokens"]))] * n
    path = folder / f"{name}-{n}-{lengths[0][0]}-{lengths[0][1]}-{seed}.jsonl"
    with path.open("w") as out:
        for i, (t, (prompt, output)) in enumerate(zip(poisson(n, seed), lengths, strict=True)):
            request = {"request_id": f"r{i}", "arrival_s": t, "prompt_tokens": prompt}
            out.write(json.dumps({**request, "output_tokens": output}) + "\n")
    return path


# -- runs -----------------------------------------------------------------------------


def deployment(setup: dict[str, Any], workload: Path) -> tuple[Bench, int]:
    """The bench of one ``[sim.*]`` deployment, and how many GPUs it takes."""
    model = setup["model"]
    folder = HERE / "models" / model
    spec = BenchSpec(
        workload=str(workload),
        arms=[parse_arm(setup["arm"])],
        model=str(folder) if folder.is_dir() else model,
        gpu=setup["gpu"],
        **setup["settings"],
    )
    bench = Bench(spec)
    arm = bench.for_arm(0)
    if arm.disagg is not None:
        return bench, arm.disagg.gpus
    return bench, arm.spec.settings.tp * arm.spec.settings.replicas


def first_token(record: RequestRecord, ttft: str) -> float | None:
    """When the request's first token came: at its decode instance's first step (vLLM's
    proxy), or at its prefill's end (DistServe, whose prefill instance samples it)."""
    if ttft == "prefill" and record.handoff is not None:
        return record.handoff.prefill_end_s
    return record.first_token_s


def latencies(record: RequestRecord, ttft: str) -> tuple[float, float] | None:
    """(TTFT, TPOT) in seconds; TPOT over the tokens after the first (DistServe's: over
    all of them); None when the request did not finish."""
    first = first_token(record, ttft)
    if first is None or record.finish_s is None or record.finish_reason == "rejected":
        return None
    after = record.finish_s - first
    tokens = record.output_tokens if ttft == "prefill" else record.output_tokens - 1
    return first - record.arrival_s, after / max(tokens, 1)


def attainment(run: RunResult, row: dict[str, Any], ttft: str) -> float:
    """The share of requests meeting both SLOs; ``criterion = "each"``: the lower of the
    shares meeting each."""
    slo_ttft: float = row["slo_ttft_ms"] / 1e3
    slo_tpot: float = row["slo_tpot_ms"] / 1e3
    pairs = [latencies(r, ttft) or (float("inf"),) * 2 for r in run.records]
    first = sum(t <= slo_ttft for t, _ in pairs) / len(pairs)
    then = sum(p <= slo_tpot for _, p in pairs) / len(pairs)
    both = sum(t <= slo_ttft and p <= slo_tpot for t, p in pairs) / len(pairs)
    return min(first, then) if row.get("criterion") == "each" else both


def goodput(run: Callable[[float], RunResult], meets: Callable[[RunResult], float]) -> float:
    """The highest request rate with ``meets`` >= 90%: doubling or halving from 1 req/s
    to a bracket, then bisecting it."""
    lo, hi = 0.0, 1.0
    while hi < 1024 and meets(run(hi)) >= ATTAINMENT:
        lo, hi = hi, hi * 2
    while lo == 0.0 and hi > 1e-3:
        if meets(run(hi / 2)) >= ATTAINMENT:
            lo = hi / 2
        else:
            hi /= 2
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if meets(run(mid)) >= ATTAINMENT else (lo, mid)
    return lo


class Simulator:
    """Every ``[sim.*]`` deployment, built once a workload (written to ``folder``); each
    run cached by its rate."""

    def __init__(self, setups: dict[str, Any], folder: Path, output_scale: float = 1.0) -> None:
        self.setups, self.folder, self.output_scale = setups, folder, output_scale
        self._benches: dict[tuple[str, str, int], tuple[Bench, int]] = {}
        self._runs: dict[tuple[int, float], RunResult] = {}

    def bench(self, name: str, row: dict[str, Any], seed: int = 0) -> tuple[Bench, int]:
        """Deployment ``name`` serving the row's requests (their count and lengths)."""
        sized = {k: row.get(k) for k in ("num_prompts", "prompt_tokens", "output_tokens")}
        key = (name, json.dumps(sized, sort_keys=True), seed)
        if key not in self._benches:
            setup = self.setups[name]
            path = workload_file(self.folder, setup["workload"], row, seed, self.output_scale)
            self._benches[key] = deployment(setup, path)
        return self._benches[key]

    def run(self, bench: Bench, rate: float) -> RunResult:
        key = (id(bench), rate)
        if key not in self._runs:
            self._runs[key] = bench.run_arm(0, rate)
        return self._runs[key]

    def goodput_per_gpu(self, name: str, row: dict[str, Any]) -> float:
        bench, gpus = self.bench(name, row)
        ttft = self.setups[name]["ttft"]
        found = goodput(lambda rate: self.run(bench, rate), lambda r: attainment(r, row, ttft))
        return found / gpus


# -- rows -----------------------------------------------------------------------------


def phases(run: RunResult) -> str:
    """Where a disaggregated run's time went: the means of its handoff's phases, ms."""
    spans: dict[str, list[float]] = {"prefill": [], "kv": [], "decode1": []}
    for r in run.records:
        h = r.handoff
        if h is None or None in (h.prefill_end_s, h.transfer_end_s, r.first_token_s):
            continue
        spans["prefill"].append(h.prefill_end_s - r.arrival_s)  # type: ignore[operator]
        spans["kv"].append(h.transfer_end_s - h.prefill_end_s)  # type: ignore[operator]
        spans["decode1"].append(r.first_token_s - h.transfer_end_s)  # type: ignore[operator]
    if not spans["prefill"]:
        return ""
    mean = {k: 1e3 * statistics.mean(v) for k, v in spans.items()}
    return (
        f"arrival->prefill end {mean['prefill']:.0f} ms, ->KV landed {mean['kv']:.0f} ms,"
        f" ->decode's first token {mean['decode1']:.0f} ms"
    )


def at_rate(sim: Simulator, row: dict[str, Any], rate: float) -> tuple[float, str]:
    """The row's figure at ``rate`` (per GPU for attainment, else total), the mean over
    ``SEEDS`` request streams, and where the first stream's time went."""
    name, kind = row["sim"], row["kind"]
    ttft, figures, detail = sim.setups[name]["ttft"], [], ""
    for seed in range(SEEDS):
        bench, gpus = sim.bench(name, row, seed)
        run = sim.run(bench, rate * gpus if kind == "slo_attainment" else rate)
        if kind == "slo_attainment":
            figures.append(100 * attainment(run, row, ttft))
        else:
            pairs = [p for p in (latencies(r, ttft) for r in run.records) if p is not None]
            figures.append(1e3 * statistics.mean(p[kind == "itl_mean"] for p in pairs))
        detail = detail or phases(run)
    return statistics.mean(figures), detail


def simulate(sim: Simulator, row: dict[str, Any]) -> list[dict[str, Any]]:
    """The row's simulated figures, one a published value: label, published, simulated
    and a detail line."""
    kind, name = row["kind"], row["sim"]
    if kind == "goodput_per_gpu":
        found = sim.goodput_per_gpu(name, row)
        return [{"label": "", "published": row["value"], "simulated": found, "detail": ""}]
    if kind == "goodput_ratio":
        top, bottom = (sim.goodput_per_gpu(n, row) for n in name)
        detail = f"{name[0]} {top:.2f}, {name[1]} {bottom:.2f} req/s per GPU"
        return [
            {"label": "", "published": row["value"], "simulated": top / bottom, "detail": detail}
        ]
    out = []
    for rate, value in zip(row["rates"], row["values"], strict=True):
        simulated, detail = at_rate(sim, row, rate)
        out.append(
            {"label": f"@{rate:g}", "published": value, "simulated": simulated, "detail": detail}
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--figures", type=Path, default=FIGURES)
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--only", action="append", default=[], help="run only these row ids")
    parser.add_argument(
        "--output-scale",
        type=float,
        default=1.0,
        help="multiply the ShareGPT stand-in's output lengths (a sensitivity check)",
    )
    args = parser.parse_args()
    document = tomllib.loads(args.figures.read_text())
    with tempfile.TemporaryDirectory(prefix="disagg-published-") as folder:
        sim = Simulator(document["sim"], Path(folder), args.output_scale)
        report(sim, document["figure"], args.only, args.json, args.figures.name)


def report(
    sim: Simulator, rows: list[dict[str, Any]], only: list[str], out: Path | None, source: str
) -> None:
    """Print each row's published and simulated figures; write them to ``out``."""
    started, results = time.perf_counter(), []
    print(f"{'id':<44} {'at':>5} {'published':>10} {'simulated':>10} {'diff':>7}  unit")
    for row in rows:
        if only and row["id"] not in only:
            continue
        for line in simulate(sim, row):
            diff = line["simulated"] / line["published"] - 1.0
            flag = " *" if abs(diff) > 0.25 else ""
            print(
                f"{row['id']:<44} {line['label']:>5} {line['published']:>10.3g}"
                f" {line['simulated']:>10.3g} {100 * diff:>+6.0f}%{flag} {row['unit']}"
            )
            if line.get("detail"):
                print(f"{'':>46}{line['detail']}")
            results.append({"id": row["id"], **line, "diff_pct": round(100 * diff, 1)})
    wall = time.perf_counter() - started
    print(f"* differs by more than 25%; {len(results)} figures in {wall:.0f} s")
    if out is not None:
        scale = sim.output_scale
        document = {"figures": source, "output_scale": scale, "rows": results}
        out.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
