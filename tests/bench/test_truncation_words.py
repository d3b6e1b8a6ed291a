"""The ``--max-requests`` warning speaks in the rates and times the user asked for (issue
#38 item 10): at ``--rate-scale 4`` it quotes the replay's seconds and requests/s, and the
``--window`` it suggests says it is in the trace's seconds."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_results_schema import _trace

from schedkit.bench.runner import truncation_flag
from schedkit.workload import load_workload


@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_the_warning_quotes_the_replay_at_its_rate(tmp_path: Path, scale: float) -> None:
    full = load_workload(str(_trace(tmp_path / "trace.jsonl")))  # 1 req/s for 60 s, then 10
    flag = truncation_flag(full, full.truncated(60), 60, rate_scale=scale)
    assert flag is not None
    kept, busiest = 60 / 59 * scale, 60 / (full.busiest(60)[1] - full.busiest(60)[0]) * scale
    assert flag["kept_rate_rps"] == pytest.approx(kept)
    assert flag["busiest_rate_rps"] == pytest.approx(busiest)
    words = flag["message"]
    assert f"at {kept:.2f} req/s" in words and f"at {busiest:.2f} req/s" in words
    assert "--window 60:" in words
    if scale == 4.0:
        assert "replayed at 4x in 14.8 s" in words
        assert "the trace's seconds, as --window takes them" in words
        assert "replays in" in words
    else:
        assert "x in " not in words and "--rate-scale" not in words
