"""The concrete view records: defaults, no copies, short reprs."""

from __future__ import annotations

from schedkit import RequestState, RequestView


def _as_view(request: RequestView) -> RequestView:
    return request


def test_block_hashes_default_to_empty() -> None:
    assert _as_view(RequestState("r", 100, 8)).block_hashes == ()


def test_block_hashes_are_the_engines_sequence_not_a_copy() -> None:
    hashes = [11, 12, 13]
    request = RequestState("r", 48, 8, block_hashes=hashes)
    assert request.block_hashes is hashes
    hashes.append(14)  # an engine hashing output as it is generated
    assert list(request.block_hashes) == [11, 12, 13, 14]


def test_repr_shows_a_long_hash_list_by_its_length() -> None:
    assert "block_hashes=(1, 2)" in repr(RequestState("r", 32, 8, block_hashes=(1, 2)))
    long = repr(RequestState("r", 4096, 8, block_hashes=tuple(range(256))))
    assert "block_hashes=<256 hashes>" in long
