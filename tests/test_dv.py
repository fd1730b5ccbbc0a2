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


def _dv_scan(tmp_path, vectors, files=1):  # noqa: ANN001, ANN202
    """Data and delete tasks of a scan whose deletion vectors (data path -> positions) lie in
    `files` Puffin files, written by mor's own encoder."""
    from mor.physical.deletes.dv import puffin
    from mor.planner.nodes import DataTask, DeleteTask, DvBlob

    items = list(vectors.items())
    tasks, deletes = [], {}
    for f in range(files):
        part = items[f::files]
        data, blobs = puffin(part, "mor test")
        path = tmp_path / f"dv-{f}.puffin"
        path.write_bytes(data)
        for (name, positions), (offset, length) in zip(part, blobs):
            fid = len(tasks) + 1
            did = 1000 + fid
            deletes[did] = DeleteTask(
                file_id=did,
                kind="position",
                path=str(path),
                read_path=str(path),
                data_seq=2,
                spec_id=0,
                partition_id=0,
                record_count=len(set(positions)),
                size_bytes=len(data),
                dv=DvBlob(offset, length, name),
                names_one=name,
            )
            tasks.append(
                DataTask(
                    file_id=fid,
                    path=name,
                    read_path=name,
                    data_seq=1,
                    spec_id=0,
                    partition_id=0,
                    record_count=1_000_000,
                    size_bytes=1,
                    pos_deletes=(did,),
                )
            )
    return tasks, deletes


def test_deletion_vectors_of_one_puffin_file_are_one_read(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """A scan reads the blobs of one Puffin file in one ranged read (on an object store a
    request per data file was 10-50 ms each), and every data file still gets its own
    positions; two Puffin files are two reads; a cached vector is not read again."""
    from mor.physical.deletes import delete_files
    from mor.planner.state import ProcessCaches

    vectors = {f"s3://w/t/data/f{i}.parquet": [i, i + 7, 100 + 3 * i] for i in range(40)}
    reads: list[tuple[str, int, int]] = []
    real = delete_files.read_range

    def counted(io, path, offset, length):  # noqa: ANN001, ANN202
        reads.append((path, offset, length))
        return real(io, path, offset, length)

    monkeypatch.setattr(delete_files, "read_range", counted)
    for files in (1, 2):
        reads.clear()
        tasks, deletes = _dv_scan(tmp_path, vectors, files)
        caches = ProcessCaches()
        found = delete_files.read_positions(tasks, deletes, "db.t", None, caches)
        assert len(reads) == files
        assert {t.path: sorted(found[t.file_id].to_pylist()) for t in tasks} == {
            p: sorted(v) for p, v in vectors.items()
        }
        reads.clear()
        delete_files.read_positions(tasks, deletes, "db.t", None, caches)
        assert reads == []  # kept across queries of the process


def test_blobs_far_apart_are_read_apart(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """A gap above DV_GAP, or a read that would pass DV_SPAN, starts a read of its own: what
    is read beyond the blobs stays bounded."""
    from mor.physical.deletes import delete_files
    from mor.planner.state import ProcessCaches

    vectors = {f"f{i}.parquet": list(range(i * 50, i * 50 + 40)) for i in range(6)}
    tasks, deletes = _dv_scan(tmp_path, vectors)
    lengths = sorted(d.dv.length for d in deletes.values())
    reads: list[int] = []
    real = delete_files.read_range
    monkeypatch.setattr(
        delete_files,
        "read_range",
        lambda io, p, o, n: reads.append(n) or real(io, p, o, n),
    )
    monkeypatch.setattr(delete_files, "DV_SPAN", lengths[-1] * 2)  # two blobs a read at most
    found = delete_files.read_positions(tasks, deletes, "db.t", None, ProcessCaches())
    assert len(reads) == 3 and max(reads) <= lengths[-1] * 2
    assert {t.path: found[t.file_id].to_pylist() for t in tasks} == vectors
    reads.clear()
    monkeypatch.setattr(delete_files, "DV_GAP", -1)  # no gap allowed: blobs touch, gap 0
    found = delete_files.read_positions(tasks, deletes, "db.t", None, ProcessCaches())
    assert len(reads) == 6


def test_a_puffin_file_cut_short_is_refused_naming_the_blob(tmp_path) -> None:  # noqa: ANN001
    from mor.physical.deletes import delete_files
    from mor.planner.state import ProcessCaches

    vectors = {f"f{i}.parquet": [i, i + 1] for i in range(3)}
    tasks, deletes = _dv_scan(tmp_path, vectors)
    last = max(deletes.values(), key=lambda d: d.dv.offset)
    path = tmp_path / "dv-0.puffin"
    path.write_bytes(path.read_bytes()[: last.dv.offset + 3])
    with pytest.raises(DataFileError, match=rf"offset {last.dv.offset} of db.t: the file ends"):
        delete_files.read_positions(tasks, deletes, "db.t", None, ProcessCaches())
