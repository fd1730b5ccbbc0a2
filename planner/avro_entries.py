"""Manifest entries decoded by straight-line Python generated once per Avro schema, over
pyiceberg's Cython binary decoder: about a third of fastavro's time per entry.

fastavro builds a dictionary for every record and for every key/value pair of the five column
metric maps, and the entry is then reduced to a few values and one metric blob
(planner/manifests.EntryFile). Here the reader of a manifest's writer schema is generated as
Python source once (cached by the schema's text): the fields planning never reads (column
sizes, split offsets, key metadata, sort order; the metric maps too when a plan reads no
metrics) are skipped without being built, an int-keyed metric map is read as the flat
(field id, value, ...) tuple the blob holds (`read_ints`, `read_int_bytes_dict`: loops in C),
and partition values come out as Iceberg's Python values (days, microseconds, `uuid.UUID`,
`Decimal` made as fastavro makes it).

`records(raw, metrics)` gives the entries as dicts shaped as fastavro's (`status`,
`snapshot_id`, `sequence_number`, `file_sequence_number`, `data_file`), with the data file's
`partition` already the tuple of Iceberg values. What this reader does not handle raises
`Unhandled` (codecs other than null and deflate; a partition logical type other than date,
time, microsecond timestamps, uuid and decimal; Avro it cannot follow): the caller decodes that
manifest with fastavro as before, and an unreadable file is reported by that path, unchanged.
tests/test_manifests.py holds both readers to pyiceberg's on every manifest of the test tables.
"""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Callable
from decimal import Context, Decimal
from itertools import chain
from typing import Any

try:  # built in pyiceberg's wheels; a build from source without Cython lacks it
    from pyiceberg.avro.decoder_fast import CythonBinaryDecoder
except ImportError:  # pragma: no cover - every manifest then goes to fastavro
    CythonBinaryDecoder = None  # type: ignore[assignment,misc]

MAGIC = b"Obj\x01"
_PRIMITIVE_READ = {
    "null": "None",
    "boolean": "rbool()",
    "int": "rint()",
    "long": "rint()",
    "float": "rfloat()",
    "double": "rdouble()",
    "bytes": "rbytes()",
    "string": "rutf8()",
}
_PRIMITIVE_SKIP = {
    "null": None,
    "boolean": "dec.skip_boolean()",
    "int": "dec.skip_int()",
    "long": "dec.skip_int()",
    "float": "dec.skip_float()",
    "double": "dec.skip_double()",
    "bytes": "dec.skip_bytes()",
    "string": "dec.skip_utf8()",
}
# data_file fields no plan reads, and those only a plan with metrics reads
NEVER_READ = frozenset({"column_sizes", "split_offsets", "key_metadata", "sort_order_id"})
METRICS = frozenset(
    {"value_counts", "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds"}
)
# a partition value's logical type -> how its Avro value becomes Iceberg's (None: as read)
_PARTITION_LOGICAL = {
    ("date", "int"): None,
    ("time-micros", "long"): None,
    ("timestamp-micros", "long"): None,
    ("local-timestamp-micros", "long"): None,
    ("uuid", "fixed"): "uuid_bytes",
    ("uuid", "string"): "uuid_text",
    ("decimal", "bytes"): "decimal",
    ("decimal", "fixed"): "decimal",
}
_SCHEMAS = 256  # generated readers kept (one per table schema and partition spec read)
_READERS: dict[tuple[str, bool], Callable[..., list[dict[str, Any]]]] = {}


def _decimal(precision: int, scale: int) -> Callable[[bytes], Decimal]:
    context = Context(prec=precision)

    def convert(b: bytes) -> Decimal:
        unscaled = int.from_bytes(b, byteorder="big", signed=True)
        return context.create_decimal(unscaled).scaleb(-scale, context)

    return convert


class Unhandled(ValueError):
    """A manifest this reader does not decode: the caller uses fastavro's."""


