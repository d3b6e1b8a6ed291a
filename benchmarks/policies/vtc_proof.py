"""Proof figures for the vtc plugin: vtc vs fcfs on two-tenant-flood (see vtc.md).

    python benchmarks/policies/vtc_proof.py --rate-scale 4 --seeds 0 1 2 3 4

For each workload seed, replays the workload through both arms exactly as ``schedkit
bench`` does (``Bench.run_arm``) and prints, as markdown rows:

- the quiet tenant's p90 TTFT in each arm, with a paired bootstrap 95% CI of the change
  (``paired_bootstrap`` of ``benchmarks/stats/bootstrap.py``, over the quiet tenant's
  requests);
- the bench's ``jain_fairness`` (Jain's index over the tenants' service rates while both
  are backlogged, ``service_jain``) in each arm; it is not a per-request statistic, so
  no bootstrap CI: the seeds show its spread;
- the bench's ``jain_ttft`` (Jain's index over the tenants' mean TTFT), with a paired
  bootstrap 95% CI of the change, resampling requests;
- a Jain index over each tenant's *slowdown*: its mean TTFT divided by its mean TTFT when
  it runs alone (the same requests, the other tenant removed). Not a bench metric.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1] / "stats"))  # bootstrap.py

from bootstrap import DEFAULT_N_BOOT, paired_bootstrap

from schedkit import PolicyFacade
from schedkit.bench.runner import Bench, BenchSpec
from schedkit.bench.stats.estimators import Quantile, jain
from schedkit.bench.stats.metrics import latencies_ms, service_jain
from schedkit.records import RunResult
from schedkit.sim.engine import SimEngine

TENANTS = ("flood", "quiet")


def ttfts(run: RunResult) -> list[float | None]:
    return [latencies_ms(r)["ttft_ms"] for r in run.records]


def tenant_means(
    values: Sequence[float | None], tenants: Sequence[str], idx: Sequence[int]
) -> list[float]:
    sums = dict.fromkeys(TENANTS, 0.0)
    counts = dict.fromkeys(TENANTS, 0)
    for i in idx:
        value = values[i]
        if value is not None:
            sums[tenants[i]] += value
            counts[tenants[i]] += 1
    return [sums[t] / counts[t] for t in TENANTS if counts[t]]


def jain_ci(
    a: Sequence[float | None], b: Sequence[float | None], tenants: Sequence[str], seed: int
) -> list[float]:
    """Paired bootstrap 95% CI of jain(b) - jain(a), resampling requests."""
    rng = random.Random(seed)
    n = len(tenants)
    diffs = []
    for _ in range(DEFAULT_N_BOOT):
        idx = [rng.randrange(n) for _ in range(n)]
        diffs.append(jain(tenant_means(b, tenants, idx)) - jain(tenant_means(a, tenants, idx)))
    diffs.sort()
    return [diffs[int(0.025 * len(diffs))], diffs[int(0.975 * len(diffs)) - 1]]


def alone_mean_ttft(bench: Bench, tenant: str, rate_scale: float) -> float:
    """Mean TTFT of ``tenant``'s requests replayed without the other tenant (fcfs)."""
    base = bench.base
    only = dataclasses.replace(base, requests=tuple(r for r in base.requests if r.tenant == tenant))
    facade = PolicyFacade.from_config("fcfs")
    run = SimEngine(only.scaled(rate_scale).requests, bench.cost, bench.sim_config, facade).run()
    values = [v for v in ttfts(run) if v is not None]
    return sum(values) / len(values)


def one_seed(seed: int, rate_scale: float) -> None:
    spec = BenchSpec(
        workload="two-tenant-flood", policies=["fcfs", "vtc"], rate_scale=rate_scale, seed=seed
    )
    bench = Bench(spec)
    fcfs, vtc = (bench.run_arm(i, rate_scale) for i in range(2))
    assert [r.request_id for r in fcfs.records] == [r.request_id for r in vtc.records]
    tenants = [r.tenant for r in fcfs.records]
    a, b = ttfts(fcfs), ttfts(vtc)
    quiet = [i for i, t in enumerate(tenants) if t == "quiet"]
    boot = paired_bootstrap(
        {"p90": ([a[i] for i in quiet], [b[i] for i in quiet], Quantile(90))}, seed=seed
    )["p90"]
    everyone = range(len(tenants))
    service_a, service_b = (service_jain(x.records, x.duration_s) for x in (fcfs, vtc))
    jain_a, jain_b = (jain(tenant_means(x, tenants, everyone)) for x in (a, b))
    ci = jain_ci(a, b, tenants, seed)
    alone = [alone_mean_ttft(bench, t, rate_scale) for t in TENANTS]
    slow_a, slow_b = (
        jain([m / s for m, s in zip(tenant_means(x, tenants, everyone), alone, strict=True)])
        for x in (a, b)
    )
    lo, hi = boot["rel_ci"] or (float("nan"), float("nan"))
    print(
        f"| {seed} | {boot['a']:,.0f} | {boot['b']:,.0f} | {boot['rel']:+.1%}"
        f" ({lo:+.1%} .. {hi:+.1%}) | {service_a:.3f} | {service_b:.3f}"
        f" | {jain_a:.3f} | {jain_b:.3f} | {jain_b - jain_a:+.3f}"
        f" ({ci[0]:+.3f} .. {ci[1]:+.3f}) | {alone[0]:,.0f} / {alone[1]:,.0f}"
        f" | {slow_a:.3f} | {slow_b:.3f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate-scale", type=float, default=4.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    print(f"two-tenant-flood at rate-scale {args.rate_scale:g}, fcfs (a) vs vtc (b)\n")
    print(
        "| seed | quiet p90 TTFT fcfs (ms) | vtc (ms) | change (95% CI) | service Jain fcfs"
        " | service Jain vtc | TTFT Jain fcfs | TTFT Jain vtc | TTFT Jain change (95% CI)"
        " | alone mean TTFT flood / quiet (ms) | slowdown Jain fcfs | slowdown Jain vtc |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        one_seed(seed, args.rate_scale)


if __name__ == "__main__":
    main()
