"""How often the episode test fires when there is no episode: section differences drawn
independent and alike, as sectioning assumes them.

``schedkit.bench.stats.episodes.find_episode`` calls a stretch of at most half the
sections an episode when its mean absolute difference is at least ``EPISODE_RATIO``
times the other sections'. Here the sections' differences are independent draws from a
normal, a Student t with 3 and with 1.5 degrees of freedom, and a lognormal (sigma 1.5)
with a random sign, for K = 5, 7 and 10 sections (what ``sections_for`` gives); each cell
is the share of ``--runs`` runs in which the test fires (no floor: the minimum effect
would only make it rarer). Run:

    .venv/bin/python benchmarks/stats/episode_test.py

The results are kept in ``interval_coverage.md`` (The episode test).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from schedkit.bench.stats.episodes import EPISODE_RATIO, find_episode

Draw = Callable[[np.random.Generator, int], np.ndarray]
DRAWS: dict[str, Draw] = {
    "normal": lambda rng, k: rng.standard_normal(k),
    "t, 3 df": lambda rng, k: rng.standard_t(3.0, k),
    "t, 1.5 df": lambda rng, k: rng.standard_t(1.5, k),
    "lognormal (sigma 1.5), signed": lambda rng, k: (
        rng.lognormal(0.0, 1.5, k) * rng.choice([-1.0, 1.0], k)
    ),
}
SECTIONS = (5, 7, 10)


def fired(draw: Draw, k: int, runs: int, seed: int) -> float:
    """Share of ``runs`` runs of ``k`` sections in which the test finds an episode."""
    rng = np.random.default_rng(seed)
    a = np.zeros(k)
    return sum(find_episode(a, draw(rng, k), 0.0) is not None for _ in range(runs)) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20_000, help="runs per cell")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"ratio {EPISODE_RATIO:g}, {args.runs:,} runs per cell\n")
    print("| section differences | " + " | ".join(f"K = {k}" for k in SECTIONS) + " |")
    print("|---|" + "---:|" * len(SECTIONS))
    for name, draw in DRAWS.items():
        cells = [f"{fired(draw, k, args.runs, args.seed + k):.2%}" for k in SECTIONS]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
