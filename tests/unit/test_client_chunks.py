"""A body kept in the chunks it arrived in slices exactly as the joined bytes would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from envfarm.client.chunks import Chunks
from envfarm.client.http import group_spans


@given(st.lists(st.binary(max_size=12), max_size=8), st.integers(-3, 40), st.integers(-3, 40))
def test_a_slice_of_the_chunks_is_the_slice_of_their_join(
    pieces: list[bytes], start: int, stop: int
) -> None:
    whole = b"".join(pieces)
    chunks = Chunks(pieces)
    assert len(chunks) == len(whole)
    assert bytes(chunks) == whole
    assert chunks[start:stop] == whole[start:stop]
    assert chunks[start:] == whole[start:]
    assert chunks[:stop] == whole[:stop]


def test_spans_are_checked_against_a_body_in_chunks() -> None:
    body = b'{"groups":[{"a":1},{"b":2}],"next_cursor":2}'
    pieces = [body[:13], body[13:20], body[20:]]  # a group across two chunks
    assert group_spans("11-18,19-26", Chunks(pieces)) == ((11, 18), (19, 26))
    assert group_spans("11-18,19-25", Chunks(pieces)) == ()
    assert Chunks(pieces)[19:26] == b'{"b":2}'
