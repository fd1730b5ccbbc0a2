"""Iceberg's partition transforms over Arrow arrays, as the spec defines them, inside Spark's
tasks (pyarrow and the standard library only): a row-level write places each new row in its
partition and orders each file's rows by the sort order with them.

A transform is named as Iceberg prints it (`identity`, `bucket[16]`, `truncate[4]`, `year`,
`month`, `day`, `hour`, `void`) and applied to a column of the type its source has (`int`,
`long`, `date`, `time`, `timestamp`, `timestamptz`, `string`, `binary`, `fixed[n]`, `uuid`,
`decimal(p, s)`, `boolean`, `float`, `double`), the column in the Arrow type pyiceberg gives
that Iceberg type. The values are the spec's: a date as days from 1970-01-01, a time or a
timestamp as microseconds, a bucket's as `(murmur3_32(bytes) & Integer.MAX_VALUE) % N` over
the spec's byte form of the value.
"""

from __future__ import annotations

import decimal
import re
import struct

import pyarrow as pa
import pyarrow.compute as pc

_U32 = pa.uint32()
_C1, _C2 = 0xCC9E2D51, 0x1B873593
_MICROS_PER_HOUR = 3_600_000_000
_MICROS_PER_DAY = 86_400_000_000


def _u(value: int) -> pa.Scalar:
    return pa.scalar(value & 0xFFFFFFFF, _U32)


def _rotl(x: pa.Array, r: int) -> pa.Array:
    return pc.bit_wise_or(pc.shift_left(x, _u(r)), pc.shift_right(x, _u(32 - r)))


def _mix_k(k: pa.Array) -> pa.Array:
    k = pc.multiply(k, _u(_C1))
    return pc.multiply(_rotl(k, 15), _u(_C2))


def murmur3_longs(values: pa.Array) -> pa.Array:
    """murmur3_x86_32 (seed 0) of each value's 8 bytes, little-endian (Iceberg's `hashLong`),
    as uint32; nulls stay null."""
    u = pc.cast(values.cast(pa.int64()), pa.uint64(), safe=False)
    low = pc.bit_wise_and(u, pa.scalar(0xFFFFFFFF, pa.uint64())).cast(_U32)
    high = pc.shift_right(u, pa.scalar(32, pa.uint64())).cast(_U32)
    h = pc.multiply(low, _u(0))  # the seed, 0, in every row
    for block in (low, high):
        h = _rotl(pc.bit_wise_xor(h, _mix_k(block)), 13)
        h = pc.add(pc.multiply(h, _u(5)), _u(0xE6546B64))
    h = pc.bit_wise_xor(h, _u(8))
    return _fmix(h)


def _fmix(h: pa.Array) -> pa.Array:
    h = pc.bit_wise_xor(h, pc.shift_right(h, _u(16)))
    h = pc.multiply(h, _u(0x85EBCA6B))
    h = pc.bit_wise_xor(h, pc.shift_right(h, _u(13)))
    h = pc.multiply(h, _u(0xC2B2AE35))
    return pc.bit_wise_xor(h, pc.shift_right(h, _u(16)))


def murmur3_bytes(data: bytes) -> int:
    """murmur3_x86_32 (seed 0) of `data`, unsigned (the mmh3 package's, when installed)."""
    try:
        import mmh3  # a C implementation, pyiceberg's

        return int(mmh3.hash(data, 0, signed=False))
    except ImportError:
        pass
    m = 0xFFFFFFFF
    h = 0
    n = len(data) // 4
    for (k,) in struct.iter_unpack("<I", data[: 4 * n]):
        k = (k * _C1) & m
        k = ((k << 15) | (k >> 17)) & m
        h ^= (k * _C2) & m
        h = ((h << 13) | (h >> 19)) & m
        h = (h * 5 + 0xE6546B64) & m
    tail = data[4 * n :]
    if tail:
        k = int.from_bytes(tail, "little")
        k = (k * _C1) & m
        k = ((k << 15) | (k >> 17)) & m
        h ^= (k * _C2) & m
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    return h ^ (h >> 16)


def _floor_div(a: pa.Array, b: int) -> pa.Array:
    """a // b, rounding down (Arrow's divide rounds toward zero)."""
    b_ = pa.scalar(b, pa.int64())
    a = a.cast(pa.int64())
    return pc.divide(pc.subtract(a, pc.modulo(a, b_)), b_)


def _micros(values: pa.Array) -> pa.Array:
    """A time or timestamp column (any unit, any zone) as int64 microseconds since
    midnight / 1970-01-01 00:00 UTC."""
    t = values.type
    if pa.types.is_timestamp(t) or pa.types.is_time(t):
        unit = t.unit
        raw = pc.cast(values, pa.int64())
        if unit == "s":
            return pc.multiply(raw, 1_000_000)
        if unit == "ms":
            return pc.multiply(raw, 1_000)
        if unit == "ns":
            return _floor_div(raw, 1_000)
        return raw
    return values.cast(pa.int64())


