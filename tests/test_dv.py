"""Deletion vector blobs (physical/deletes/dv.py), without Spark: decoding against a blob laid out
by hand from the Puffin spec (independent of the encoder), round trips of random positions, and
every check that must refuse a damaged blob with a one-line error naming it."""

from __future__ import annotations

import struct
import zlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from mor.physical.deletes.dv import MAGIC, decode, encode
from mor.planner.errors import DataFileError

# the fast tier too (`make check`: tests/legs.py)
pytestmark = [pytest.mark.check]

WHERE = "deletion vector s3://w/t/data/dv.puffin at offset 4 of db.t"


def _by_hand(positions: list[int]) -> bytes:
    """The spec's layout written out: 64-bit portable Roaring = count of 32-bit bitmaps, then
    (high 32 bits key, 32-bit portable bitmap) by ascending key; framed by length, magic, CRC."""
    groups: dict[int, list[int]] = {}
    for p in sorted(set(positions)):
        groups.setdefault(p >> 32, []).append(p & 0xFFFFFFFF)
    body = struct.pack("<Q", len(groups))
    for key in sorted(groups):
        body += struct.pack("<I", key) + BitMap(groups[key]).serialize()
    vector = MAGIC + body
    return struct.pack(">I", len(vector)) + vector + struct.pack(">I", zlib.crc32(vector))


def test_decodes_a_blob_laid_out_from_the_spec() -> None:
    positions = [0, 1, 63, 64, 65535, 65536, 1 << 31, (1 << 32) + 5, (7 << 32) + 1]
    got = decode(_by_hand(positions), WHERE, cardinality=len(positions))
    assert got.type == pa.int64()
    assert got.to_pylist() == positions


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.one_of(st.integers(0, 5000), st.integers(0, (1 << 40))), max_size=300, unique=True)
)
def test_random_positions_round_trip_and_match_the_hand_layout(positions: list[int]) -> None:
    want = sorted(positions)
    assert decode(encode(positions), WHERE).to_pylist() == want
    assert decode(_by_hand(positions), WHERE).to_pylist() == want


def test_an_empty_vector_deletes_nothing() -> None:
    assert decode(_by_hand([]), WHERE, cardinality=0).to_pylist() == []


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda b: b[:-1], "its length field says"),
        (lambda b: b"\x00\x00\x00\x01" + b[4:], "its length field says"),
        (lambda b: b[:4] + b"\x00" + b[5:], "magic 00d33964 is not a deletion vector's"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "CRC-32 mismatch"),
        (lambda b: b[:12] + bytes([b[12] ^ 0x40]) + b[13:], "CRC-32 mismatch"),
        (lambda b: b[:8], "too short for a deletion vector"),
    ],
)
def test_a_damaged_blob_is_refused_by_name(damage, message: str) -> None:  # noqa: ANN001
    blob = damage(_by_hand([3, 9, 1 << 33]))
    with pytest.raises(DataFileError, match=message) as e:
        decode(blob, WHERE)
    assert str(e.value).startswith(WHERE) or WHERE in str(e.value)
    assert "\n" not in str(e.value)


def test_a_bitmap_that_does_not_decode_is_refused_even_with_a_good_crc() -> None:
    vector = MAGIC + b"\x05\x00\x00\x00\x00\x00\x00\x00" + b"\xff" * 7  # 5 bitmaps, no bytes
    blob = struct.pack(">I", len(vector)) + vector + struct.pack(">I", zlib.crc32(vector))
    with pytest.raises(DataFileError, match="the Roaring bitmap does not decode"):
        decode(blob, WHERE)


def test_a_count_other_than_the_manifest_entry_record_count_is_refused() -> None:
    with pytest.raises(DataFileError, match="holds 2 positions, its manifest entry records 3"):
        decode(_by_hand([1, 2]), WHERE, cardinality=3)
