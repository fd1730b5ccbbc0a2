"""Manifest entries decoded by straight-line Python generated once per Avro schema, over
pyiceberg's Cython binary decoder, every length and count checked: about a third of fastavro's
time per entry.

fastavro builds a dictionary for every record and for every key/value pair of the five column
metric maps, and the entry is then reduced to a few values and one metric blob
(planner/manifests.EntryFile). Here the reader of a manifest's writer schema is generated as
Python source once (cached by the schema's text): the fields planning never reads (column
sizes, split offsets, key metadata, sort order; the metric maps too when a plan reads no
metrics) are skipped without being built, a metric map of counts is read as the flat
(field id, count, ...) tuple the blob holds (`read_ints`, a loop in C), and partition values
come out as Iceberg's Python values (days, microseconds, `uuid.UUID`, `Decimal` made as fastavro
makes it).

Safety: pyiceberg 0.12's decoder checks no length or count against its buffer (`read(n)` copies
n bytes from wherever it stands), so nothing here lets it: the container's header and block
framing are parsed in Python, each block is decoded from its own copy followed by zeros (as
long as the block, plus what the schema's fixed-size fields can take), and the generated code
reads every length-prefixed value by reading its length first and refusing one longer than
what is left of the block, refuses a count larger than the bytes left, and checks its position
before every record and every item of a loop. Between two checks only fixed-size reads happen,
which the zeros absorb; a count of varints read in C ends in them too. Doubles and floats are
unpacked with `struct` (the decoder's `read_double` returns a C float). A manifest broken in any
way raises here and goes to fastavro, whose error the caller reports; tests/fuzz_manifests.py
feeds truncated and corrupted real manifests through it in a process of its own.

`records(raw, metrics)` gives the entries as dicts shaped as fastavro's (`status`,
`snapshot_id`, `sequence_number`, `file_sequence_number`, `data_file`), with the data file's
`partition` already the tuple of Iceberg values. What this reader does not handle raises
`Unhandled` (codecs other than null and deflate; a partition logical type other than date,
time, microsecond timestamps, uuid and decimal; Avro it cannot follow): the caller decodes that
manifest with fastavro. tests/test_manifests.py holds both readers to pyiceberg's on every
manifest of the test tables.
"""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from collections.abc import Callable
from decimal import Context, Decimal
from typing import Any

try:  # built in pyiceberg's wheels; a build from source without Cython lacks it
    from pyiceberg.avro.decoder_fast import CythonBinaryDecoder
except ImportError:  # pragma: no cover - every manifest then goes to fastavro
    CythonBinaryDecoder = None  # type: ignore[assignment,misc]

