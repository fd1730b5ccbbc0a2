"""Equality delete files matched to data files by their metrics (planner/eq_bounds.py), as
Iceberg's delete index does: no Spark, against the rule stated per case."""

from __future__ import annotations

import struct
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from pyiceberg.types import DecimalType, DoubleType, IntegerType, LongType, StringType

from mor.planner.eq_bounds import may_apply, metrics_of

# the fast tier too (`make check`: tests/legs.py)
pytestmark = [pytest.mark.check]


def _file(
    lo: bytes | None, hi: bytes | None, nulls: int | None = 0, values: int | None = 10
) -> Any:

    fid = 1
    return SimpleNamespace(
        lower_bounds={fid: lo} if lo is not None else {},
        upper_bounds={fid: hi} if hi is not None else {},
        null_value_counts={fid: nulls} if nulls is not None else {},
        value_counts={fid: values} if values is not None else {},
    )


def _long(v: int) -> bytes:
    return struct.pack("<q", v)


def _int(v: int) -> bytes:
    return struct.pack("<i", v)


def _applies(data: Any, delete: Any, t: Any = None) -> bool:
    types = {1: t or LongType()}
    return may_apply(metrics_of(data, [1], types), metrics_of(delete, [1], types))


@pytest.mark.parametrize(
    ("data", "delete", "applies"),
    [
        ((0, 99), (100, 200), False),  # disjoint ranges
        ((0, 100), (100, 200), True),  # touching at one value
        ((50, 60), (0, 1000), True),
        ((500, 600), (0, 10), False),
    ],
)
def test_ranges(data: tuple[int, int], delete: tuple[int, int], applies: bool) -> None:
    d = _file(_long(data[0]), _long(data[1]))
    x = _file(_long(delete[0]), _long(delete[1]))
    assert _applies(d, x) is applies
    assert _applies(x, d) is applies  # symmetric


def test_nulls_match_nulls_whatever_the_ranges() -> None:
    data = _file(_long(0), _long(9), nulls=3)
    delete = _file(_long(100), _long(200), nulls=1)
    assert _applies(data, delete)  # a NULL key deletes the NULL rows
    assert not _applies(_file(_long(0), _long(9), nulls=0), delete)  # no NULL row, no overlap
    assert _applies(_file(None, None, nulls=None, values=None), delete)  # unknown counts


def test_all_null_against_none_null() -> None:
    all_null = _file(None, None, nulls=10, values=10)
    none_null = _file(_long(1), _long(5), nulls=0)
    assert not _applies(all_null, none_null)
    assert not _applies(none_null, all_null)
    assert _applies(all_null, _file(None, None, nulls=2, values=4))


def test_missing_bounds_and_unordered_types_keep_the_delete() -> None:
    assert _applies(_file(None, _long(9)), _file(_long(100), _long(200)))
    doubles = _file(struct.pack("<d", 0.0), struct.pack("<d", 1.0))
    far = _file(struct.pack("<d", 5.0), struct.pack("<d", 6.0))
    assert _applies(doubles, far, DoubleType())  # NaN is in no bound: never ruled out


def test_promoted_int_bounds_compare_with_long_ones() -> None:
    """A data file written while the key was an int keeps 4-byte bounds after int -> long."""
    old = _file(_int(-5), _int(7))
    assert _applies(old, _file(_long(7), _long(1 << 40)))
    assert not _applies(old, _file(_long(8), _long(1 << 40)))
    assert not _applies(_file(_int(-5), _int(7)), _file(_int(8), _int(9)), IntegerType())


def test_strings_by_unsigned_bytes_and_decimals_by_value() -> None:
    s = StringType()
    assert not _applies(_file(b"apple", b"banana"), _file(b"cherry", b"date"), s)
    assert _applies(_file(b"apple", b"c"), _file(b"banana", b"date"), s)
    # UTF-8 orders as code points: a non-ASCII key sorts after every ASCII one
    assert not _applies(_file(b"a", b"z"), _file("é".encode(), "ü".encode()), s)
    dec = DecimalType(10, 2)

    def unscaled(v: str) -> bytes:
        n = int(Decimal(v).scaleb(2))
        return n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)

    assert not _applies(
        _file(unscaled("-1.50"), unscaled("-0.01")), _file(unscaled("0.00"), unscaled("9.99")), dec
    )
    assert _applies(
        _file(unscaled("-1.50"), unscaled("0.00")), _file(unscaled("0.00"), unscaled("9.99")), dec
    )


def test_a_field_of_two_keys_rules_out_on_either() -> None:
    data = SimpleNamespace(
        lower_bounds={1: _long(0), 2: _long(0)},
        upper_bounds={1: _long(10), 2: _long(10)},
        null_value_counts={1: 0, 2: 0},
        value_counts={1: 10, 2: 10},
    )
    delete = SimpleNamespace(
        lower_bounds={1: _long(5), 2: _long(50)},
        upper_bounds={1: _long(6), 2: _long(60)},
        null_value_counts={1: 0, 2: 0},
        value_counts={1: 2, 2: 2},
    )
    types = {1: LongType(), 2: LongType()}
    assert not may_apply(metrics_of(data, [1, 2], types), metrics_of(delete, [1, 2], types))
