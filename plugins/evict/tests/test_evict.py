"""lfu, slru, prefix-aware: installed, selectable by config only, eviction order, conformance."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

import pytest
from pydantic import ValidationError
from schedkit import (
    Admission,
    BlockState,
    BlockView,
    EngineState,
    Policy,
    PolicyFacade,
    PolicyRegistry,
    RequestState,
    RequestView,
    hookimpl,
    load_config,
)
from schedkit.errors import PolicyConfigError
from schedkit.testing import conformance_test, contract_test

from schedkit_evict import LeastFrequentlyUsed, PrefixAware, QueuedPrefixAware, SegmentedLRU

POLICIES = {
    "lfu": LeastFrequentlyUsed,
    "slru": SegmentedLRU,
    "prefix-aware": PrefixAware,
    "prefix-aware-queued": QueuedPrefixAware,
}
HOOKS = {
    "lfu": ["eviction_key"],
    "slru": ["eviction_key"],
    "prefix-aware": ["eviction_key"],
    "prefix-aware-queued": ["select_evictions", "on_request_arrived", "on_request_finished"],
}
KEYED = ("lfu", "slru", "prefix-aware")
ENGINE = EngineState(kv_blocks_total=64, block_size=16)


def block(block_hash: int, *, hits: int = 0, depth: int = 0, last: float = 0.0) -> BlockState:
    state = BlockState(block_hash, depth, last)
    state.num_hits = hits
    return state


def lru_sorted(blocks: list[BlockState]) -> list[BlockState]:
    """Candidates as the engine passes them: least recently used first (stable)."""
    return sorted(blocks, key=lambda b: b.last_access)


def hashes(blocks: Sequence[BlockView]) -> list[int]:
    return [b.block_hash for b in blocks]


# --- installation and selection ---------------------------------------------------


@pytest.mark.parametrize(("name", "cls"), POLICIES.items())
def test_discovered_and_selectable_only_by_config(name: str, cls: type) -> None:
    entry = PolicyRegistry.discover().entry(name)
    assert entry.distribution == "schedkit-evict"
    assert entry.load() is cls
    assert PolicyFacade.from_config(name).implemented == set(HOOKS[name])
    assert name not in load_config(None).policy


# --- lfu ----------------------------------------------------------------------------


def lfu_facade() -> PolicyFacade:
    return PolicyFacade([("lfu", LeastFrequentlyUsed())], strict=True)


def test_lfu_fewest_hits_first_then_least_recent() -> None:
    candidates = lru_sorted(
        [
            block(1, hits=3, last=1.0),
            block(2, hits=0, last=5.0),
            block(3, hits=1, last=2.0),
            block(4, hits=0, last=3.0),
            block(5, hits=1, last=0.5),
        ]
    )
    before = hashes(candidates)
    chosen = lfu_facade().select_evictions(candidates, 4, ENGINE)  # ranked by key
    assert hashes(chosen or [])[:4] == [4, 2, 5, 3]
    assert hashes(candidates) == before  # untouched


def test_lfu_ties_keep_the_engine_order() -> None:
    # One request's blocks, freed at once, tail first (as the engine frees them).
    candidates = [block(h, depth=d, last=1.0) for h, d in ((30, 2), (20, 1), (10, 0))]
    chosen = lfu_facade().select_evictions(candidates, 2, ENGINE)
    assert hashes(chosen or [])[:2] == [30, 20]


# --- slru ---------------------------------------------------------------------------


def keyed(name: str, options: dict[str, object] | None = None) -> PolicyFacade:
    return PolicyFacade.from_config({"policy": name, "options": {name: options or {}}}, strict=True)


def test_slru_evicts_probationary_blocks_before_protected_ones_within_the_credit() -> None:
    candidates = lru_sorted(
        [
            block(1, hits=1, last=0.0),  # protected, oldest of all
            block(2, hits=0, last=1.0),
            block(3, hits=5, last=2.0),  # protected
            block(4, hits=0, last=3.0),
        ]
    )
    chosen = keyed("slru").select_evictions(candidates, 3, ENGINE)  # ranked by key
    assert hashes(chosen or []) == [2, 4, 1, 3]


def test_slru_demotes_protected_blocks_older_than_the_credit() -> None:
    candidates = lru_sorted(
        [
            block(1, hits=2, last=0.0),  # protected, but 10 s older than block 2: demoted
            block(2, hits=0, last=10.0),
            block(3, hits=2, last=12.0),  # protected, 2 s older than block 4: kept
            block(4, hits=0, last=14.0),
        ]
    )
    chosen = keyed("slru", {"protect_s": 5.0}).select_evictions(candidates, 4, ENGINE)
    assert hashes(chosen or []) == [1, 2, 4, 3]
    plain = keyed("slru", {"protect_s": 0.0}).select_evictions(candidates, 4, ENGINE)
    assert hashes(plain or []) == [1, 2, 3, 4]  # no credit: plain LRU


def test_slru_promote_hits_sets_the_threshold() -> None:
    candidates = lru_sorted([block(1, hits=1, last=0.0), block(2, hits=0, last=1.0)])
    strict = keyed("slru", {"promote_hits": 2}).select_evictions(candidates, 2, ENGINE)
    assert hashes(strict or []) == [1, 2]  # block 1 stays probationary: plain LRU
    loose = keyed("slru").select_evictions(candidates, 2, ENGINE)
    assert hashes(loose or []) == [2, 1]


def test_slru_names_the_replacement_of_protected_fraction() -> None:
    config = {"policy": "slru", "options": {"slru": {"protected_fraction": 0.5}}}
    with pytest.raises(PolicyConfigError, match=r"protected_fraction.*protect_s"):
        PolicyFacade.from_config(config)


# --- prefix-aware -------------------------------------------------------------------


def test_prefix_aware_hits_then_deepest_then_least_recent() -> None:
    candidates = lru_sorted(
        [
            block(1, hits=0, depth=0, last=0.0),  # head of a one-off prompt
            block(2, hits=0, depth=7, last=4.0),  # deep private tail, recent
            block(3, hits=2, depth=9, last=1.0),
            block(4, hits=0, depth=7, last=2.0),
            block(5, hits=2, depth=1, last=0.5),
        ]
    )
    chosen = keyed("prefix-aware").select_evictions(candidates, 5, ENGINE)
    assert hashes(chosen or []) == [4, 2, 1, 3, 5]
    assert hashes(QueuedPrefixAware().select_evictions(candidates, 5, ENGINE)) == [4, 2, 1, 3, 5]


def test_prefix_aware_ranks_depth_by_doubling_classes() -> None:
    candidates = lru_sorted(
        [
            block(1, depth=4, last=0.0),  # class 4-7, older
            block(2, depth=7, last=1.0),  # class 4-7, newer: after block 1 despite depth
            block(3, depth=8, last=2.0),  # class 8-15: first
            block(4, depth=3, last=0.0),  # class 2-3: last
        ]
    )
    chosen = keyed("prefix-aware").select_evictions(candidates, 4, ENGINE)
    assert hashes(chosen or []) == [3, 1, 2, 4]


def request(request_id: str, *block_hashes: int) -> RequestState:
    return RequestState(request_id, 16 * len(block_hashes) + 1, 8, block_hashes=block_hashes)


def test_prefix_aware_evicts_blocks_a_queued_request_will_reuse_last() -> None:
    candidates = lru_sorted(
        [
            block(1, hits=0, depth=0, last=0.0),  # the queued request's head
            block(2, hits=0, depth=1, last=0.0),  # and its next block
            block(3, hits=4, depth=0, last=1.0),  # popular, but no queued request wants it
            block(4, hits=0, depth=5, last=2.0),
            block(5, hits=1, depth=2, last=3.0),
        ]
    )
    policy = QueuedPrefixAware()
    policy.on_request_arrived(request("queued", 1, 2, 99), ENGINE)
    assert hashes(policy.select_evictions(candidates, 3, ENGINE)) == [4, 5, 3]
    # within the reused group: the same order (hits, deepest, least recent)
    assert hashes(policy.select_evictions(candidates, 5, ENGINE)) == [4, 5, 3, 2, 1]
    policy.on_request_finished(request("queued", 1, 2, 99), "stop", ENGINE)
    assert hashes(policy.select_evictions(candidates, 5, ENGINE)) == [4, 2, 1, 5, 3]


def test_prefix_aware_counts_every_request_that_lists_a_block() -> None:
    candidates = [block(1, depth=0), block(2, depth=1), block(3, depth=0)]
    policy = QueuedPrefixAware()
    policy.on_request_arrived(request("a", 1, 2), ENGINE)
    policy.on_request_arrived(request("b", 1), ENGINE)
    policy.on_request_arrived(request("b", 3), ENGINE)  # an id the engine reused: replaced
    assert hashes(policy.select_evictions(candidates, 1, ENGINE)) == [2]  # all reused
    policy.on_request_finished(request("a", 1, 2), "length", ENGINE)
    assert hashes(policy.select_evictions(candidates, 2, ENGINE)) == [2, 1]  # b keeps 3
    policy.on_request_finished(request("b", 3), "aborted", ENGINE)
    policy.on_request_finished(request("never-admitted", 1), "rejected", ENGINE)
    assert policy.select_evictions(candidates, 1, ENGINE) == [candidates[1]]


class AdmitAll(Policy):
    @hookimpl
    def admit_request(self, request: RequestView) -> Admission:
        return Admission.admit()


def test_prefix_aware_sees_arrivals_behind_an_admission_policy() -> None:
    # Another admission policy configured first answers every arrival; prefix-aware's
    # on_request_arrived is still called before it, and changes nothing.
    queued = QueuedPrefixAware()
    facade = PolicyFacade([("admit-all", AdmitAll()), ("prefix-aware-queued", queued)], strict=True)
    assert facade.admit(request("queued", 7), ENGINE).admitted
    candidates = [block(7, depth=0), block(8, depth=0)]
    assert hashes(facade.select_evictions(candidates, 1, ENGINE) or []) == [8]


# --- through the facade -------------------------------------------------------------


@pytest.mark.parametrize("name", POLICIES)
def test_through_the_facade_returns_what_is_needed(name: str) -> None:
    facade = PolicyFacade.from_config(name, strict=True)
    candidates = lru_sorted([block(h, hits=h % 3, depth=h % 5, last=h / 10) for h in range(20)])
    chosen = facade.select_evictions(candidates, 7, ENGINE)
    # the list hook returns the 7 blocks; keys rank every candidate
    assert chosen is not None and len(chosen) == (20 if name in KEYED else 7)
    assert len(set(hashes(chosen))) == len(chosen)


# --- options ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "bad"),
    [("promote_hits", 0), ("promote_hits", "often"), ("protect_s", -1.0), ("protect_s", "inf")],
)
def test_slru_bad_option_value_names_the_field(field: str, bad: object) -> None:
    with pytest.raises(ValidationError, match=field):
        SegmentedLRU.Options.model_validate({field: bad})
    config = {"policy": "slru", "options": {"slru": {field: bad}}}
    with pytest.raises(PolicyConfigError, match=f"slru.*{field}"):
        PolicyFacade.from_config(config)


@pytest.mark.parametrize("name", ["lfu", "prefix-aware", "prefix-aware-queued"])
def test_policies_without_options_reject_any(name: str) -> None:
    with pytest.raises(PolicyConfigError, match=name):
        PolicyFacade.from_config({"policy": name, "options": {name: {"promote_hits": 2}}})


# --- the conformance kit ------------------------------------------------------------

test_conformance_lfu = conformance_test("lfu", max_examples=100)
test_conformance_slru = conformance_test("slru", max_examples=100)
test_conformance_slru_options = conformance_test(
    "slru", {"promote_hits": 3, "protect_s": 0.5}, max_examples=50
)
test_conformance_prefix_aware = conformance_test("prefix-aware", max_examples=100)
test_conformance_prefix_aware_queued = conformance_test("prefix-aware-queued", max_examples=100)


# --- the CLI ------------------------------------------------------------------------


def test_cli_lists_all_four() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "schedkit", "policies", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    listed = {e["name"]: e for e in json.loads(result.stdout)}
    for name in POLICIES:
        assert listed[name]["distribution"] == "schedkit-evict"
        assert listed[name]["hooks"] == HOOKS[name]
    assert set(listed["slru"]["options_schema"]["properties"]) == {
        "promote_hits",
        "protect_s",
    }


# The contract on every engine installed here (schedkit contract); composed with an
# ordering policy, as a deployment would run them.
test_contract_lfu = contract_test("lfu")
test_contract_slru = contract_test("slru")
test_contract_prefix_aware = contract_test("prefix-aware+sjf")
test_contract_prefix_aware_queued = contract_test("prefix-aware-queued")
