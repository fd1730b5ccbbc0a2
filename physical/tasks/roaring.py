"""Deletion vectors with pyarrow and the standard library only: what a row-level write's
tasks read and write (physical/deletes/dv.py reads vectors on the driver with pyroaring).

A deletion vector's blob (Iceberg's `deletion-vector-v1`, at the manifest entry's
`content_offset` in a Puffin file):

    4 bytes   length of the magic and the vector, big-endian
    4 bytes   magic D1 D3 39 64
    n bytes   the positions as a 64-bit Roaring bitmap in the portable format: an 8-byte
              little-endian count of 32-bit bitmaps, each a 4-byte little-endian key (the
              positions' high 32 bits) and a 32-bit Roaring bitmap in the portable format
    4 bytes   CRC-32 of the magic and the vector, big-endian

A 32-bit bitmap (RoaringFormatSpec): a cookie, then per container of 2^16 values its key and
cardinality, the containers' byte offsets, and each container: an array (sorted 16-bit
values, up to 4096), a bitmap (8 KiB) or runs (16-bit count, then start and length - 1 per
run). Writing, each container takes the smallest of the three forms (Iceberg's writer
run-length encodes too); reading takes all three.
"""

from __future__ import annotations

import json
import struct
import sys
import zlib

import pyarrow as pa
import pyarrow.compute as pc

MAGIC = b"\xd1\xd3\x39\x64"
PUFFIN_MAGIC = b"PFA1"
ROW_POSITION = 2147483645  # the field id of _pos: what a deletion vector's blob is over
_NO_RUN = 12346  # cookie of a bitmap without run containers
_RUN = 12347  # low half of the cookie of one with run containers
_OFFSETS_FROM = 4  # with run containers, the offsets are written from this many containers
_ARRAY_MAX = 4096
_BITMAP_BYTES = 8192
_LITTLE = sys.byteorder == "little"


class VectorError(ValueError):
    """A deletion vector that does not decode (the message names what is wrong)."""


def _u16_bytes(values: pa.Array) -> bytes:
    """16-bit values as little-endian bytes."""
    arr = values.cast(pa.uint16())
    buf = memoryview(arr.buffers()[1])[arr.offset * 2 : (arr.offset + len(arr)) * 2]
    if _LITTLE:
        return bytes(buf)
    import array

    out = array.array("H", bytes(buf))
    out.byteswap()
    return out.tobytes()


_ALL16: list[pa.Array] = []


def _every16() -> pa.Array:
    if not _ALL16:
        _ALL16.append(pa.array(range(1 << 16), pa.uint16()))
    return _ALL16[0]


def _runs(values: pa.Array) -> list[tuple[int, int]]:
    """(start, length - 1) of each run of consecutive values (sorted, distinct)."""
    if len(values) == 1:
        v = values[0].as_py()
        return [(v, 0)]
    steps = pc.pairwise_diff(values.cast(pa.int32()))
    breaks = pc.indices_nonzero(pc.not_equal(steps.slice(1), 1)).to_pylist()
    starts = [0] + [b + 1 for b in breaks]
    ends = breaks + [len(values) - 1]
    vals = values
    return [(vals[s].as_py(), vals[e].as_py() - vals[s].as_py()) for s, e in zip(starts, ends)]


def _container(values: pa.Array) -> tuple[str, bytes]:
    """One container's form and bytes: its values' low 16 bits, sorted and distinct."""
    card = len(values)
    runs = 1
    if card > 1:
        steps = pc.pairwise_diff(values.cast(pa.int32())).slice(1)
        runs += pc.sum(pc.not_equal(steps, 1)).as_py() or 0
    sizes = {"bitmap": _BITMAP_BYTES, "run": 2 + 4 * runs}
    if card <= _ARRAY_MAX:
        sizes["array"] = 2 * card
    form = min(sizes, key=lambda k: (sizes[k], k != "array"))
    if form == "array":
        return form, _u16_bytes(values)
    if form == "bitmap":
        mask = pc.is_in(_every16(), value_set=values.cast(pa.uint16()))
        return form, bytes(memoryview(mask.buffers()[1])[:_BITMAP_BYTES])
    pairs = _runs(values)
    return form, struct.pack(f"<H{2 * len(pairs)}H", len(pairs), *[x for p in pairs for x in p])


