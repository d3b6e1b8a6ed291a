"""Keeps each benchmark's time per unit and prints every arm against its group's baseline."""

from __future__ import annotations

from collections.abc import Callable

import pytest

Timings = dict[str, dict[str, tuple[float, float]]]  # group -> arm -> (min, median) seconds
_TIMINGS = pytest.StashKey[Timings]()


@pytest.fixture
def record(request: pytest.FixtureRequest, benchmark: object) -> Callable[[str, str, int], None]:
    """``record(group, arm, per)``: keep this benchmark's min and median divided by ``per``."""
    table = request.config.stash.setdefault(_TIMINGS, {})

    def keep(group: str, arm: str, per: int) -> None:
        meta = getattr(benchmark, "stats", None)
        if meta is None:  # --benchmark-disable: nothing was timed
            return
        table.setdefault(group, {})[arm] = (meta.stats.min / per, meta.stats.median / per)

    return keep


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    table = config.stash.get(_TIMINGS, {})
    if not table:
        return
    terminalreporter.write_sep("-", "against the baseline measured in this run (min; median)")
    for group, arms in table.items():
        base = arms.get("baseline")
        for arm, (low, mid) in arms.items():
            line = f"{group}: {arm} {low * 1e9:,.0f} ns; {mid * 1e9:,.0f} ns"
            if base and arm != "baseline":
                line += (
                    f" = {low / base[0]:.2f}x; {mid / base[1]:.2f}x baseline,"
                    f" overhead {(low - base[0]) * 1e9:,.0f} ns; {(mid - base[1]) * 1e9:,.0f} ns"
                )
            terminalreporter.write_line(line)
