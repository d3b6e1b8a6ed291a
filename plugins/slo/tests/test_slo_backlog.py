"""The backlog of queued prefill work, and what counts as prefill."""

from __future__ import annotations

import math

import pytest
from schedkit import RequestState

from schedkit_slo import Backlog, prefill_left


def state(prompt: int, *, computed: int = 0, output: int = 0) -> RequestState:
    request = RequestState("r", prompt, 64)
    request.num_computed_tokens = computed
    request.num_output_tokens = output
    return request


@pytest.mark.parametrize(
    ("prompt", "computed", "output", "left"),
    [
        (100, 0, 0, 100),  # new
        (100, 60, 0, 40),  # chunked prefill under way
        (100, 100, 1, 0),  # prefill done, first token out: decoding
        (100, 120, 21, 0),  # decoding
        (100, 0, 20, 120),  # preempted by recompute after 20 tokens
        (1, 0, 0, 0),  # a one-token prompt is its own next token
    ],
)
def test_prefill_left(prompt: int, computed: int, output: int, left: int) -> None:
    assert prefill_left(state(prompt, computed=computed, output=output)) == left


def test_ahead_sums_work_due_no_later() -> None:
    backlog = Backlog()
    backlog.set("a", 1.0, 100)
    backlog.set("b", 2.0, 200)
    backlog.set("c", -math.inf, 50)  # resumed requests are ahead of everyone
    assert backlog.ahead(0.5) == 50
    assert backlog.ahead(1.0) == 150
    assert backlog.ahead(5.0) == backlog.total() == 350
    assert len(backlog) == 3 and "b" in backlog


def test_update_set_and_remove() -> None:
    backlog = Backlog()
    backlog.set("a", 1.0, 100)
    backlog.update("a", 30)
    backlog.update("unknown", 999)  # untracked: ignored
    assert backlog.total() == 30
    backlog.update("a", 0)  # prefill done
    assert "a" not in backlog
    backlog.set("b", 1.0, 10)
    backlog.remove("b")
    backlog.remove("b")  # idempotent
    backlog.set("c", 1.0, 0)  # no work: not tracked
    assert len(backlog) == 0
    backlog.set("d", 1.0, 5)
    backlog.clear()
    assert backlog.total() == 0
