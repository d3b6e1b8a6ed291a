"""Key hooks through the facade: the order they give, when keys are asked, and keys that
are not keys (issue #13). The per-hook contract tests are in test_hooks.py."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from _policies import make_blocks, make_requests, scripted
from hypothesis import given, settings
from hypothesis import strategies as st

from schedkit import EngineState, PolicyFacade, RequestState, StepReport
from schedkit.answers import Invalid, canonical_key


def ids(views: Any) -> list[str]:
    return [v.request_id for v in views]


def keyed_by(attr: str, asked: list[str] | None = None) -> Any:
    def key(request: Any, engine: Any) -> Any:
        if asked is not None:
            asked.append(request.request_id)
        return getattr(request, attr)

    return scripted(waiting_key=key)


def test_keys_are_asked_once_per_joining_and_the_order_kept(engine: EngineState) -> None:
    waiting = make_requests(4)
    for r, p in zip(waiting, (3, 1, 2, 1), strict=True):
        r.priority = p
    asked: list[str] = []
    facade = PolicyFacade([("p", keyed_by("priority", asked))])

    assert ids(facade.order_waiting(waiting, engine)) == ["r1", "r3", "r2", "r0"]
    waiting = [w for w in waiting if w.request_id != "r1"]  # r1 admitted
    late = RequestState("r9", 10, 4, arrival_time=9.0)
    late.priority = 1
    assert ids(facade.order_waiting([*waiting, late], engine)) == ["r3", "r9", "r2", "r0"]
    assert asked == ["r0", "r1", "r2", "r3", "r9"]  # each once


def test_a_preempted_request_is_keyed_again_and_goes_ahead_of_equals(
    engine: EngineState,
) -> None:
    waiting = make_requests(3)  # all priority 0: the engine's order decides
    asked: list[str] = []
    facade = PolicyFacade([("p", keyed_by("priority", asked))])
    assert ids(facade.order_waiting(waiting, engine)) == ["r0", "r1", "r2"]
    first = waiting[0]
    facade.order_waiting(waiting[1:], engine)  # r0 was admitted
    first.num_preemptions = 1  # ...then preempted: back at the front, as vLLM puts it
    facade.step_finished(StepReport(1, 0.01, 0, 0, preempted=(first,)), engine)
    assert ids(facade.order_waiting([first, *waiting[1:]], engine)) == ["r0", "r1", "r2"]
    assert asked == ["r0", "r1", "r2", "r0"]


def test_a_request_preempted_while_still_listed_is_keyed_again(engine: EngineState) -> None:
    """SGLang's retraction: admitted and retracted between two calls, the request is
    waiting at both; the step report that names it makes its key be asked again."""
    waiting = make_requests(2)
    asked: list[str] = []
    facade = PolicyFacade([("p", keyed_by("priority", asked))])
    facade.order_waiting(waiting, engine)
    waiting[1].priority = -5  # what the policy reads when it joins again
    facade.step_finished(StepReport(1, 0.01, 0, 0, preempted=(waiting[1],)), engine)
    assert ids(facade.order_waiting(waiting, engine)) == ["r1", "r0"]
    assert facade.has_step_observer  # so engines build the reports


def test_the_list_hook_sees_the_keyed_order_and_wins(engine: EngineState) -> None:
    waiting = make_requests(3)
    for r, p in zip(waiting, (2, 0, 1), strict=True):
        r.priority = p
    seen: list[list[str]] = []

    def reverse(w: Any, e: Any) -> Any:
        seen.append(ids(w))
        return list(reversed(w)) if len(seen) == 1 else None

    facade = PolicyFacade(
        [("key", keyed_by("priority")), ("list", scripted(order_waiting=reverse))]
    )
    assert ids(facade.order_waiting(waiting, engine)) == ["r0", "r2", "r1"]  # the list's
    assert ids(facade.order_waiting(waiting, engine)) == ["r1", "r2", "r0"]  # keys again
    assert seen == [["r1", "r2", "r0"]] * 2


def test_an_engine_that_keeps_the_key_order_asks_only_the_list_hook(
    engine: EngineState,
) -> None:
    asked: list[str] = []
    facade = PolicyFacade([("p", keyed_by("priority", asked))])
    assert facade.order_waiting(make_requests(3), engine, keyed=True) is None
    assert asked == []


def test_victims_by_key_ties_take_the_newest_first(engine: EngineState) -> None:
    running = make_requests(4)
    for r, p in zip(running, (1, 0, 1, 0), strict=True):
        r.priority = p
    facade = PolicyFacade([("p", scripted(victim_key=lambda r, e: -r.priority))])
    assert ids(facade.select_victims(running, running[0], engine)) == ["r2", "r0", "r3", "r1"]


def test_victims_list_hook_answer_wins_and_none_falls_to_keys(engine: EngineState) -> None:
    running = make_requests(3)
    answers = iter([[running[1]], None])
    facade = PolicyFacade(
        [
            ("list", scripted(select_victims=lambda r, n, e: next(answers))),
            ("key", scripted(victim_key=lambda r, e: r.arrival_time)),
        ]
    )
    assert ids(facade.select_victims(running, running[0], engine)) == ["r1"]
    assert ids(facade.select_victims(running, running[0], engine)) == ["r0", "r1", "r2"]


def test_evictions_by_key_ties_keep_least_recently_used_first(engine: EngineState) -> None:
    blocks = make_blocks(5)  # least recently used first
    for block, hits in zip(blocks, (2, 0, 1, 0, 2), strict=True):
        block.num_hits = hits
    facade = PolicyFacade([("lfu", scripted(eviction_key=lambda b, e: b.num_hits))])
    chosen = facade.select_evictions(blocks, 2, engine)
    assert [b.block_hash for b in chosen or []] == [1001, 1003, 1002, 1000, 1004]


# -- what a key may be -------------------------------------------------------------------


class Rank(NamedTuple):
    tier: int
    name: str


class Lying(int):
    def __lt__(self, other: object) -> bool:
        raise AssertionError("the engine ran a policy's comparison")

    __gt__ = __le__ = __ge__ = __eq__ = __lt__
    __hash__ = int.__hash__


def test_named_tuples_numpy_like_and_subclasses_are_keys() -> None:
    assert canonical_key(Rank(1, "a")) == canonical_key((1, "a"))
    assert canonical_key(Lying(3)) == (0, 3) and type(canonical_key(Lying(3))[1]) is int
    assert canonical_key(True) == (0, 1)
    assert sorted([canonical_key(Lying(2)), canonical_key(Lying(1))])[0] == (0, 1)


def test_nan_objects_and_deep_nesting_are_not_keys() -> None:
    deep: Any = 1
    for _ in range(20):
        deep = (deep,)
    for bad in (math.nan, (1, math.nan), object(), [1, 2], None, {"a": 1}, deep, (0,) * 65):
        try:
            canonical_key(bad)
        except Invalid:
            continue
        raise AssertionError(f"{bad!r} accepted as a key")


keys = st.recursive(
    st.integers() | st.floats(allow_nan=False) | st.text(max_size=4) | st.binary(max_size=4),
    lambda inner: st.tuples(inner) | st.tuples(inner, inner),
    max_leaves=6,
)


@given(st.lists(keys, min_size=2, max_size=12))
def test_canonical_keys_of_any_kinds_always_compare(values: list[Any]) -> None:
    canon = [canonical_key(v) for v in values]
    ordered = sorted(canon)  # never a TypeError, whatever kinds the policies mixed
    assert len(ordered) == len(values)
    same_kind = [c for c, v in zip(canon, values, strict=True) if type(v) is int]
    assert sorted(same_kind) == [(0, v) for v in sorted(v for v in values if type(v) is int)]


scalars = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=True, width=64),
    st.text(max_size=3),
    st.binary(max_size=3),
)
keys = st.recursive(
    scalars, lambda inner: st.tuples(inner) | st.lists(inner, max_size=3).map(tuple), max_leaves=8
)
parts = st.lists(st.one_of(st.just(None), keys), min_size=1, max_size=3)


@settings(max_examples=400)
@given(parts, parts)
def test_flat_keys_order_and_equal_as_the_combined_keys_do(a: list[Any], b: list[Any]) -> None:
    """flat_key is order-isomorphic: the eviction heaps may compare it instead."""
    from schedkit.answers import UNKEYED, flat_key

    def combined(values: list[Any]) -> tuple[Any, ...]:
        return tuple(UNKEYED if v is None else (0, canonical_key(v)) for v in values)

    n = min(len(a), len(b))  # one engine combines as many parts for every item
    x, y = combined(a[:n]), combined(b[:n])
    fx, fy = flat_key(x), flat_key(y)
    assert (fx < fy) == (x < y) and (fx == fy) == (x == y) and (fx > fy) == (x > y)


answers = st.one_of(
    st.just(None),
    keys,
    st.tuples(st.integers(-5, 5), st.just(math.nan)),  # NaN: not a key
    st.tuples(st.booleans(), st.integers()),  # bools: keyed as ints, by the general path
    st.just([1, 2]),
    st.just(RuntimeError("policy bug")),  # raised
)


@settings(max_examples=300, deadline=None)  # no timing in tests: a loaded machine is slow
@given(st.lists(answers, min_size=1, max_size=3))
def test_flat_eviction_keys_equal_the_flattened_combined_keys(values: list[Any]) -> None:
    """The simulator's one-pass path (``flat_eviction_key``) gives what flattening the
    combined key gives, and counts the same faults, for any answers of any policies."""
    from schedkit.answers import flat_key

    def answer(value: Any) -> Any:
        if isinstance(value, Exception):
            return lambda block, engine: (_ for _ in ()).throw(value)
        return value

    def facade() -> PolicyFacade:
        policies = [(f"p{i}", scripted(eviction_key=answer(v))) for i, v in enumerate(values)]
        return PolicyFacade(policies)

    block, engine = make_blocks(1)[0], EngineState(100, 16)
    nested, flat = facade(), facade()
    nested_key = nested.eviction_key(block, engine) or ()  # as flat_eviction_key documents
    assert flat.flat_eviction_key(block, engine) == flat_key(nested_key)
    assert flat.errors == nested.errors
