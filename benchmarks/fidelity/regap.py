"""Refit a loop run's profiles with long gaps counted as idle (the SGLang recorder fix).

Before the fix of ``SglangEngineView.num_running``, SGLang step files counted a step's
finished requests as running, so ``with_gaps`` added the idle time after a run's last
requests finished to that step. This stands in for the fixed recorder on steps recorded
before it: a gap over ``--cap`` seconds is taken as idle. It is a proxy (a long stall
while requests run is dropped too); a rerun of ``loop.py`` is the measurement::

    python benchmarks/fidelity/regap.py OUT report.json regapped.json   # OUT: loop.py --out
    python benchmarks/fidelity/loop.py --resimulate regapped.json --json regapped.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from loop import step_bias  # this directory's loop.py: run as a script, it is on the path

from schedkit.sim.calibration import read_steps
from schedkit.sim.costmodel import RooflineCostModel
from schedkit.sim.fit import StepRow, fit_steps, with_gaps
from schedkit.sim.profiles import get_gpu, get_model, register_model_dir


def load(path: Path, cap: float) -> list[StepRow]:
    rows = sorted(read_steps(path)[0], key=lambda r: r.start_s or 0.0)
    out = []
    for row, nxt in zip(rows, [*rows[1:], None], strict=True):
        idle = nxt is not None and (nxt.start_s or 0.0) - (row.end_s or 0.0) > cap
        out.append(dataclasses.replace(row, num_running=0) if idle else row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the loop's --out directory (its step files)")
    parser.add_argument("report", type=Path, help="the loop's --json file")
    parser.add_argument("dest", type=Path, help="where to write the refitted report")
    parser.add_argument("--cap", type=float, default=0.05, help="seconds; longer gaps: idle")
    args = parser.parse_args()
    register_model_dir(str(args.out / "model"))
    reference = RooflineCostModel(get_model(str(args.out / "model")), get_gpu("H100-SXM"))
    report = json.loads(args.report.read_text())
    fit = fit_steps(load(args.out / "steps" / "fcfs.csv", args.cap), reference)
    report.update(coefficients=fit.model.describe(), fit=fit.describe())
    for name, test in report["tests"].items():
        files = sorted(args.out.glob(f"{name}-steps-*/*.csv"))
        rows = [r for f in files for r in load(f, args.cap)]
        test["oracle_coefficients"] = fit_steps(rows, reference).model.describe()
        for i, rounds in enumerate(test["step_bias"]):
            for policy in rounds:
                steps, _ = with_gaps(
                    load(args.out / f"{name}-steps-{i}" / f"{policy}.csv", args.cap)
                )
                rounds[policy] = step_bias(fit.model, steps)
    report["regapped"] = f"profiles refitted with gaps over {args.cap:g} s counted as idle"
    args.dest.write_text(json.dumps(report, indent=2))
    print(f"held-out {fit.holdout['all']}, gap share {fit.gap_share:.3f}")


if __name__ == "__main__":
    main()
