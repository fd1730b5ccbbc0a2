"""Deletion vectors (Iceberg v3): a Puffin blob of type `deletion-vector-v1` per data file.

The blob, as the Puffin spec lays it out (uncompressed, at the manifest entry's
`content_offset`, `content_size_in_bytes` long):

    4 bytes   length of the magic and the vector, big-endian (the blob's size less 8)
    4 bytes   magic D1 D3 39 64
    n bytes   the deleted positions as a 64-bit Roaring bitmap, portable format
              (8-byte little-endian count of 32-bit bitmaps, each a 4-byte little-endian key
              of the high 32 bits and a 32-bit portable Roaring bitmap)
    4 bytes   CRC-32 of the magic and the vector, big-endian

Each check that fails is a one-line DataFileError naming the Puffin file and the blob's offset;
a vector is never read around. No pyspark here: tests/test_dv.py tests it without Spark.
"""

from __future__ import annotations

import zlib

import pyarrow as pa
from pyroaring import BitMap64

from mor.physical.tasks.roaring import (
    MAGIC,
    PUFFIN_MAGIC,
    ROW_POSITION,
    VectorError,
    checked_positions,
    dv_vector,
    puffin_file,
)
from mor.planner.errors import DataFileError

__all__ = ["MAGIC", "PUFFIN_MAGIC", "ROW_POSITION", "decode", "encode", "puffin"]


def encode(positions: list[int]) -> bytes:
    """The blob of these positions (what a writer stores: used by the tests and fixtures)."""
    vector = MAGIC + BitMap64(positions).serialize()
    return len(vector).to_bytes(4, "big") + vector + zlib.crc32(vector).to_bytes(4, "big")


def decode(blob: bytes, where: str, cardinality: int | None = None) -> pa.Array:
    """The deleted positions of a blob (int64, ascending). `where` names the blob in errors
    ("deletion vector <puffin file> at offset N of <table>"); `cardinality`, the manifest
    entry's record count, must match when given. The envelope is checked as the tasks check
    it (tasks/roaring.py); the bitmap is decoded by pyroaring, in C, on the driver."""
    try:
        vector = dv_vector(blob, where)
        try:
            bitmap = BitMap64.deserialize(vector)
        except (ValueError, OverflowError) as e:
            raise VectorError(f"{where}: the Roaring bitmap does not decode ({e})") from None
        values = bitmap.to_array()  # array('Q') in native order, as Arrow's buffers are
        positions = pa.Array.from_buffers(pa.uint64(), len(values), [None, pa.py_buffer(values)])
        return checked_positions(positions, where, cardinality)
    except VectorError as e:
        raise DataFileError(str(e)) from None


def puffin(
    vectors: list[tuple[str, list[int]]], created_by: str
) -> tuple[bytes, list[tuple[int, int]]]:
    """A Puffin file holding one deletion vector per (data file path as recorded, positions),
    and each blob's (offset, length), in the order given (the layout: tasks/roaring.py's
    `puffin_file`, the blobs encoded here)."""
    return puffin_file(
        [(path, encode(positions), len(set(positions))) for path, positions in vectors],
        created_by,
    )