MAGIC = b"Obj\x01"
# a length-prefixed value's length, refused when longer than what is left of the block
_LENGTH = (
    "{v} = rint()\nif {v} < 0 or {v} > end - tell(): raise Unhandled('a length past its block')"
)
_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
# (most, fewest) bytes a primitive's encoding takes; a length-prefixed value's content is
# checked before it is read, so only its length's varint counts towards the most
_SIZES = {
    "null": (0, 0),
    "boolean": (1, 1),
    "int": (10, 1),
    "long": (10, 1),
    "float": (4, 4),
    "double": (8, 8),
    "bytes": (10, 1),
    "string": (10, 1),
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
_READERS: dict[tuple[str, bool], tuple[Callable[..., list[dict[str, Any]]], int]] = {}


def _decimal(precision: int, scale: int) -> Callable[[bytes], Decimal]:
    context = Context(prec=precision)

    def convert(b: bytes) -> Decimal:
        unscaled = int.from_bytes(b, byteorder="big", signed=True)
        return context.create_decimal(unscaled).scaleb(-scale, context)

    return convert


class Unhandled(ValueError):
    """A manifest this reader does not decode (broken, or beyond what it follows): the caller
    uses fastavro's."""


def records(raw: bytes, metrics: bool = True) -> tuple[list[dict[str, Any]], str]:
    """The entries of the manifest `raw` (an Avro container file) and its schema's text.
    `metrics=False`: the metric maps skipped (absent from the data files' dicts)."""
    if CythonBinaryDecoder is None:
        raise Unhandled("pyiceberg's Cython decoder is not built here")
    pos, meta, sync = _header(raw)
    text = meta.get("avro.schema", b"").decode()
    codec = meta.get("avro.codec", b"null")
    if codec not in (b"null", b"deflate"):
        raise Unhandled(f"codec {codec!r}")
    read, most = _reader(text, metrics)
    out: list[dict[str, Any]] = []
    end = len(raw)
    while pos < end:
        n, pos = _varint(raw, pos)
        size, pos = _varint(raw, pos)
        if n < 0 or size < 0 or size > end - pos - 16:
            raise Unhandled("a block runs past the file")
        block = raw[pos : pos + size]
        pos += size
        if raw[pos : pos + 16] != sync:
            raise Unhandled("a block's sync marker differs from the header's")
        pos += 16
        if codec == b"deflate":
            block = zlib.decompress(block, -15)
        length = len(block)
        if n > length:  # every entry takes a byte at least
            raise Unhandled("a block counts more records than it has bytes")
        dec = CythonBinaryDecoder(block + bytes(length + most + 64))
        out += read(dec, n, length)
        if dec.tell() != length:
            raise Unhandled("a block's records do not fill it")
    return out, text


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    """Avro's zigzag long at `pos` of `raw`, and the position after it."""
    shift = acc = 0
    while True:
        if pos >= len(raw) or shift > 63:
            raise Unhandled("a varint runs past the file")
        b = raw[pos]
        pos += 1
        acc |= (b & 0x7F) << shift
        if b < 0x80:
            return (acc >> 1) ^ -(acc & 1), pos
        shift += 7


def _header(raw: bytes) -> tuple[int, dict[str, bytes], bytes]:
    """The position after the container's header, its metadata and its sync marker."""
    if raw[:4] != MAGIC:
        raise Unhandled("not an Avro container file")
    pos, meta = 4, {}
    count, pos = _varint(raw, pos)
    while count:
        if count < 0:
            count = -count
            _, pos = _varint(raw, pos)  # the block's size in bytes
        for _ in range(count):
            values = []
            for _ in range(2):
                n, pos = _varint(raw, pos)
                if n < 0 or n > len(raw) - pos:
                    raise Unhandled("a header entry runs past the file")
                values.append(raw[pos : pos + n])
                pos += n
            meta[values[0].decode()] = values[1]
        count, pos = _varint(raw, pos)
    sync = raw[pos : pos + 16]
    if len(sync) != 16:
        raise Unhandled("the header has no sync marker")
    return pos + 16, meta, sync


def _reader(text: str, metrics: bool) -> tuple[Callable[..., list[dict[str, Any]]], int]:
    """The generated reader of `text`'s records and the most bytes its fixed-size reads between
    two checks can take."""
    hit = _READERS.get((text, metrics))
    if hit is None:
        if len(_READERS) >= _SCHEMAS:  # many tables and schemas in one process: start over
            _READERS.clear()
        try:
            schema = json.loads(text)
        except ValueError as e:
            raise Unhandled(f"schema: {e}") from None
        gen = _Generator(metrics)
        read = gen.compile(schema)
        hit = _READERS[(text, metrics)] = (read, gen.size(schema)[0])
    return hit


class _Generator:
    """Python source reading `n` manifest entries from a decoder `dec` into a list, never past
    `end` (the block's length) by more than the fixed-size reads between two checks."""

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
            "def read(dec, n, end):",
            "    rint = dec.read_int; rints = dec.read_ints; rbool = dec.read_boolean",
            "    rfixed = dec.read; skip = dec.skip; skip_int = dec.skip_int; tell = dec.tell",
            "    out = []",
            "    for _ in range(n):",
            "        if tell() > end: raise Unhandled('a record past its block')",
        ]
        tail = ["        out.append(rec)", "    return out"]
        source = "\n".join(head + body + tail) + "\n"
        scope: dict[str, Any] = {
            "uuid_bytes": lambda b: uuid.UUID(bytes=b),
            "uuid_text": uuid.UUID,
            "Unhandled": Unhandled,
            "unpack_f": struct.Struct("<f").unpack,
            "unpack_d": struct.Struct("<d").unpack,
            **self.decimals,
        }
        exec(compile(source, "<manifest entry reader>", "exec"), scope)  # noqa: S102 - our source
        return scope["read"]  # type: ignore[no-any-return]

    def size(self, t: Any) -> tuple[int, int]:
        """(most, fewest) bytes `t`'s encoding takes outside its checked parts: a loop's body
        and a length-prefixed value's content are checked before they are read."""
        t = self._resolve(t)
        if isinstance(t, str):
            return _SIZES[t]
        if isinstance(t, list):
            sizes = [self.size(b) for b in t]
            return 10 + max(m for m, _ in sizes), 1 + min(f for _, f in sizes)
        kind = t.get("type")
        if isinstance(kind, (dict, list)) or kind in _SIZES:
            return self.size(kind)
        if kind in ("record", "fixed", "enum"):
            self._define(t)
        if kind == "record":
            sizes = [self.size(f["type"]) for f in t["fields"]]
            return sum(m for m, _ in sizes), sum(f for _, f in sizes)
        if kind == "fixed":
            return int(t["size"]), int(t["size"])
        if kind == "enum":
            return 10, 1
        if kind in ("array", "map"):
            item = self.size(t["items"] if kind == "array" else t["values"])
            return 20 + item[0], 1
        raise Unhandled(f"type {kind}")

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

    def _primitive(self, t: str, ind: int, target: str) -> None:
        if t in ("bytes", "string"):
            n = self._var("n")
            self._emit(ind, _LENGTH.format(v=n))
            self._emit(ind, f"{target} = rfixed({n}){'.decode()' if t == 'string' else ''}")
        else:
            expr = {
                "null": "None",
                "boolean": "rbool()",
                "int": "rint()",
                "long": "rint()",
                "float": "unpack_f(rfixed(4))[0]",
                "double": "unpack_d(rfixed(8))[0]",
            }[t]
            self._emit(ind, f"{target} = {expr}")

    def _read(self, t: Any, ind: int, target: str) -> None:
        t = self._resolve(t)
        if isinstance(t, str):
            if t not in _PRIMITIVES:
                raise Unhandled(f"type {t}")
            self._primitive(t, ind, target)
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
        if isinstance(kind, (dict, list)) or kind in _PRIMITIVES:
            self._read(kind, ind, target)  # {"type": "long", "logicalType": ...}: the value
            return
        if kind == "record":
            self._record(t, ind, target, self._plain_field)
        elif kind == "fixed":
            self._define(t)
            self._emit(ind, f"{target} = rfixed({int(t['size'])})")
        elif kind == "enum":
            self._define(t)
            symbols, i = self._var("symbols"), self._var("e")
            self._emit(ind, f"{symbols} = {tuple(t['symbols'])!r}")
            self._emit(ind, f"{i} = rint()")
            self._emit(ind, f"if not 0 <= {i} < {len(t['symbols'])}: raise Unhandled('an enum')")
            self._emit(ind, f"{target} = {symbols}[{i}]")
        elif kind == "array":
            self._array(t["items"], ind, target)
        elif kind == "map":
            self._blocks(
                ind, target, "{}", t["values"], lambda i, c: self._map_item(t, i, c, target)
            )
        else:
            raise Unhandled(f"type {kind}")

    def _array(self, items: Any, ind: int, target: str) -> None:
        items = self._resolve(items)
        pair = self._int_keyed(items)
        if pair == "long":  # a metric map of counts: (key, value, ...) read in C
            self._blocks(
                ind, target, "[]", items, lambda i, c: self._emit(i, f"{target} += rints({c} * 2)")
            )
            self._emit(ind, f"{target} = tuple({target})")
        elif pair == "bytes":  # a metric map of bounds: (key, value, ...)
            k, n = self._var("k"), self._var("n")

            def bounds(i: int, c: str) -> None:
                self._emit(i, f"for _ in range({c}):")
                self._emit(i + 1, f"{k} = rint()")
                self._emit(i + 1, _LENGTH.format(v=n))
                self._emit(i + 1, f"{target} += ({k}, rfixed({n}))")

            self._blocks(ind, target, "[]", items, bounds)
            self._emit(ind, f"{target} = tuple({target})")
        else:
            item = self._var("i")

            def each(i: int, c: str) -> None:
                self._emit(i, f"for _ in range({c}):")
                self._emit(i + 1, "if tell() > end: raise Unhandled('an item past its block')")
                self._read(items, i + 1, item)
                self._emit(i + 1, f"{target}.append({item})")

            self._blocks(ind, target, "[]", items, each)

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

    def _map_item(self, t: dict[str, Any], ind: int, c: str, target: str) -> None:
        key, value = self._var("k"), self._var("m")
        self._emit(ind, f"for _ in range({c}):")
        self._emit(ind + 1, "if tell() > end: raise Unhandled('an item past its block')")
        self._primitive("string", ind + 1, key)
        self._read(t["values"], ind + 1, value)
        self._emit(ind + 1, f"{target}[{key}] = {value}")

    def _blocks(
        self, ind: int, target: str, empty: str, item: Any, body: Callable[[int, str], None]
    ) -> None:
        """An array's or map's blocks: a count (negative: its byte size follows), until 0;
        `body(indent, count variable)` reads one block's items. A count above the bytes left
        is refused (an item takes one at least: items that may take none are not followed)."""
        fewest = self.size(item)[1]
        if fewest < 1:
            raise Unhandled("an array or map of items that may take no bytes")
        least = f" * {fewest}" if fewest > 1 else ""
        c = self._var("c")
        self._emit(ind, f"{target} = {empty}")
        self._emit(ind, f"{c} = rint()")
        self._emit(ind, f"while {c}:")
        self._emit(ind + 1, f"if {c} < 0:")
        self._emit(ind + 2, f"{c} = -{c}")
        self._emit(ind + 2, "rint()")
        self._emit(
            ind + 1, f"if {c}{least} > end - tell(): raise Unhandled('a count past its block')"
        )
        body(ind + 1, c)
        self._emit(ind + 1, f"{c} = rint()")

    def _skip(self, t: Any, ind: int) -> None:
        t = self._resolve(t)
        if isinstance(t, str):
            if t not in _PRIMITIVES:
                raise Unhandled(f"type {t}")
            if t in ("bytes", "string"):
                n = self._var("n")
                self._emit(ind, _LENGTH.format(v=n))
                self._emit(ind, f"skip({n})")
            elif t in ("int", "long"):
                self._emit(ind, "skip_int()")
            elif t != "null":
                self._emit(ind, f"skip({_SIZES[t][0]})")
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
        if isinstance(kind, (dict, list)) or kind in _PRIMITIVES:
            self._skip(kind, ind)
        elif kind == "record":
            self._define(t)
            for field in t["fields"]:
                self._skip(field["type"], ind)
        elif kind == "fixed":
            self._define(t)
            self._emit(ind, f"skip({int(t['size'])})")
        elif kind == "enum":
            self._define(t)
            self._emit(ind, "skip_int()")
        elif kind in ("array", "map"):
            item = self._resolve(t["items"] if kind == "array" else t["values"])
            fewest = self.size(item)[1] + (1 if kind == "map" else 0)  # a map's key: 1 at least
            if fewest < 1:
                raise Unhandled("an array or map of items that may take no bytes")
            least = f" * {fewest}" if fewest > 1 else ""
            c, s = self._var("c"), self._var("s")
            self._emit(ind, f"{c} = rint()")
            self._emit(ind, f"while {c}:")
            self._emit(ind + 1, f"if {c} < 0:")  # the block's byte size given: skipped whole
            self._emit(ind + 2, _LENGTH.format(v=s))
            self._emit(ind + 2, f"skip({s})")
            self._emit(
                ind + 1,
                f"elif {c}{least} > end - tell(): raise Unhandled('a count past its block')",
            )
            self._emit(ind + 1, "else:")
            if kind == "array" and self._int_keyed(item) == "long":  # in C, as read
                self._emit(ind + 2, f"rints({c} * 2)")
            else:
                self._emit(ind + 2, f"for _ in range({c}):")
                self._emit(ind + 3, "if tell() > end: raise Unhandled('an item past its block')")
                if kind == "map":
                    self._skip("string", ind + 3)
                self._skip(item, ind + 3)
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
        if isinstance(t, str) and t not in _PRIMITIVES:
            if t not in self.named:
                raise Unhandled(f"type {t}")
            return self.named[t]
        return t

    def _var(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def _emit(self, ind: int, text: str) -> None:
        for line in text.splitlines():
            self.lines.append("    " * ind + line)
