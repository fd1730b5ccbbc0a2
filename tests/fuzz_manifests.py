"""Broken manifests and manifest lists through every road mor reads them by, in a process of its
own (run by tests/test_manifests.py): truncations and byte flips of the real tables' files. Each
read must return or raise; pyiceberg 0.12's Cython Avro decoder, given such a file unchecked,
reads past its buffer and can kill the interpreter, which is what this process would show as a
signal instead of exit code 0.

    python tests/fuzz_manifests.py SEED CASES [--unchecked]

`--unchecked` hands the mutated files to pyiceberg's reader without `CheckedIO`'s check: the
control, showing the fuzzing reaches what the check guards against.
"""

from __future__ import annotations

import collections
import io
import random
import sys
from pathlib import Path

import fastavro
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import read_manifest_list

from mor.planner import avro_entries
from mor.planner import manifests as M

ROOT = Path(__file__).resolve().parent / "realdata"


def _mutated(raw: bytes, rng: random.Random) -> bytes:
    """Cut short, or one to three bytes changed; three times in four in the data blocks (after
    the header, which ends with the file's sync marker, its last 16 bytes)."""
    b = bytearray(raw)
    start = raw.find(raw[-16:]) + 16 if rng.randrange(4) else 0
    start = min(max(start, 0), len(b) - 1)
    if rng.randrange(3) == 0:
        return bytes(b[: rng.randrange(start, len(b))])
    for _ in range(rng.randrange(1, 4)):
        b[rng.randrange(start, len(b))] = rng.randrange(256)
    return bytes(b)


def _uncompressed(raw: bytes) -> bytes:
    """The same Avro file written without compression: its bytes flipped reach the decoders
    (a flip in a deflated block mostly stops at zlib)."""
    reader = fastavro.reader(io.BytesIO(raw))
    schema = reader.writer_schema
    plain = M._plain(schema)
    rows = list(fastavro.reader(io.BytesIO(raw), reader_schema=plain))
    meta = {k: v for k, v in reader.metadata.items() if not k.startswith("avro.")}
    out = io.BytesIO()
    fastavro.writer(out, plain, rows, codec="null", metadata=meta)
    return out.getvalue()


def _pairs() -> list[tuple[Path, list[tuple[M.ListedManifest, bytes]]]]:
    """Each real manifest list with its manifests (found beside it by name), each manifest
    also as written without compression."""
    out = []
    for lst in sorted(ROOT.glob("**/metadata/snap-*.avro")):
        listed = M.decode_manifest_list(lst.read_bytes())
        found = []
        for m in listed:
            local = lst.parent / Path(m.manifest_path).name
            if local.exists():
                raw = local.read_bytes()
                found += [(m, raw), (m, _uncompressed(raw))]
        out.append((lst, found))
    return out


class _Raw(M.CheckedIO):
    """The control: bytes served to pyiceberg unchecked."""

    def new_input(self, location: str) -> M.InputFile:
        return M._InMemory(location, self._known[location])


def main() -> int:
    seed, cases = int(sys.argv[1]), int(sys.argv[2])
    checked = "--unchecked" not in sys.argv
    wrap = M.CheckedIO if checked else _Raw
    rng = random.Random(seed)
    fio = PyArrowFileIO()
    seen: collections.Counter[str] = collections.Counter()
    pairs = _pairs()
    if not pairs or not any(found for _, found in pairs):
        print(f"no manifests found under {ROOT}", file=sys.stderr)
        return 2
    for _ in range(cases):
        lst, found = rng.choice(pairs)
        if found and rng.randrange(4):
            m, raw = rng.choice(found)
            bad = _mutated(raw, rng)
            for road in ("generated", "fastavro", "pyiceberg"):
                try:
                    if road == "generated":
                        avro_entries.records(bad)
                    elif road == "fastavro":
                        M.decode_manifest(bad, m, wrap(fio, {m.manifest_path: bad}))
                    else:
                        M._pyiceberg_entries(wrap(fio, {m.manifest_path: bad}), m)
                    seen[f"manifest {road}: read"] += 1
                except Exception as e:  # noqa: BLE001 - raising is the expected outcome
                    seen[f"manifest {road}: {type(e).__name__}"] += 1
        else:
            bad = _mutated(lst.read_bytes(), rng)
            for road in ("fastavro", "pyiceberg"):
                try:
                    if road == "fastavro":
                        M.decode_manifest_list(bad)
                    else:
                        list(read_manifest_list(wrap(fio, {str(lst): bad}).new_input(str(lst))))
                    seen[f"list {road}: read"] += 1
                except Exception as e:  # noqa: BLE001 - raising is the expected outcome
                    seen[f"list {road}: {type(e).__name__}"] += 1
    for k, v in sorted(seen.items()):
        print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
