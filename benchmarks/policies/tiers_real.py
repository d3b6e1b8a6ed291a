"""tiers on a real CPU engine (vLLM or SGLang, a random-weight Llama) and on the
simulator: online traffic beside a batch backlog, against separate engines, plain
priority and fcfs (see tiers.md).

Per seed, on one engine at a time (``--engine``; ``sim`` reads the same model as a
profile on its default GPU):

1. **Capacity.** A burst of ``--online`` online-shaped requests (prompt ~128, output ~32
   tokens) under fcfs gives the engine's capacity C in requests/s.
2. **Separate fleet (1 + 1 engines).** Online alone: a Poisson stream at ``--load`` x C.
   Its p99 TTFT and TPOT, times 1.5 and 1.25, become the online SLO (so online alone meets
   it by construction; the question is what sharing costs). Offline alone: a backlog of
   ``--offline`` prefill-heavy requests (prompt 512, output 8) at 0 s on the other engine.
3. **Shared fleet (2 engines, round-robin).** Each engine gets every other online request
   and half the backlog: one engine replays that half, under fcfs, priority and tiers
   (its defaults), and tiers with ``tpot_fill`` 0.8 (``tiers-adaptive.toml``: the offline
   step adapts to online's TPOT targets, for an engine whose prefill costs more per token
   than the simulator's GPU), and tiers sized for a CPU engine (``tiers-cpu.toml``: small
   offline steps beside online decodes and when the engine has no online request); the
   fleet's offline rate is twice that engine's.

Printed per seed and arm: online SLO attainment, p90 TTFT and TPOT; offline requests
completed per second while online traffic arrives (0 s to its last arrival). Writes
``summary.json``; run from the repository root:

    HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python benchmarks/policies/tiers_real.py \\
        --engine vllm --out /tmp/sk/tiers-vllm
    HF_HUB_OFFLINE=1 .venv-sglang/bin/python benchmarks/policies/tiers_real.py \\
        --engine sglang --out /tmp/sk/tiers-sglang
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.append(str(Path(__file__).resolve().parents[1] / "stats"))  # bootstrap.py
from bootstrap import paired_bootstrap
from real_engine import bench
from tiers_proof import write_jsonl

from schedkit.bench.stats.estimators import Mean
from schedkit.testing.models import tiny_llama
from schedkit.workload import TraceRequest, load_workload

MID = {"hidden_size": 768, "intermediate_size": 2048, "num_attention_heads": 12,
       "num_key_value_heads": 12, "num_hidden_layers": 6}  # fmt: skip  # loop.py's "mid"
ONLINE_SHAPE = "prompt=lognormal:128:0.5,output=lognormal:32:0.5"
ENGINE_ARGS = ["--max-num-seqs", "16", "--max-num-batched-tokens", "2048"]
SHARED = {"fcfs": "fcfs", "priority": "priority", "tiers": "tiers",
          "tiers-adaptive": "benchmarks/policies/tiers-adaptive.toml",
          "tiers-cpu": "benchmarks/policies/tiers-cpu.toml"}  # fmt: skip


def requests(out: Path, arm: str) -> list[dict[str, Any]]:
    """The arm's rows of the bench's per-request file (parquet with pyarrow, else CSV)."""
    if (out / "requests.parquet").exists():
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = pq.read_table(out / "requests.parquet").to_pylist()
    else:
        with (out / "requests.csv").open() as f:
            rows = [
                {k: (None if v == "" else float(v) if k.endswith(("_ms", "_s")) else v)
                 for k, v in row.items()}
                for row in csv.DictReader(f)
            ]  # fmt: skip
    return [r for r in rows if r["arm"] == arm] or rows


def run(args: argparse.Namespace, model: Path, trace: Path, policy: str, out: Path):
    bench([*common(args, model), "--workload", str(trace), "--policy", policy], out)
    return requests(out, policy)


def common(args: argparse.Namespace, model: Path) -> list[str]:
    return ["--engine", args.engine, "--model", str(model), *ENGINE_ARGS]


def online_stream(rate: float, n: int, seed: int) -> list[TraceRequest]:
    w = load_workload(f"poisson:rate={rate:.3f},n={n},{ONLINE_SHAPE},seed={seed}")
    return [dataclasses.replace(r, request_id=f"online-{i:04d}", tenant="online")
            for i, r in enumerate(w.requests)]  # fmt: skip


def backlog(n: int) -> list[TraceRequest]:
    return [TraceRequest(f"offline-{i:04d}", 0.0, 512, 8, tenant="offline", priority=1)
            for i in range(n)]  # fmt: skip


def p(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values, dtype=float), q)) if values else float("nan")


def online_figures(rows: list[dict[str, Any]], slo: tuple[float, float]) -> dict[str, float]:
    online = [r for r in rows if r["tenant"] == "online"]
    met = [
        r["outcome"] in ("length", "stop")
        and r["ttft_ms"] <= slo[0]
        and (r["tpot_ms"] is None or r["tpot_ms"] <= slo[1])
        for r in online
    ]
    ttft = [r["ttft_ms"] for r in online if r["ttft_ms"] is not None]
    tpot = [r["tpot_ms"] for r in online if r["tpot_ms"] is not None]
    return {"attainment": sum(met) / len(online), "ttft_p90_ms": p(ttft, 90),
            "tpot_p90_ms": p(tpot, 90), "ttft_p99_ms": p(ttft, 99), "tpot_p99_ms": p(tpot, 99)}  # fmt: skip


def met(row: dict[str, Any], slo: Sequence[float]) -> float:
    tpot = row["tpot_ms"]
    return float(row["outcome"] in ("length", "stop") and row["ttft_ms"] <= slo[0]
                 and (tpot is None or tpot <= slo[1]))  # fmt: skip


def attainment_ci(out: Path, arm: str, slo: Sequence[float]) -> str:
    """The shared arm's online attainment, and its change against online alone over the
    same requests (the shared engine serves every other one), with a paired block
    bootstrap 95% interval (blocks of 10 requests in arrival order)."""
    alone = {r["request_id"]: r for r in requests(out / "online", "fcfs")}
    shared = [r for r in requests(out / arm, arm) if r["tenant"] == "online"]
    shared.sort(key=lambda r: r["arrival_s"])
    a = [met(alone[r["request_id"]], slo) for r in shared]
    b = [met(r, slo) for r in shared]
    boot = paired_bootstrap({"att": (a, b, Mean())}, block=10)["att"]
    lo, hi = boot["ci"] or (float("nan"), float("nan"))
    return f"{boot['b']:.1%} ({boot['diff']:+.1%}, CI {lo:+.1%} .. {hi:+.1%})"


def summarize(out: Path) -> None:
    """Each saved seed's arms again, with the attainment change's interval."""
    for path in sorted(out.glob("*/summary.json")) or [out / "summary.json"]:
        for seed, r in json.loads(path.read_text()).items():
            runs = next(path.parent.glob(f"*-{seed}"), path.parent / seed)
            print(f"{runs.name}: SLO {r['slo_ms'][0]:.0f} ms / {r['slo_ms'][1]:.1f} ms")
            for arm, a in r["arms"].items():
                att = (
                    f"{a['attainment']:.1%}"
                    if arm == "separate"
                    else attainment_ci(runs, arm, r["slo_ms"])
                )
                print(f"  {arm:14} online {att}, p90 TTFT {a['ttft_p90_ms']:,.0f} ms, TPOT"
                      f" {a['tpot_p90_ms']:.1f} ms; offline {a['offline_req_s']:.2f} req/s")  # fmt: skip


def offline_rate(rows: list[dict[str, Any]], until: float) -> float:
    done = [
        r for r in rows
        if r["tenant"] == "offline" and r["outcome"] in ("length", "stop")
        and r["arrival_s"] + r["e2e_ms"] / 1000.0 <= until
    ]  # fmt: skip
    if len(done) == sum(r["tenant"] == "offline" for r in rows):
        print(f"warning: the backlog drained before {until:.1f} s; its rate is a lower bound"
              " (raise --offline)", file=sys.stderr)  # fmt: skip
    return len(done) / until


def one_seed(args: argparse.Namespace, model: Path, seed: int, tmp: Path) -> dict[str, Any]:
    out = args.out / f"{args.engine}-s{seed}"
    burst = tmp / "burst.jsonl"
    write_jsonl(burst, [dataclasses.replace(r, arrival_s=0.0)
                        for r in online_stream(1000.0, args.online, seed)])  # fmt: skip
    cal = run(args, model, burst, "fcfs", out / "capacity")
    capacity = len(cal) / max(r["arrival_s"] + r["e2e_ms"] / 1000.0 for r in cal)
    online = online_stream(args.load * capacity, args.online, seed)
    until = online[-1].arrival_s
    files = {"online": online, "offline": backlog(args.offline),
             "mix": online[::2] + backlog(args.offline // 2)}  # fmt: skip
    for name, reqs in files.items():
        write_jsonl(tmp / f"{name}.jsonl", sorted(reqs, key=lambda r: r.arrival_s))
    alone = run(args, model, tmp / "online.jsonl", "fcfs", out / "online")
    figures = online_figures(alone, (float("inf"), float("inf")))
    slo = (1.5 * figures["ttft_p99_ms"], 1.25 * figures["tpot_p99_ms"])
    mix = [dataclasses.replace(r, slo_ttft_ms=slo[0], slo_tpot_ms=slo[1])
           if r.tenant == "online" else r for r in files["mix"]]  # fmt: skip
    write_jsonl(tmp / "mix.jsonl", sorted(mix, key=lambda r: r.arrival_s))
    batch = run(args, model, tmp / "offline.jsonl", "fcfs", out / "offline")
    arms = {"separate": {**online_figures(alone, slo), "offline_req_s": offline_rate(batch, until)}}
    for arm in args.arms:
        policy = SHARED[arm]
        rows = run(args, model, tmp / "mix.jsonl", policy, out / arm)
        arms[arm] = {**online_figures(rows, slo), "offline_req_s": 2 * offline_rate(rows, until)}
    return {"capacity_req_s": capacity, "online_rate": args.load * capacity, "window_s": until,
            "slo_ms": slo, "arms": arms}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=("vllm", "sglang", "sim"), default="vllm")
    parser.add_argument("--out", type=Path, default=Path("/tmp/sk/tiers-real"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--online", type=int, default=200, help="online requests")
    parser.add_argument("--offline", type=int, default=2000, help="offline backlog")
    parser.add_argument("--load", type=float, default=0.4, help="online rate / capacity")
    parser.add_argument("--arms", nargs="+", choices=list(SHARED), default=list(SHARED),
                        help="the shared fleet's arms (the separate fleet always runs)")  # fmt: skip
    parser.add_argument("--summarize", action="store_true",
                        help="print the saved runs under --out with intervals; run nothing")  # fmt: skip
    args = parser.parse_args()
    if args.summarize:
        summarize(args.out)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tiers-real-") as name:
        tmp = Path(name)
        model = tiny_llama(tmp / "model", vocab_size=512, max_position_embeddings=1024, **MID)
        for seed in args.seeds:
            summary[f"s{seed}"] = r = one_seed(args, model, seed, tmp)
            print(f"{args.engine} seed {seed}: C={r['capacity_req_s']:.2f}/s, online at"
                  f" {r['online_rate']:.2f}/s for {r['window_s']:.0f} s, SLO"
                  f" {r['slo_ms'][0]:.0f} ms TTFT / {r['slo_ms'][1]:.1f} ms TPOT")  # fmt: skip
            for arm, a in r["arms"].items():
                print(f"  {arm:14} online {a['attainment']:.1%} (p90 TTFT {a['ttft_p90_ms']:,.0f}"
                      f" ms, TPOT {a['tpot_p90_ms']:.1f} ms), offline"
                      f" {a['offline_req_s']:.2f} req/s", flush=True)  # fmt: skip
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