def records(raw: bytes, metrics: bool = True) -> tuple[list[dict[str, Any]], str]:
    """The entries of the manifest `raw` (an Avro container file) and its schema's text.
    `metrics=False`: the metric maps skipped (absent from the data files' dicts)."""
    if CythonBinaryDecoder is None:
        raise Unhandled("pyiceberg's Cython decoder is not built here")
    dec = CythonBinaryDecoder(raw)
    if dec.read(4) != MAGIC:
        raise Unhandled("not an Avro container file")
    meta = _metadata(dec)
    sync = dec.read(16)
    text = meta.get("avro.schema", b"").decode()
    codec = meta.get("avro.codec", b"null")
    if codec not in (b"null", b"deflate"):
        raise Unhandled(f"codec {codec!r}")
    read = _reader(text, metrics)
    out: list[dict[str, Any]] = []
    end = len(raw)
    while dec.tell() < end:
        n = dec.read_int()
        size = dec.read_int()
        if codec == b"null":
            start = dec.tell()
            out += read(dec, n)
            if dec.tell() != start + size:
                raise Unhandled("a block's records do not fill it")
        else:
            block = zlib.decompress(dec.read(size), -15)
            inner = CythonBinaryDecoder(block)
            out += read(inner, n)
            if inner.tell() != len(block):
                raise Unhandled("a block's records do not fill it")
        if dec.read(16) != sync:
            raise Unhandled("a block's sync marker differs from the header's")
    return out, text


def _metadata(dec: Any) -> dict[str, bytes]:
    meta: dict[str, bytes] = {}
    count = dec.read_int()
    while count:
        if count < 0:
            count = -count
            dec.read_int()  # the block's size in bytes
        for _ in range(count):
            key = dec.read_utf8()
            meta[key] = dec.read_bytes()
        count = dec.read_int()
    return meta


def _reader(text: str, metrics: bool) -> Callable[..., list[dict[str, Any]]]:
    hit = _READERS.get((text, metrics))
    if hit is None:
        if len(_READERS) >= _SCHEMAS:  # many tables and schemas in one process: start over
            _READERS.clear()
        try:
            schema = json.loads(text)
        except ValueError as e:
            raise Unhandled(f"schema: {e}") from None
        hit = _READERS[(text, metrics)] = _Generator(metrics).compile(schema)
    return hit


