"""Whether an equality delete file can delete rows of a data file, from their column metrics.

The same test Iceberg's own delete index makes (DeleteFileIndex.canContainEqDeletesForFile):
for every equality field, a delete file cannot apply when the value ranges of the two files do
not overlap, or when one holds only NULLs and the other none. A file whose metrics are missing
or unusable for a field is assumed to overlap on it. A streaming writer's equality deletes name
keys of a few earlier commits: with this test each data file meets only the delete files whose
keys can fall in its own range, and a file that meets none needs no anti-join at all.

Bounds are compared in the order Iceberg defines for each type: numbers and dates by value
(a data file written before an int -> long promotion stores 4-byte bounds, read by length),
strings and binary as unsigned bytes (truncated bounds stay valid as bounds). Float and double
fields are never used to rule a file out (NaN is in no bound), nor are types without an
order here.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    FixedType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

_INTEGERS = (IntegerType, LongType, DateType, TimeType, TimestampType, TimestamptzType)
_BYTES = (StringType, BinaryType, FixedType, UUIDType)


def _key(t: IcebergType, raw: bytes | None) -> Any:
    """A bound as a comparable value, or None when it cannot be used."""
    if raw is None:
        return None
    if isinstance(t, _INTEGERS):
        if len(raw) == 4:
            return struct.unpack("<i", raw)[0]
        if len(raw) == 8:
            return struct.unpack("<q", raw)[0]
        return None
    if isinstance(t, _BYTES):
        return bytes(raw)
    if isinstance(t, DecimalType):
        return int.from_bytes(raw, "big", signed=True) if raw else None
    if isinstance(t, BooleanType):
        return bool(raw[0]) if len(raw) == 1 else None
    return None


@dataclass(frozen=True, slots=True)
class FieldMetrics:
    lower: Any  # None: unknown
    upper: Any
    may_have_null: bool  # unknown counts: True
    all_null: bool  # known to hold only NULLs
    none_null: bool  # known to hold no NULL


def metrics_of(f: Any, field_ids: Any, types: Mapping[int, IcebergType]) -> dict[int, FieldMetrics]:
    """The metrics of `f` (a manifest entry's file) for the fields that can rule a file out."""
    lowers = f.lower_bounds or {}
    uppers = f.upper_bounds or {}
    nulls = f.null_value_counts or {}
    values = f.value_counts or {}
    out = {}
    for fid in field_ids:
        t = types.get(fid)
        if t is None:
            continue
        n, v = nulls.get(fid), values.get(fid)
        out[fid] = FieldMetrics(
            lower=_key(t, lowers.get(fid)),
            upper=_key(t, uppers.get(fid)),
            may_have_null=n is None or n > 0,
            all_null=n is not None and v is not None and n == v,
            none_null=n is not None and n == 0,
        )
    return out


def may_apply(data: Mapping[int, FieldMetrics], delete: Mapping[int, FieldMetrics]) -> bool:
    """False when, on some equality field, the delete file's keys cannot equal any value of
    the data file (NULL matches NULL: an equality delete is null-safe)."""
    for fid, d in delete.items():
        x = data.get(fid)
        if x is None:
            continue
        if x.may_have_null and d.may_have_null:
            continue  # a NULL key may delete a NULL row
        if (x.all_null and d.none_null) or (d.all_null and x.none_null):
            return False
        if None in (x.lower, x.upper, d.lower, d.upper):
            continue
        try:
            if x.upper < d.lower or d.upper < x.lower:
                return False
        except TypeError:  # bounds of two encodings (should not happen): assume overlap
            continue
    return True
