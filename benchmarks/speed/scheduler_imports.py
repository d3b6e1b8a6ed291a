"""What an engine's scheduler process imports of schedkit, and how long it takes.

    .venv-vllm/bin/python benchmarks/speed/scheduler_imports.py vllm
    PYTHONPATH=adapters/sglang/schedkit_sglang/_cpu_site .venv-sglang/bin/python benchmarks/speed/scheduler_imports.py sglang
    .venv-lmdeploy/bin/python benchmarks/speed/scheduler_imports.py lmdeploy

Each of ``--repeat`` fresh interpreters imports the engine's own scheduler module first
(untimed), then the adapter's scheduler class or patches (timed): the modules that adds,
how many are schedkit's and of its simulator or bench, and whether numpy came with ours
(``schedkit.testing.imports.loaded_by``, which the adapters' suites also use). Printed:
the median time and the module counts of the last run.

On CPU, SGLang imports only with the stand-ins of ``_cpu_site``, whose ``sitecustomize``
imports ``schedkit_sglang`` before the engine module; since the package imports
``schedkit`` (so that its moved module names resolve, ``schedkit._moved``), the ``sglang``
line counts what ``patches`` adds beyond the core: +13 modules, all schedkit's (the
adapter and the kit), on the commit that added this note. On a GPU there is no such site.
"""

from __future__ import annotations

import argparse
import statistics

from schedkit.testing.imports import loaded_by

TARGETS = {
    "vllm": ("vllm.v1.core.sched.scheduler", "schedkit_vllm:Scheduler"),
    "sglang": ("sglang.srt.managers.scheduler", "schedkit_sglang.patches:plan"),
    "lmdeploy": ("lmdeploy.pytorch.paging.scheduler", "schedkit_lmdeploy.patches:install"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", choices=sorted(TARGETS))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    engine_module, target = TARGETS[args.engine]
    times, modules = [], []
    for _ in range(args.repeat):
        loaded = loaded_by(engine_module, target)
        times.append(float(loaded["seconds"]))  # type: ignore[arg-type]
        modules = list(loaded["modules"])  # type: ignore[call-overload]
    ours = [m for m in modules if m.startswith("schedkit")]
    harness = [m for m in ours if m.startswith(("schedkit.sim", "schedkit.bench"))]
    numpy = any(m == "numpy" or m.startswith("numpy.") for m in modules)
    print(
        f"{target}: +{statistics.median(times) * 1000:.0f} ms (median of {args.repeat}),"
        f" +{len(modules)} modules, {len(ours)} schedkit*, {len(harness)} of the simulator"
        f" or bench; numpy loaded by ours: {numpy}"
    )


if __name__ == "__main__":
    main()
