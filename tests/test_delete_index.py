"""The delete-file index (planner/delete_index.py) against the spec's scope rules read directly:
no Spark, no I/O. Hand cases name the rule they check; a property test compares every
(data file, delete file) pair of random snapshots with the rules as written in SEMANTICS.md."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.manifest import DataFileContent, FileFormat

from mor.planner.delete_index import POS_FILE_PATH_ID, DeleteIndex, Entry, InvalidDeletes

# the fast tier too (`make check`: tests/legs.py)
pytestmark = [pytest.mark.check]

POS, EQ, DATA = (
    DataFileContent.POSITION_DELETES,
    DataFileContent.EQUALITY_DELETES,
    DataFileContent.DATA,
)
UNPARTITIONED = {9}  # spec 9 has no partition fields


def _file(
    content: DataFileContent,
    path: str,
    *,
    ref: str | None = None,
    lo: str | None = None,
    hi: str | None = None,
    offset: int | None = None,
) -> Any:
    """`offset`: a deletion vector (a Puffin blob at that offset), which needs `ref`."""
    return SimpleNamespace(
        content=content,
        file_path=path,
        file_format=FileFormat.PUFFIN if offset is not None else FileFormat.PARQUET,
        content_offset=offset,
        referenced_data_file=ref,
        lower_bounds={POS_FILE_PATH_ID: lo.encode()} if lo is not None else None,
        upper_bounds={POS_FILE_PATH_ID: hi.encode()} if hi is not None else None,
    )


def _entry(f: Any, seq: int, spec: int = 0, part: tuple[Any, ...] = ("a",)) -> Entry:
    return Entry(f, seq, spec, part if spec not in UNPARTITIONED else ())


def _index(*deletes: Entry) -> DeleteIndex:
    return DeleteIndex(deletes, lambda s: s in UNPARTITIONED)


def _paths(entries: list[Entry]) -> list[str]:
    return [e.file.file_path for e in entries]


DATA_FILE = _entry(_file(DATA, "s3://w/t/data/a/f1.parquet"), seq=3)


def test_position_delete_applies_at_its_own_sequence_number_equality_only_after() -> None:
    """data_seq <= delete_seq for positions (a DELETE in the commit that wrote the file);
    data_seq < delete_seq for equality (an upsert never deletes its own commit's rows)."""
    idx = _index(
        _entry(_file(POS, "p2"), 2),
        _entry(_file(POS, "p3"), 3),
        _entry(_file(POS, "p4"), 4),
        _entry(_file(EQ, "e2"), 2),
        _entry(_file(EQ, "e3"), 3),
        _entry(_file(EQ, "e4"), 4),
    )
    assert _paths(idx.position_deletes(DATA_FILE)) == ["p3", "p4"]
    assert _paths(idx.equality_deletes(DATA_FILE)) == ["e4"]


def test_partition_scope_is_spec_and_partition() -> None:
    """A delete of another partition, or of the same values under another spec, does not
    apply; an equality delete of an unpartitioned spec applies to every partition and spec."""
    idx = _index(
        _entry(_file(POS, "p-other-part"), 5, part=("b",)),
        _entry(_file(POS, "p-other-spec"), 5, spec=1),
        _entry(_file(EQ, "e-other-part"), 5, part=("b",)),
        _entry(_file(EQ, "e-other-spec"), 5, spec=1),
        _entry(_file(EQ, "e-global"), 5, spec=9),
        _entry(_file(POS, "p-unpartitioned"), 5, spec=9),
    )
    assert _paths(idx.position_deletes(DATA_FILE)) == []
    assert _paths(idx.equality_deletes(DATA_FILE)) == ["e-global"]


def test_referenced_data_file_scopes_a_position_delete_to_one_file() -> None:
    path = DATA_FILE.file.file_path
    idx = _index(
        _entry(_file(POS, "p-mine", ref=path), 4),
        _entry(_file(POS, "p-theirs", ref=path + ".other"), 4),
        _entry(_file(POS, "p-old", ref=path), 2),
    )
    assert _paths(idx.position_deletes(DATA_FILE)) == ["p-mine"]


@pytest.mark.parametrize(
    ("lo", "hi", "applies"),
    [
        ("s3://w/t/data/a/f1.parquet", "s3://w/t/data/a/f1.parquet", True),
        ("s3://w/t/data/a/f0", "s3://w/t/data/a/f2", True),  # a range, not an equality
        ("s3://w/t/data/a/", None, True),  # truncated lower bound only
        ("s3://w/t/data/a/f2", None, False),
        (None, "s3://w/t/data/a/f0", False),
    ],
)
def test_file_path_bounds_are_an_inclusive_range(lo: str, hi: str, applies: bool) -> None:
    idx = _index(_entry(_file(POS, "p", lo=lo, hi=hi), 3), _entry(_file(POS, "q"), 3))
    assert _paths(idx.position_deletes(DATA_FILE)) == (["p", "q"] if applies else ["q"])


def test_a_data_file_among_the_deletes_is_refused() -> None:
    with pytest.raises(ValueError, match="is a data file"):
        _index(_entry(_file(DATA, "d"), 1))


# --- every pair of random snapshots against the rules as written -------------------------------

_PATHS = [f"s3://w/t/data/{p}/f{i}.parquet" for p in "ab" for i in range(3)]
_SPECS = [0, 1, 9]
_PARTS = [("a",), ("b",)]


def _applies(d: Entry, x: Entry) -> bool:
    """SEMANTICS.md, one pair at a time."""
    f, path = x.file, d.file.file_path
    if f.content == POS:
        if x.seq < d.seq:
            return False
        if f.referenced_data_file:
            return f.referenced_data_file == path
        lo = (f.lower_bounds or {}).get(POS_FILE_PATH_ID)
        hi = (f.upper_bounds or {}).get(POS_FILE_PATH_ID)
        in_range = (lo is None or lo <= path.encode()) and (hi is None or path.encode() <= hi)
        return x.spec_id == d.spec_id and x.part == d.part and in_range
    if x.seq <= d.seq:
        return False
    return x.spec_id in UNPARTITIONED or (x.spec_id == d.spec_id and x.part == d.part)


@st.composite
def _entries(draw: Any, content: DataFileContent, n: int) -> list[Entry]:
    out = []
    for i in range(draw(st.integers(0, n))):
        spec = draw(st.sampled_from(_SPECS))
        part = draw(st.sampled_from(_PARTS))
        seq = draw(st.integers(1, 6))
        if content == DATA:
            f = _file(DATA, draw(st.sampled_from(_PATHS)))
        else:
            path = f"s3://w/t/deletes/{content.name}-{i}.parquet"
            ref = lo = hi = None
            if content == POS:
                kind = draw(st.sampled_from(["partition", "referenced", "bounded"]))
                if kind == "referenced":
                    ref = draw(st.sampled_from(_PATHS))
                elif kind == "bounded":
                    lo, hi = sorted(draw(st.lists(st.sampled_from(_PATHS), min_size=2, max_size=2)))
                    lo = lo[: draw(st.integers(10, len(lo)))]  # truncated bounds stay a range
            f = _file(content, path, ref=ref, lo=lo, hi=hi)
        out.append(_entry(f, seq, spec, part))
    return out


@settings(max_examples=300, deadline=None)
@given(
    data=_entries(DATA, 8),
    pos=_entries(POS, 10),
    eq=_entries(EQ, 10),
)
def test_index_agrees_with_the_rules_on_every_pair(
    data: list[Entry], pos: list[Entry], eq: list[Entry]
) -> None:
    idx = _index(*pos, *eq)
    order = lambda xs: sorted(xs, key=lambda x: (x.seq, x.file.file_path))  # noqa: E731
    for d in data:
        assert idx.position_deletes(d) == order([x for x in pos if _applies(d, x)])
        assert idx.equality_deletes(d) == order([x for x in eq if _applies(d, x)])


def _dv(puffin: str, offset: int, ref: str, seq: int) -> Entry:
    return _entry(_file(POS, puffin, ref=ref, offset=offset), seq)


def test_a_deletion_vector_replaces_the_position_delete_files_of_its_data_file() -> None:
    """v3 (and tables upgraded from v2): writers merge older position deletes into the vector,
    so a file with a vector reads the vector alone, whether the older deletes are scoped to the
    partition or name the file."""
    f1, f2 = DATA_FILE.file.file_path, "s3://w/t/data/a/f2.parquet"
    idx = _index(
        _entry(_file(POS, "pd-partition.parquet"), seq=4),
        _entry(_file(POS, "pd-named.parquet", ref=f1), seq=4),
        _dv("dv.puffin", 4, f1, seq=6),
    )
    assert _paths(idx.position_deletes(DATA_FILE)) == ["dv.puffin"]
    # another file of the partition still reads the partition's position delete file
    other = _entry(_file(DATA, f2), seq=3)
    assert _paths(idx.position_deletes(other)) == ["pd-partition.parquet"]


def test_a_deletion_vector_applies_only_to_the_file_it_names_at_or_after_its_sequence() -> None:
    f1 = DATA_FILE.file.file_path
    idx = _index(_dv("dv.puffin", 4, f1, seq=3), _dv("dv.puffin", 90, "s3://w/t/other", seq=9))
    assert [(e.file.file_path, e.file.content_offset) for e in idx.position_deletes(DATA_FILE)] == [
        ("dv.puffin", 4)
    ]  # written in the commit that added the file (same sequence number): it applies


def test_two_vectors_for_one_file_or_a_vector_older_than_its_file_are_refused() -> None:
    f1 = DATA_FILE.file.file_path
    two = _index(_dv("a.puffin", 4, f1, seq=5), _dv("b.puffin", 4, f1, seq=6))
    with pytest.raises(InvalidDeletes, match="2 deletion vectors .*the spec allows one"):
        two.position_deletes(DATA_FILE)
    old = _index(_dv("a.puffin", 4, f1, seq=2))
    with pytest.raises(InvalidDeletes, match=r"sequence number 2\) is older than the data file"):
        old.position_deletes(DATA_FILE)