def _naive(micros: pa.Array) -> pa.Array:
    return micros.cast(pa.timestamp("us"))


def _storage(values: pa.Array) -> pa.Array:
    if isinstance(values.type, pa.BaseExtensionType):
        return values.storage
    return values


def _canonical(values: pa.Array, source: str) -> pa.Array:
    """The identity transform: the value in the spec's form."""
    values = _storage(values)
    if source == "date":
        return values.cast(pa.int32())
    if source in ("time", "timestamp", "timestamptz"):
        return _micros(values)
    return values


def _bucket(values: pa.Array, source: str, n: int) -> pa.Array:
    values = _storage(values)
    if source in ("int", "long", "date", "time", "timestamp", "timestamptz"):
        h = murmur3_longs(_canonical(values, source))
    else:
        h = pa.array(
            [
                None if v is None else murmur3_bytes(_bytes_of(v, source))
                for v in values.to_pylist()
            ],
            _U32,
        )
    masked = pc.bit_wise_and(h, _u(0x7FFFFFFF))
    return pc.modulo(masked.cast(pa.int64()), pa.scalar(n, pa.int64())).cast(pa.int32())


def _bytes_of(value: object, source: str) -> bytes:
    """The bytes a `bucket` hashes for a value of a variable-length type."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, decimal.Decimal):
        unscaled = _unscaled(value, _decimal_scale(source))
        n = ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) // 8
        return unscaled.to_bytes(n, "big", signed=True)
    if hasattr(value, "bytes"):  # uuid.UUID
        return value.bytes  # type: ignore[no-any-return, attr-defined]
    return bytes(value)  # type: ignore[call-overload]


_EXACT = decimal.Context(prec=80)  # decimal(38, s) and more, exactly


def _unscaled(value: decimal.Decimal, scale: int) -> int:
    return int(value.scaleb(scale, context=_EXACT))


def _decimal_scale(source: str) -> int:
    m = re.fullmatch(r"decimal\(\s*\d+\s*,\s*(\d+)\s*\)", source)
    return int(m.group(1)) if m else 0


def _truncate(values: pa.Array, source: str, width: int) -> pa.Array:
    values = _storage(values)
    if source in ("int", "long"):
        w = pa.scalar(width, values.type)
        return pc.subtract(values, pc.modulo(values, w))
    if source == "string":
        return pc.utf8_slice_codeunits(values, 0, width)
    if source == "binary":
        return pc.binary_slice(values, 0, width)
    if source.startswith("decimal"):
        scale = _decimal_scale(source)
        out = []
        for v in values.to_pylist():
            if v is None:
                out.append(None)
                continue
            unscaled = _unscaled(v, scale)
            out.append(decimal.Decimal(unscaled - unscaled % width).scaleb(-scale, context=_EXACT))
        return pa.array(out, values.type)
    raise ValueError(f"truncate[{width}] of a {source} column")


def _time(values: pa.Array, source: str, unit: str) -> pa.Array:
    values = _storage(values)
    if source == "date":
        days = values.cast(pa.int32())
        if unit == "day":
            return days
        stamps = _naive(pc.multiply(days.cast(pa.int64()), _MICROS_PER_DAY))
    elif source in ("timestamp", "timestamptz"):
        micros = _micros(values)
        if unit == "hour":
            return _floor_div(micros, _MICROS_PER_HOUR).cast(pa.int32())
        if unit == "day":
            return _floor_div(micros, _MICROS_PER_DAY).cast(pa.int32())
        stamps = _naive(micros)
    else:
        raise ValueError(f"{unit} of a {source} column")
    years = pc.subtract(pc.year(stamps), 1970)
    if unit == "year":
        return years.cast(pa.int32())
    if unit == "month":
        return pc.add(pc.multiply(years, 12), pc.subtract(pc.month(stamps), 1)).cast(pa.int32())
    raise ValueError(f"{unit} of a {source} column")


def apply(transform: str, source: str, values: pa.Array) -> pa.Array:
    """`transform` applied to `values` (a column of Iceberg type `source`)."""
    m = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", transform.strip())
    if m is None:
        raise ValueError(f"unknown transform {transform}")
    name, arg = m.group(1), int(m.group(2) or 0)
    if name == "identity":
        return _canonical(values, source)
    if name == "bucket":
        return _bucket(values, source, arg)
    if name == "truncate":
        return _truncate(values, source, arg)
    if name in ("year", "month", "day", "hour"):
        return _time(values, source, name)
    if name == "void":
        return pa.nulls(len(values), pa.int32())
    raise ValueError(f"unknown transform {transform}")
