"""The calibration loop (issue #15 parts 3 and 4): record a real engine's steps (vLLM or
SGLang) on one trace, fit a cost profile, then replay different traces on the simulator
with that profile and on the real engine, and compare.

On this machine (CPU; by default a random-weight 43M-parameter Llama, ``--random mid``,
whose steps are long enough that the engine's own loop is a small share)::

    HF_HUB_OFFLINE=1 taskset -c 1 .venv-vllm/bin/python benchmarks/fidelity/loop.py \\
        --json benchmarks/fidelity/loop-vllm-xeon.json
    HF_HUB_OFFLINE=1 taskset -c 1 .venv-sglang/bin/python benchmarks/fidelity/loop.py \\
        --engine sglang --json benchmarks/fidelity/loop-sglang-xeon.json

On a GPU, with your model (the same code path; ``--gpu`` names the GPU profile of the
roofline reference that coefficients nothing varies for fall back to)::

    python benchmarks/fidelity/loop.py --model /path/to/model --gpu H100-SXM --json gpu-loop.json

A warm-up run comes first and is not recorded (a process's first engine is slower). The
training trace and the test traces differ in seed and rate. The simulator gets the
real engine's KV capacity and block size, so that both schedule under the same limits.
Each test trace is replayed under fcfs and sjf: on the simulator once (it is
deterministic), on the real engine ``--rounds`` times with the arms' order alternating,
and the real figure is the median over the rounds; their spread is the real engine
against itself, the floor under any comparison. The simulator runs once more with
every coefficient 5% larger: how much each latency moves per unit of step-time error
(its elasticity), which is large wherever requests queue. Every real run records its
steps too: the profile's predicted / measured time on them says how far the machine's
speed moved from the training run's, and a profile fitted on them (the test's own
steps, so not a held-out figure) shows the replay's own error, batches and queues,
apart from the step profile's. ``--table F.json`` prints the tables of a finished run;
``--tests queued`` runs only the tests named.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from schedkit.bench.runner import BenchSpec, run_bench
from schedkit.sim.cost.calibration import read_steps, save_cost_profile
from schedkit.sim.cost.fit import StepRow, fit_steps, with_gaps
from schedkit.sim.cost.model import LINEAR_COEFFICIENTS, LinearCostModel, RooflineCostModel
from schedkit.sim.cost.profiles import get_gpu, get_model, register_model_dir
from schedkit.testing.models import tiny_llama

TRAIN = "poisson:rate=12,n=400,prompt=96,output=24,seed=11"
WARMUP = "poisson:rate=12,n=100,prompt=96,output=24,seed=5"
# name -> (workload, engine settings). The first two run the engine as configured by
# default (256 sequences, 8,192 tokens a step), where nothing waits at these loads and
# the order cannot matter; "queued" caps the batch at 8 sequences so that bursts queue
# and sjf reorders them: the A/B test.
TESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "same-rate": ("poisson:rate=12,n=300,prompt=96,output=24,seed=23", {}),
    "busier": ("gamma:rate=18,cv=2,n=300,prompt=128,output=24,seed=37", {}),
    "queued": ("gamma:rate=10,cv=2,n=300,prompt=96,output=24,seed=41", {"max_num_seqs": 8}),
}
POLICIES = ["fcfs", "sjf"]
METRICS = (("ttft_ms", "p50"), ("ttft_ms", "p90"), ("tpot_ms", "p50"), ("tpot_ms", "p90"),
           ("e2e_ms", "p50"), ("e2e_ms", "p90"))  # fmt: skip
# the simulator's settings for each engine: SGLang runs prefill-only steps ahead of decode
SIM: dict[str, dict[str, Any]] = {"vllm": {}, "sglang": {"mixed_prefill": False}}
SLOWER = 1.05  # the sensitivity run: every coefficient of the profile 5% larger
# random-weight Llamas: "tiny" as the adapters' tests use; "mid" (43M parameters) makes
# steps long enough (15 ms a decode step on one core) that the engine's own loop is a
# small share of the time
MODELS = {
    "tiny": {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
             "num_key_value_heads": 4, "num_hidden_layers": 2},
    "mid": {"hidden_size": 768, "intermediate_size": 2048, "num_attention_heads": 12,
            "num_key_value_heads": 12, "num_hidden_layers": 6},
}  # fmt: skip


def random_model(path: Path, size: str) -> Path:
    return tiny_llama(path, vocab_size=512, max_position_embeddings=1024, **MODELS[size])


def engine_model(
    out: Path, model: str | None, size: str, gpu: str
) -> tuple[str, RooflineCostModel]:
    """The model directory (``model``, else a random ``size`` Llama written under ``out``),
    registered as a model profile, and the roofline reference on ``gpu`` that the step fit
    falls back to."""
    path = model or str(random_model(out / "model", size))
    register_model_dir(path)
    return path, RooflineCostModel(get_model(path), get_gpu(gpu))


def metrics(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    return {
        arm["policy"]: {f"{m}_{q}": arm["metrics"][m][q] for m, q in METRICS}
        for arm in results["arms"]
    }


def median_rounds(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per policy and metric, the median over the rounds."""
    return {
        policy: {k: statistics.median(r[policy][k] for r in rounds) for k in rounds[0][policy]}
        for policy in rounds[0]
    }