def _encode32(low: pa.Array) -> bytes:
    """A 32-bit portable Roaring bitmap of `low` (uint32, sorted and distinct)."""
    keys = pc.run_end_encode(pc.shift_right(low, 16).cast(pa.uint16()))
    containers, start = [], 0
    for key, end in zip(keys.values.to_pylist(), keys.run_ends.to_pylist()):
        part = pc.bit_wise_and(low.slice(start, end - start), 0xFFFF)
        containers.append((key, end - start, *_container(part)))
        start = end
    n = len(containers)
    has_runs = any(form == "run" for _, _, form, _ in containers)
    if has_runs:
        flags = bytearray((n + 7) // 8)
        for i, (_, _, form, _) in enumerate(containers):
            if form == "run":
                flags[i // 8] |= 1 << (i % 8)
        head = struct.pack("<I", _RUN | ((n - 1) << 16)) + bytes(flags)
    else:
        head = struct.pack("<II", _NO_RUN, n)
    head += b"".join(struct.pack("<HH", key, card - 1) for key, card, _, _ in containers)
    if not has_runs or n >= _OFFSETS_FROM:
        at = len(head) + 4 * n
        offsets = []
        for _, _, _, data in containers:
            offsets.append(at)
            at += len(data)
        head += struct.pack(f"<{n}I", *offsets)
    return head + b"".join(data for _, _, _, data in containers)


def encode64(positions: pa.Array) -> bytes:
    """The 64-bit portable Roaring bitmap of `positions` (non-negative integers, sorted and
    distinct)."""
    pos = positions.cast(pa.uint64())
    if not len(pos):
        return struct.pack("<Q", 0)
    highs = pc.run_end_encode(pc.shift_right(pos, 32))
    out = [struct.pack("<Q", len(highs.values))]
    start = 0
    for high, end in zip(highs.values.to_pylist(), highs.run_ends.to_pylist()):
        low = pc.bit_wise_and(pos.slice(start, end - start), 0xFFFFFFFF).cast(pa.uint32())
        out.append(struct.pack("<I", high) + _encode32(low))
        start = end
    return b"".join(out)


def _take(data: bytes, at: int, n: int) -> bytes:
    if at + n > len(data):
        raise VectorError("the Roaring bitmap ends early")
    return data[at : at + n]


def _decode32(data: bytes, at: int) -> tuple[list[pa.Array], int]:
    """The values (uint32 arrays, ascending) of the 32-bit bitmap at `at`, and where it ends."""
    (cookie,) = struct.unpack("<I", _take(data, at, 4))
    at += 4
    flags = b""
    if cookie & 0xFFFF == _RUN:
        n = (cookie >> 16) + 1
        flags = _take(data, at, (n + 7) // 8)
        at += len(flags)
    elif cookie == _NO_RUN:
        (n,) = struct.unpack("<I", _take(data, at, 4))
        at += 4
    else:
        raise VectorError(f"unknown Roaring cookie {cookie}")
    header = struct.unpack(f"<{2 * n}H", _take(data, at, 4 * n))
    at += 4 * n
    if not flags or n >= _OFFSETS_FROM:
        at += 4 * n  # the offsets: the containers follow each other anyway
    out = []
    for i in range(n):
        key, card = header[2 * i], header[2 * i + 1] + 1
        base = key << 16
        if flags and flags[i // 8] >> (i % 8) & 1:
            (runs,) = struct.unpack("<H", _take(data, at, 2))
            pairs = struct.unpack(f"<{2 * runs}H", _take(data, at + 2, 4 * runs))
            at += 2 + 4 * runs
            mask = 0
            for s, length in zip(pairs[::2], pairs[1::2]):
                mask |= ((1 << (length + 1)) - 1) << s
            if mask >> (1 << 16):
                raise VectorError("a run past its container's end")
            raw = mask.to_bytes(_BITMAP_BYTES, "little")
            values = _bits(raw)
        elif card > _ARRAY_MAX:
            values = _bits(_take(data, at, _BITMAP_BYTES))
            at += _BITMAP_BYTES
        else:
            raw = _take(data, at, 2 * card)
            if not _LITTLE:
                import array

                swapped = array.array("H", raw)
                swapped.byteswap()
                raw = swapped.tobytes()
            values = pa.Array.from_buffers(pa.uint16(), card, [None, pa.py_buffer(raw)])
            at += 2 * card
        if len(values) != card:
            raise VectorError(f"container {key} holds {len(values)} values, its header {card}")
        out.append(pc.add(values.cast(pa.uint32()), pa.scalar(base, pa.uint32())))
    return out, at


def _bits(raw: bytes) -> pa.Array:
    """The set bits of an 8 KiB bitmap container, as 16-bit values (bit i of byte b is value
    8b + i: Arrow's bit order)."""
    mask = pa.Array.from_buffers(pa.bool_(), 1 << 16, [None, pa.py_buffer(raw)])
    return pc.indices_nonzero(mask).cast(pa.uint16())


def decode64(data: bytes) -> pa.Array:
    """The positions (uint64, ascending) of a 64-bit portable Roaring bitmap."""
    (buckets,) = struct.unpack("<Q", _take(data, 0, 8))
    at, parts, last = 8, [], -1
    for _ in range(buckets):
        (high,) = struct.unpack("<I", _take(data, at, 4))
        if high <= last:
            raise VectorError("its 32-bit bitmaps are not in ascending order")
        last = high
        values, at = _decode32(data, at + 4)
        base = pa.scalar(high << 32, pa.uint64())
        parts += [pc.add(v.cast(pa.uint64()), base) for v in values]
    if at != len(data):
        raise VectorError(f"{len(data) - at} bytes after the Roaring bitmap")
    return pa.concat_arrays(parts) if parts else pa.array([], pa.uint64())


def dv_blob(positions: pa.Array) -> bytes:
    """The `deletion-vector-v1` blob of these positions (sorted and distinct)."""
    vector = MAGIC + encode64(positions)
    return struct.pack(">I", len(vector)) + vector + struct.pack(">I", zlib.crc32(vector))


def dv_vector(blob: bytes, where: str) -> bytes:
    """The portable Roaring bytes of a `deletion-vector-v1` blob, its length field, magic and
    CRC checked; a VectorError naming `where` for a blob that is not one."""
    if len(blob) < 12:
        raise VectorError(f"{where} is {len(blob)} bytes: too short for a deletion vector")
    (length,) = struct.unpack(">I", blob[:4])
    if length != len(blob) - 8:
        raise VectorError(
            f"{where}: its length field says {length} bytes of vector and magic, the manifest "
            f"entry's size leaves {len(blob) - 8}"
        )
    vector = blob[4:-4]
    if vector[:4] != MAGIC:
        raise VectorError(
            f"{where}: magic {vector[:4].hex()} is not a deletion vector's ({MAGIC.hex()})"
        )
    if zlib.crc32(vector) != struct.unpack(">I", blob[-4:])[0]:
        raise VectorError(f"{where}: CRC-32 mismatch (the blob is corrupt)")
    return vector[4:]


def checked_positions(positions: pa.Array, where: str, cardinality: int | None) -> pa.Array:
    """Decoded positions (uint64, ascending) as int64, their count held to the manifest
    entry's `cardinality` when given; a VectorError naming `where` otherwise."""
    if cardinality is not None and len(positions) != cardinality:
        raise VectorError(
            f"{where} holds {len(positions)} positions, its manifest entry records {cardinality}"
        )
    if len(positions) and positions[-1].as_py() >= 1 << 63:
        raise VectorError(f"{where}: a position past 2^63 - 1")
    return positions.cast(pa.int64())


def dv_positions(blob: bytes, where: str, cardinality: int | None = None) -> pa.Array:
    """The positions (int64, ascending) of a `deletion-vector-v1` blob; a VectorError naming
    `where` for a blob that is not one, or holds other than `cardinality` positions."""
    vector = dv_vector(blob, where)
    try:
        positions = decode64(vector)
    except VectorError as e:
        raise VectorError(f"{where}: {e}") from None
    return checked_positions(positions, where, cardinality)


def puffin_file(
    blobs: list[tuple[str, bytes, int]], created_by: str
) -> tuple[bytes, list[tuple[int, int]]]:
    """A Puffin file of deletion vectors, one per (referenced data file as recorded, its
    blob, its cardinality), and each blob's (offset, length), in the order given. The
    Puffin spec's layout: magic, the blobs uncompressed, then the footer: magic, its JSON
    payload (each blob's type `deletion-vector-v1`, field `_pos`, snapshot id and sequence
    number -1 as the spec asks of a vector, offset, length, referenced data file and
    cardinality), the payload's length (4 bytes, little-endian), 4 bytes of flags (none)
    and the magic again."""
    out = bytearray(PUFFIN_MAGIC)
    placed, meta = [], []
    for path, blob, cardinality in blobs:
        placed.append((len(out), len(blob)))
        meta.append(
            {
                "type": "deletion-vector-v1",
                "fields": [ROW_POSITION],
                "snapshot-id": -1,
                "sequence-number": -1,
                "offset": len(out),
                "length": len(blob),
                "properties": {"referenced-data-file": path, "cardinality": str(cardinality)},
            }
        )
        out += blob
    payload = json.dumps({"blobs": meta, "properties": {"created-by": created_by}}).encode()
    out += PUFFIN_MAGIC + payload + struct.pack("<i", len(payload)) + bytes(4) + PUFFIN_MAGIC
    return bytes(out), placed