class _Generator:
    """Python source reading `n` manifest entries from a decoder `dec` into a list."""

    def __init__(self, metrics: bool) -> None:
        self.metrics = metrics
        self.lines: list[str] = []
        self.count = 0
        self.named: dict[str, Any] = {}
        self.decimals: dict[str, Callable[[bytes], Decimal]] = {}

    def compile(self, schema: Any) -> Callable[..., list[dict[str, Any]]]:
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise Unhandled("a manifest's schema is a record")
        self._record(schema, 2, "rec", self._entry_field)
        body = self.lines
        head = [
            "def read(dec, n):",
            "    rint = dec.read_int; rints = dec.read_ints; ribd = dec.read_int_bytes_dict",
            "    rbool = dec.read_boolean; rfloat = dec.read_float; rdouble = dec.read_double",
            "    rbytes = dec.read_bytes; rutf8 = dec.read_utf8; rfixed = dec.read",
            "    out = []",
            "    for _ in range(n):",
        ]
        tail = ["        out.append(rec)", "    return out"]
        source = "\n".join(head + body + tail) + "\n"
        scope: dict[str, Any] = {
            "chain": chain,
            "uuid_bytes": lambda b: uuid.UUID(bytes=b),
            "uuid_text": uuid.UUID,
            "Unhandled": Unhandled,
            **self.decimals,
        }
        exec(compile(source, "<manifest entry reader>", "exec"), scope)  # noqa: S102 - our source
        return scope["read"]  # type: ignore[no-any-return]

    # --- the entry's own fields ---
    def _entry_field(self, field: dict[str, Any], ind: int, target: str) -> bool:
        if field["name"] == "data_file":
            t = self._resolve(field["type"])
            if not isinstance(t, dict) or t.get("type") != "record":
                raise Unhandled("data_file is a record")
            self._define(t)
            self._record(t, ind, target, self._file_field)
        else:
            self._read(field["type"], ind, target)
        return True

    def _file_field(self, field: dict[str, Any], ind: int, target: str) -> bool:
        name = field["name"]
        if name in NEVER_READ or (name in METRICS and not self.metrics):
            self._skip(field["type"], ind)
            return False
        if name == "partition":
            self._partition(field["type"], ind, target)
        else:
            self._read(field["type"], ind, target)
        return True

    def _partition(self, t: Any, ind: int, target: str) -> None:
        t = self._resolve(t)
        if not isinstance(t, dict) or t.get("type") != "record":
            raise Unhandled("partition is a record")
        self._define(t)
        values = []
        for f in t["fields"]:
            v = self._var("p")
            self._read(f["type"], ind, v)
            conv = self._partition_conversion(f["type"])
            if conv is not None:
                self._emit(ind, f"if {v} is not None: {v} = {conv}({v})")
            values.append(v)
        self._emit(ind, f"{target} = ({''.join(v + ', ' for v in values)})")

    def _partition_conversion(self, t: Any) -> str | None:
        t = self._resolve(t)
        if isinstance(t, list):
            convs = {self._partition_conversion(b) for b in t if self._resolve(b) != "null"}
            if len(convs) > 1:
                raise Unhandled("a partition union of several logical types")
            return convs.pop() if convs else None
        if not isinstance(t, dict) or "logicalType" not in t:
            return None
        key = (t["logicalType"], t["type"] if isinstance(t["type"], str) else None)
        if key not in _PARTITION_LOGICAL:
            raise Unhandled(f"partition logical type {t['logicalType']}")
        conv = _PARTITION_LOGICAL[key]
        if conv == "decimal":  # as fastavro makes it: the unscaled integer, in its precision
            name = self._var("dec")
            self.decimals[name] = _decimal(int(t["precision"]), int(t.get("scale", 0)))
            return name
        return conv

    # --- generic Avro ---
    def _record(self, t: dict[str, Any], ind: int, target: str, each: Callable[..., bool]) -> None:
        """A record as a dict of the fields `each(field, ind, variable)` reads (True) rather
        than skips (False)."""
        self._define(t)
        pairs = []
        for field in t["fields"]:
            v = self._var("f")
            if each(field, ind, v):
                pairs.append((field["name"], v))
        self._emit(ind, f"{target} = {{{', '.join(f'{n!r}: {v}' for n, v in pairs)}}}")

    def _plain_field(self, field: dict[str, Any], ind: int, target: str) -> bool:
        self._read(field["type"], ind, target)
        return True

    def _read(self, t: Any, ind: int, target: str) -> None:
        t = self._resolve(t)
        if isinstance(t, str):
            if t not in _PRIMITIVE_READ:
                raise Unhandled(f"type {t}")
            self._emit(ind, f"{target} = {_PRIMITIVE_READ[t]}")
            return
        if isinstance(t, list):
            index = self._var("u")
            self._emit(ind, f"{index} = rint()")
            for i, branch in enumerate(t):
                self._emit(ind, f"{'if' if i == 0 else 'elif'} {index} == {i}:")
                self._read(branch, ind + 1, target)
            self._emit(ind, "else:")
            self._emit(ind + 1, "raise Unhandled('a union index out of range')")
            return
        kind = t.get("type")
        if isinstance(kind, (dict, list)) or kind in _PRIMITIVE_READ:
            self._read(kind, ind, target)  # {"type": "long", "logicalType": ...}: the value
            return
        if kind == "record":
            self._record(t, ind, target, self._plain_field)
        elif kind == "fixed":
            self._define(t)
            self._emit(ind, f"{target} = rfixed({int(t['size'])})")
        elif kind == "enum":
            self._define(t)
            symbols = self._var("symbols")
            self._emit(ind, f"{symbols} = {tuple(t['symbols'])!r}")
            self._emit(ind, f"{target} = {symbols}[rint()]")
        elif kind == "array":
            self._array(t["items"], ind, target)
        elif kind == "map":
            self._blocks(ind, target, "{}", lambda i, c: self._map_item(t["values"], i, c, target))
        else:
            raise Unhandled(f"type {kind}")

    def _array(self, items: Any, ind: int, target: str) -> None:
        items = self._resolve(items)
        pair = self._int_keyed(items)
        if pair == "long":  # a metric map of counts: (key, value, ...) read in C
            self._blocks(
                ind, target, "[]", lambda i, c: self._emit(i, f"{target} += rints({c} * 2)")
            )
            self._emit(ind, f"{target} = tuple({target})")
        elif pair == "bytes":  # a metric map of bounds
            self._blocks(ind, target, "{}", lambda i, c: self._emit(i, f"ribd({c}, {target})"))
            self._emit(ind, f"{target} = tuple(chain.from_iterable({target}.items()))")
        else:
            item = self._var("i")

            def each(i: int, c: str) -> None:
                self._emit(i, f"for _ in range({c}):")
                self._read(items, i + 1, item)
                self._emit(i + 1, f"{target}.append({item})")

            self._blocks(ind, target, "[]", each)

    def _int_keyed(self, items: Any) -> str | None:
        """'long' or 'bytes' when the array's items are Iceberg's int-keyed map entries."""
        if not isinstance(items, dict) or items.get("type") != "record":
            return None
        fields = items["fields"]
        if [f["name"] for f in fields] != ["key", "value"]:
            return None
        key, value = (self._resolve(f["type"]) for f in fields)
        if key != "int" or value not in ("long", "bytes"):
            return None
        self._define(items)
        return value  # type: ignore[no-any-return]

    def _map_item(self, values: Any, ind: int, c: str, target: str) -> None:
        key, value = self._var("k"), self._var("m")
        self._emit(ind, f"for _ in range({c}):")
        self._emit(ind + 1, f"{key} = rutf8()")
        self._read(values, ind + 1, value)
        self._emit(ind + 1, f"{target}[{key}] = {value}")

    def _blocks(self, ind: int, target: str, empty: str, body: Callable[[int, str], None]) -> None:
        """An array's or map's blocks: a count (negative: its byte size follows), until 0;
        `body(indent, count variable)` reads one block's items."""
        c = self._var("c")
        self._emit(ind, f"{target} = {empty}")
        self._emit(ind, f"{c} = rint()")
        self._emit(ind, f"while {c}:")
        self._emit(ind + 1, f"if {c} < 0:")
        self._emit(ind + 2, f"{c} = -{c}")
        self._emit(ind + 2, "rint()")
        body(ind + 1, c)
        self._emit(ind + 1, f"{c} = rint()")

    def _skip(self, t: Any, ind: int) -> None:
        t = self._resolve(t)
        if isinstance(t, str):
            if t not in _PRIMITIVE_SKIP:
                raise Unhandled(f"type {t}")
            if _PRIMITIVE_SKIP[t] is not None:
                self._emit(ind, _PRIMITIVE_SKIP[t])  # type: ignore[arg-type]
            return
        if isinstance(t, list):
            index = self._var("u")
            self._emit(ind, f"{index} = rint()")
            for i, branch in enumerate(t):
                self._emit(ind, f"{'if' if i == 0 else 'elif'} {index} == {i}:")
                self._emit(ind + 1, "pass")
                self._skip(branch, ind + 1)
            self._emit(ind, "else:")
            self._emit(ind + 1, "raise Unhandled('a union index out of range')")
            return
        kind = t.get("type")
        if isinstance(kind, (dict, list)) or kind in _PRIMITIVE_SKIP:
            self._skip(kind, ind)
        elif kind == "record":
            self._define(t)
            for field in t["fields"]:
                self._skip(field["type"], ind)
        elif kind == "fixed":
            self._define(t)
            self._emit(ind, f"dec.skip({int(t['size'])})")
        elif kind == "enum":
            self._define(t)
            self._emit(ind, "dec.skip_int()")
        elif kind in ("array", "map"):
            c = self._var("c")
            self._emit(ind, f"{c} = rint()")
            self._emit(ind, f"while {c}:")
            self._emit(ind + 1, f"if {c} < 0:")  # the block's byte size given: skipped whole
            self._emit(ind + 2, "dec.skip(rint())")
            self._emit(ind + 1, "else:")
            self._emit(ind + 2, f"for _ in range({c}):")
            self._emit(ind + 3, "pass")
            if kind == "map":
                self._emit(ind + 3, "dec.skip_utf8()")
                self._skip(t["values"], ind + 3)
            else:
                self._skip(t["items"], ind + 3)
            self._emit(ind + 1, f"{c} = rint()")
        else:
            raise Unhandled(f"type {kind}")

    def _define(self, t: dict[str, Any]) -> None:
        """A named type (record, fixed, enum), for later references by name."""
        name = t.get("name")
        if name:
            self.named.setdefault(name, t)
            space = t.get("namespace")
            if space:
                self.named.setdefault(f"{space}.{name}", t)

    def _resolve(self, t: Any) -> Any:
        if isinstance(t, str) and t not in _PRIMITIVE_READ:
            if t not in self.named:
                raise Unhandled(f"type {t}")
            return self.named[t]
        return t

    def _var(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def _emit(self, ind: int, line: str) -> None:
        if line:
            self.lines.append("    " * ind + line)