def spread(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per policy and metric, (max - min) / median over the rounds: the real engine
    against itself, the floor under any simulator error."""
    med = median_rounds(rounds)
    return {
        policy: {
            k: (max(r[policy][k] for r in rounds) - min(r[policy][k] for r in rounds)) / v
            for k, v in med[policy].items()
            if v
        }
        for policy in med
    }


def relative(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> dict[str, Any]:
    """a / b - 1 per policy and metric."""
    return {p: {k: a[p][k] / v - 1 for k, v in b[p].items() if v} for p in b}


def sjf_vs_fcfs(m: dict[str, dict[str, float]]) -> dict[str, float]:
    return {k: m["sjf"][k] / v - 1 for k, v in m["fcfs"].items() if v}


def step_bias(model: LinearCostModel, rows: list[StepRow]) -> dict[str, float]:
    """How the profile predicts steps it was not fitted on: total predicted / measured
    time (above 1: the simulator's steps are slower) and the mean absolute error."""
    predicted = [
        model.step_time(r.prefill_tokens, r.decode_tokens, r.kv_tokens, r.attn_pairs) for r in rows
    ]
    measured = [r.seconds for r in rows]
    mape = statistics.fmean(abs(a - b) / b for a, b in zip(predicted, measured, strict=True))
    return {"steps": len(rows), "time_ratio": sum(predicted) / sum(measured), "mape": mape}


def simulate(workload: str, profile: Path, settings: dict[str, Any], out: Path) -> Any:
    """The simulator's fcfs and sjf arms with ``profile``."""
    spec = BenchSpec(workload=workload, policies=POLICIES, profile=str(profile), **settings)
    return metrics(run_bench(spec, out))


def resimulate(report: dict[str, Any], model: str, out: Path) -> None:
    """The simulator's side of every test of ``report`` again, with this checkout's
    simulator and the profiles the report recorded; the real figures stay as measured."""
    engine = report["engine"]
    for name, test in report["tests"].items():
        common = {"model": model, "kv_blocks": report["kv_blocks"],
                  "block_size": report["block_size"], "rate_scale": report.get("rate_scale", 1.0),
                  "gpu": report.get("gpu", "H100-SXM"), **test["settings"], **SIM[engine]}  # fmt: skip
        figures = {}
        for label, coefficients in (("sim", report["coefficients"]),
                                    ("oracle_sim", test["oracle_coefficients"])):  # fmt: skip
            profile = out / f"{name}-{label}.json"
            profile.write_text(json.dumps(coefficients))
            figures[label] = simulate(test["workload"], profile, common, out / f"{name}-{label}")
            if label == "sim":
                slower = simulate(test["workload"], scaled_profile(profile, SLOWER), common,
                                  out / f"{name}-sim-slower")  # fmt: skip
        live = test["real"]
        test.update(
            sim=figures["sim"], error=relative(figures["sim"], live),
            oracle_sim=figures["oracle_sim"], oracle_error=relative(figures["oracle_sim"], live),
            elasticity={p: {k: v / (SLOWER - 1) for k, v in d.items()}
                        for p, d in relative(slower, figures["sim"]).items()},
        )  # fmt: skip
        test["ab"]["sim"] = sjf_vs_fcfs(figures["sim"])
    report["simulator"] = {"resimulated": True, **SIM[engine]}


def scaled_profile(profile: Path, factor: float) -> Path:
    data = json.loads(profile.read_text())
    for name in LINEAR_COEFFICIENTS:
        data[name] *= factor
    out = profile.with_name(f"{profile.stem}-x{factor:g}.json")
    out.write_text(json.dumps(data))
    return out


TARGET = 0.10  # the issue's: within 10% on p50 and p90 of TTFT and TPOT
UNSTEADY = 2 * TARGET  # a real spread over this: the rounds cannot judge the cell


def markdown(report: dict[str, Any]) -> str:
    """The results tables of ``report`` (what ``--json`` wrote), in Markdown."""
    cells = [k for k in report["tests"][next(iter(report["tests"]))]["sim"]["fcfs"]]
    head = " | ".join(k.replace("_ms_", " ") for k in cells)
    lines = [f"| test | policy | {head} |", "|---|---|" + "---:|" * len(cells)]
    within = own_within = total = unsteady = 0
    for name, test in report["tests"].items():
        for policy in POLICIES:
            row = []
            for k in cells:
                e, own = test["error"][policy][k], test["oracle_error"][policy][k]
                row.append(f"{e:+.1%} ({own:+.1%}) [{test['real_spread'][policy][k]:.0%}]")
                if k.startswith(("ttft", "tpot")):
                    total += 1
                    within += abs(e) <= TARGET
                    own_within += abs(own) <= TARGET
                    unsteady += test["real_spread"][policy][k] > UNSTEADY
            lines.append(f"| {name} | {policy} | " + " | ".join(row) + " |")
    lines += ["", f"TTFT/TPOT cells within {TARGET:.0%}: {within} of {total} ({own_within} with"
              " the test's own steps)", ""]  # fmt: skip
    if unsteady:  # the real median of such a cell is not the engine's steady figure
        lines += [f"The real rounds spread over {UNSTEADY:.0%} in {unsteady} of {total}"
                  " TTFT/TPOT cells: the real engine did not repeat itself there, so those"
                  " cells cannot judge the simulator" + (" (more than half: check the machine"
                  " with noise.py and rerun)." if 2 * unsteady > total else "."), ""]  # fmt: skip
    lines += ["| test | metric | simulated sjf vs fcfs | real (median) | real, each round |",
              "|---|---|---:|---:|---|"]  # fmt: skip
    for name, test in report["tests"].items():
        for k, v in test["ab"]["sim"].items():
            rounds = ", ".join(f"{r[k]:+.1%}" for r in test["ab"]["real_rounds"])
            lines.append(f"| {name} | {k} | {v:+.1%} | {test['ab']['real'][k]:+.1%} | {rounds} |")
    lines += ["", "| test | round | profile's predicted / measured step time (fcfs, sjf) |",
              "|---|---:|---|"]  # fmt: skip
    for name, test in report["tests"].items():
        for i, b in enumerate(test["step_bias"]):
            ratios = ", ".join(f"{b[p]['time_ratio']:.3f}" for p in POLICIES)
            lines.append(f"| {name} | {i} | {ratios} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--model", default=None, help="model directory (default: --random)")
    parser.add_argument("--random", choices=sorted(MODELS), default="mid",
                        help="the random-weight model made when --model is not given")  # fmt: skip
    parser.add_argument("--gpu", default="H100-SXM", help="GPU profile of the reference")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--rounds", type=int, default=3, help="real runs of each test")
    parser.add_argument("--tests", default=",".join(TESTS),
                        help=f"the tests to run, comma-separated (default: all of {', '.join(TESTS)})")  # fmt: skip
    parser.add_argument("--rate-scale", type=float, default=1.0,
                        help="every trace's arrival rate times this (a slower engine: < 1)")  # fmt: skip
    parser.add_argument("--table", type=Path, default=None,
                        help="print the tables of a --json file this script wrote, and stop")  # fmt: skip
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5,
                        help="vLLM's; on CPU the share of the memory its KV cache takes, and"
                        " the arms run one after another in one process")  # fmt: skip
    parser.add_argument("--resimulate", type=Path, default=None,
                        help="redo the simulator's side of a --json file (its real figures"
                        " stay), write it to --json, and stop")  # fmt: skip
    args = parser.parse_args()
    tests = [t for t in args.tests.split(",") if t]
    unknown = sorted(set(tests) - set(TESTS))
    if unknown or not tests:
        parser.error(f"--tests: unknown {', '.join(unknown) or 'none given'}; choose from"
                     f" {', '.join(TESTS)}")  # fmt: skip
    if args.table is not None:
        print(markdown(json.loads(args.table.read_text())))
        return
    if args.resimulate is not None:
        report = json.loads(args.resimulate.read_text())
        out = args.out or Path(tempfile.mkdtemp(prefix="cpu-loop-"))
        model = args.model or str(random_model(out / "model", args.random))
        register_model_dir(model)
        resimulate(report, model, out)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2, default=str))
        print(markdown(report))
        return
    engine = args.engine
    real_settings: dict[str, dict[str, Any]] = {  # the real engine's, on every run
        "vllm": {"gpu_memory_utilization": args.gpu_memory_utilization}, "sglang": {},
    }  # fmt: skip
    out = args.out or Path(tempfile.mkdtemp(prefix="cpu-loop-"))
    model, reference = engine_model(out, args.model, args.random, args.gpu)
    # 0. a warm-up run, not recorded: the first engine of a process is slower (its
    # kernels' first calls), and a profile fitted on it would be too
    run_bench(
        BenchSpec(workload=WARMUP, policies=["fcfs"], engine=engine, model=model,
                  rate_scale=args.rate_scale, **real_settings[engine]),
        out / "warmup",
    )  # fmt: skip
    # 1. record the real engine on the training trace
    train = run_bench(
        BenchSpec(workload=TRAIN, policies=["fcfs"], engine=engine, model=model,
                  record_steps=str(out / "steps"), rate_scale=args.rate_scale,
                  **real_settings[engine]),
        out / "train",
    )  # fmt: skip
    real = train["engine"]["real"]
    rows, meta = read_steps(out / "steps" / "fcfs.csv")
    fit = fit_steps(rows, reference)
    profile = out / "cpu-profile.json"
    save_cost_profile(fit, profile, source="steps/fcfs.csv", recorded_for=meta)
    slower = scaled_profile(profile, SLOWER)
    print(f"recorded {len(rows)} steps; held-out {fit.holdout}")
    for warning in fit.warnings:
        print("warning:", warning)
    # 2. the same settings on both engines: the real engine's capacity and block size
    # (SGLang counts tokens: its capacity in the simulator's 16-token blocks, which the
    # SGLang arms get back as max_total_tokens)
    if engine == "vllm":
        kv_blocks, block_size = real["kv_blocks"], real["block_size"]
    else:
        kv_blocks, block_size = real["kv_tokens"] // 16, 16
    report: dict[str, Any] = {
        "engine": engine, "model": args.model or f"random {args.random}", "train": TRAIN,
        "steps": len(rows), "fit": fit.describe(), "coefficients": fit.model.describe(),
        "kv_blocks": kv_blocks, "block_size": block_size, "rounds": args.rounds,
        "rate_scale": args.rate_scale, "gpu": args.gpu, "simulator": SIM[engine], "tests": {},
    }  # fmt: skip
    for name in tests:
        workload, settings = TESTS[name]
        common = {"model": model, "kv_blocks": kv_blocks, "block_size": block_size,
                  "rate_scale": args.rate_scale, **settings}  # fmt: skip
        # the simulator's arms on the recording's GPU profile, so the profile's
        # recorded_for matches them (the real arms run on whatever device there is)
        sim_settings = {**common, **SIM[engine], "gpu": args.gpu}
        sim = simulate(workload, profile, sim_settings, out / f"{name}-sim")
        sim_slower = simulate(workload, slower, sim_settings, out / f"{name}-sim-slower")
        rounds, steps = [], []
        for i in range(args.rounds):  # the arms' order alternates between rounds
            order = POLICIES if i % 2 == 0 else POLICIES[::-1]
            recorded = out / f"{name}-steps-{i}"
            rounds.append(metrics(run_bench(
                BenchSpec(workload=workload, policies=order, engine=engine,
                          record_steps=str(recorded), **common, **real_settings[engine]),
                out / f"{name}-real-{i}",
            )))  # fmt: skip
            steps.append({p: with_gaps(read_steps(recorded / f"{p}.csv")[0])[0] for p in order})
        live = median_rounds(rounds)
        # the steps of these runs, which the profile was not fitted on: how far the
        # machine's speed moved from the training run's ...
        bias = [{p: step_bias(fit.model, rows) for p, rows in r.items()} for r in steps]
        # ... and the simulator given steps that are right: a profile fitted on all of
        # this test's real steps, which shows the replay's own error (batches, queues)
        oracle_fit = fit_steps([r for d in steps for rows in d.values() for r in rows], reference)
        oracle_profile = out / f"{name}-oracle-profile.json"
        save_cost_profile(oracle_fit, oracle_profile, source=name, recorded_for=meta)
        oracle = simulate(workload, oracle_profile, sim_settings, out / f"{name}-sim-oracle")
        elasticity = {
            p: {k: v / (SLOWER - 1) for k, v in d.items()}
            for p, d in relative(sim_slower, sim).items()
        }
        result = {
            "workload": workload, "settings": settings, "sim": sim, "real": live,
            "real_rounds": rounds, "error": relative(sim, live), "real_spread": spread(rounds),
            "elasticity": elasticity, "step_bias": bias, "oracle_sim": oracle,
            "oracle_error": relative(oracle, live), "oracle_coefficients": oracle_fit.model.describe(),
            "ab": {"sim": sjf_vs_fcfs(sim), "real": sjf_vs_fcfs(live),
                   "real_rounds": [sjf_vs_fcfs(r) for r in rounds]},
        }  # fmt: skip
        report["tests"][name] = result
        print(f"\n{name} ({workload}, {settings or 'default engine'})")
        for policy in POLICIES:
            cells = ", ".join(f"{k} {v:+.1%}" for k, v in result["error"][policy].items())
            print(f"  {policy}: sim vs real: {cells}")
            cells = ", ".join(f"{k} {v:.1%}" for k, v in result["real_spread"][policy].items())
            print(f"  {policy}: real spread over {args.rounds} rounds: {cells}")
            cells = ", ".join(f"{k} {v:+.1%}" for k, v in result["oracle_error"][policy].items())
            print(f"  {policy}: sim with this test's own steps vs real: {cells}")
        for i, b in enumerate(bias):
            cells = ", ".join(
                f"{p} {v['time_ratio']:.3f} (MAPE {v['mape']:.1%})" for p, v in b.items()
            )
            print(f"  round {i}: profile's predicted / measured step time: {cells}")
        for k, v in result["ab"]["sim"].items():
            per_round = ", ".join(f"{r[k]:+.1%}" for r in result["ab"]["real_rounds"])
            print(f"  sjf vs fcfs {k}: sim {v:+.1%}, real {result['ab']['real'][k]:+.1%}"
                  f" (rounds {per_round})")  # fmt: skip
        if args.json:  # after every test: a long run keeps what it measured
            args.json.write_text(json.dumps(report, indent=2, default=str))
    print(markdown(report))


if __name__ == "__main__":
    main()
