"""A fleet A/B of routers on a real local Ray Serve cluster, beside the simulator's
prediction for the same cluster: the fleet-level fidelity figure.

Live: ``schedkit bench --engine openai`` with ``--serve-command`` starts, per arm, ``python
-m schedkit_ray serve --replicas N --policy P`` (N ``schedkit serve sim`` replicas behind
Ray Serve, routed by ``P``'s ``route_request``; ``ray-default`` is Ray's own
power-of-two router, untouched) and replays a mooncake-conv slice against it: paired
verdicts between the routers, each arm's prefix hit rate (the replicas' ``cached_tokens``),
TTFT and throughput. Simulated: ``schedkit bench --engine sim --replicas N`` with the same
trace, engine settings and routers (``ray-default`` as the built-in ``power-of-two``).
Writes ``OUT/live`` and ``OUT/sim`` (each a bench's results and report), and
``OUT/fleet.md`` / ``fleet.json``: per router, live against simulated.

    .venv-ray/bin/python benchmarks/fleet/ray_fleet.py --out out/fleet
    .venv-ray/bin/python benchmarks/fleet/ray_fleet.py --out out/fleet-smoke --window 0:40 \\
        --arms ray-default,prefix-affinity      # make test-ray's bounded version
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

ARMS = "ray-default,round-robin,least-loaded,prefix-affinity"
SIMULATED_AS = {"ray-default": "power-of-two"}  # Ray's router, as the simulator routes it
LIVE_AS = {"ray-default": "fcfs"}  # no route_request: Ray's own router chooses
METRICS = [("prefix_hit_rate", None), ("ttft_ms", "p50"), ("ttft_ms", "p90"),
           ("tpot_ms", "p50"), ("throughput_tok_s", None)]  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench(args: argparse.Namespace, out: Path, engine: list[str], arms: dict[str, str]) -> None:
    command = [sys.executable, "-m", "schedkit", "bench", *engine,
               "--workload", args.workload, "--window", args.window,
               "--rate-scale", str(args.rate_scale), "--out", str(out), "--overwrite"]  # fmt: skip
    for name, policy in arms.items():
        command += ["--arm", f"name={name},policy={policy}"]
    print("$", shlex.join(command), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def value(metrics: dict[str, Any], key: str, q: str | None) -> float:
    v = metrics[key]
    return float(v[q] if q else v)


def table(live: dict[str, Any], sim: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    rows = []
    lines = ["| router | metric | live | simulated | sim vs live |", "|---|---|---:|---:|---:|"]
    sim_arms = {a["policy"]: a["metrics"] for a in sim["arms"]}
    for arm in live["arms"]:
        name, lm = arm["policy"], arm["metrics"]
        sm = sim_arms[name]
        for key, q in METRICS:
            a, b = value(lm, key, q), value(sm, key, q)
            label = f"{key} {q}" if q else key
            gap = (b / a - 1) * 100 if a else float("nan")
            rows.append({"router": name, "metric": label, "live": a, "sim": b, "gap_pct": gap})
            shown = (
                (f"{a:.3f}", f"{b:.3f}") if key == "prefix_hit_rate" else (f"{a:,.1f}", f"{b:,.1f}")
            )
            lines.append(f"| {name} | {label} | {shown[0]} | {shown[1]} | {gap:+.1f}% |")
        errors = lm.get("errors") or {}
        if errors:
            lines.append(f"| {name} | errors | {sum(errors.values())} | | {errors} |")
    return "\n".join(lines), rows


def verdicts(results: dict[str, Any]) -> list[str]:
    """Each comparison's summary, as the bench's report words it."""
    return [f"- {c['summary']}" for c in results.get("comparisons", [])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--arms", default=ARMS, help=f"routers, comma-separated (default {ARMS})")
    parser.add_argument("--workload", default="mooncake-conv")
    parser.add_argument("--window", default="0:400", help="the trace's seconds (default 0:400)")
    parser.add_argument("--rate-scale", type=float, default=2.0)
    parser.add_argument("--gpu", default="H200")
    parser.add_argument("--tp", type=int, default=2)
    args = parser.parse_args()
    names = [a.strip() for a in args.arms.split(",") if a.strip()]
    port = free_port()
    engine = ["--gpu", args.gpu, "--tp", str(args.tp), "--max-model-len", "131072"]
    serve = (f"{shlex.quote(sys.executable)} -m schedkit_ray serve --replicas {args.replicas}"
             f" --policy {{policy}} --port {port} -- {shlex.join(engine)}")  # fmt: skip
    live_engine = ["--engine", "openai", "--target", f"http://127.0.0.1:{port}",
                   "--serve-command", serve, "--request-timeout-s", "600"]  # fmt: skip
    bench(args, args.out / "live", live_engine, {n: LIVE_AS.get(n, n) for n in names})
    sim_engine = ["--engine", "sim", "--replicas", str(args.replicas), "--gpu", args.gpu,
                  "--tensor-parallel-size", str(args.tp)]  # fmt: skip
    bench(args, args.out / "sim", sim_engine, {n: SIMULATED_AS.get(n, n) for n in names})
    live = json.loads((args.out / "live" / "results.json").read_text())
    sim = json.loads((args.out / "sim" / "results.json").read_text())
    text, rows = table(live, sim)
    head = (f"# Fleet A/B: {args.replicas} x `schedkit serve sim` ({args.gpu} x tp {args.tp})"
            f" on Ray Serve, {args.workload} {args.window} s at {args.rate_scale:g}x\n")  # fmt: skip
    body = "\n".join([head, text, "", "Live verdicts (paired, against the first arm):",
                      *verdicts(live), "", "Simulated verdicts:", *verdicts(sim), ""])  # fmt: skip
    (args.out / "fleet.md").write_text(body)
    (args.out / "fleet.json").write_text(
        json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=1)
    )
    print(body)


if __name__ == "__main__":
    main()
