"""What Iceberg's `remove_orphan_files` calls an orphan, computed without Spark and without
changing anything (writer/orphans.py lists the store and deletes).

A file is an orphan when it was listed under the location searched (the table's location,
or the `location` given: data kept elsewhere by `write.data.path` is searched only when named
so), its modification time is before `older_than`
(default: three days ago), no folder between the location searched and it is hidden (a name
starting with `_` or `.`, except a partition folder of a field whose name starts so), and no
file the table's metadata references has the same path (`valid_files`).

Paths are compared as Iceberg's Spark action compares them (as Hadoop's `Path` reads a URI):
by their path alone, with the scheme and the authority checked apart. The schemes `s3a` and
`s3n` are `s3`, and `equal_schemes` / `equal_authorities` name more equivalences (a key is a
comma-separated list). A listed file whose path matches a referenced one but whose scheme or
authority differs is a conflict: by `prefix_mismatch_mode` an error (ERROR, the default),
kept (IGNORE) or an orphan (DELETE). Where Iceberg's action counts a file both referenced
(under its own prefix) and mismatched (under another's) as an orphan in DELETE mode, this
keeps it: a file any reference matches is never an orphan.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyiceberg.table.metadata import TableMetadata

from mor.planner.errors import MorError

OLDER_THAN_MS = 3 * 24 * 3600 * 1000  # Iceberg's default: files older than three days
MIN_INTERVAL_MS = 24 * 3600 * 1000  # the procedure refuses a shorter one, as Iceberg's does
EQUAL_SCHEMES = {"s3n": "s3", "s3a": "s3"}
PREFIX_MODES = ("ERROR", "IGNORE", "DELETE")


class OrphanError(MorError):
    """A remove_orphan_files that must not delete anything: a prefix conflict, gc disabled."""


@dataclass(frozen=True)
class Uri:
    scheme: str | None
    authority: str | None
    path: str


_URI = re.compile(r"^(?:([A-Za-z][A-Za-z0-9+.-]*):)?(?://([^/]*))?(.*)$", re.S)


def parse(text: str) -> Uri:
    """A location as Hadoop's `new Path(text).toUri()` reads it: its scheme, its authority
    (none for `file:/x` and `file:///x`), and its path with repeated and trailing slashes
    removed."""
    colon, slash = text.find(":"), text.find("/")
    if colon > 0 and (slash < 0 or colon < slash):
        scheme, rest = text[:colon], text[colon + 1 :]
    else:
        scheme, rest = None, text
    authority = None
    if rest.startswith("//"):
        end = rest.find("/", 2)
        authority, rest = (rest[2:], "") if end < 0 else (rest[2:end], rest[end:])
        authority = authority or None
    path = re.sub("/+", "/", rest)
    if len(path) > 1:
        path = path.rstrip("/")
    return Uri(scheme, authority, path)


def flatten(mapping: Mapping[str, str] | None) -> dict[str, str]:
    """`{'s3a,s3n': 's3'}` as `{'s3a': 's3', 's3n': 's3'}` (Iceberg's flattening)."""
    out: dict[str, str] = {}
    for key, value in (mapping or {}).items():
        for k in key.split(","):
            out[k.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Prefixes:
    """The equivalences that compare schemes and authorities, and what a conflict does."""

    schemes: Mapping[str, str]
    authorities: Mapping[str, str]
    mode: str = "ERROR"

    @staticmethod
    def of(
        equal_schemes: Mapping[str, str] | None = None,
        equal_authorities: Mapping[str, str] | None = None,
        mode: str | None = None,
    ) -> Prefixes:
        chosen = (mode or "ERROR").strip().upper()
        if chosen not in PREFIX_MODES:
            raise OrphanError(
                f"prefix_mismatch_mode must be one of {', '.join(PREFIX_MODES)}, not {mode!r}"
            )
        return Prefixes(
            {**EQUAL_SCHEMES, **flatten(equal_schemes)}, flatten(equal_authorities), chosen
        )

    def key(self, text: str) -> Uri:
        u = parse(text)
        scheme = self.schemes.get(u.scheme, u.scheme) if u.scheme is not None else None
        authority = (
            self.authorities.get(u.authority, u.authority) if u.authority is not None else None
        )
        return Uri(scheme, authority, u.path)


def _matches(valid: str | None, actual: str | None) -> bool:
    return not valid or (actual is not None and valid.lower() == actual.lower())


def find_orphans(
    listed: Iterable[str], valid: Iterable[str], prefixes: Prefixes
) -> tuple[list[str], set[tuple[str, str]]]:
    """The listed files that are orphans, and the conflicting (referenced, listed) schemes or
    authorities found (raised on in ERROR mode; see the module)."""
    by_path: dict[str, list[Uri]] = {}
    for text in valid:
        u = prefixes.key(text)
        by_path.setdefault(u.path, []).append(u)
    orphans: list[str] = []
    conflicts: set[tuple[str, str]] = set()
    for text in listed:
        u = prefixes.key(text)
        refs = by_path.get(u.path)
        if not refs:
            orphans.append(text)
            continue
        if any(_matches(r.scheme, u.scheme) and _matches(r.authority, u.authority) for r in refs):
            continue
        if prefixes.mode == "DELETE":
            orphans.append(text)
            continue
        for r in refs:
            if not _matches(r.scheme, u.scheme):
                conflicts.add((str(r.scheme), str(u.scheme)))
            if not _matches(r.authority, u.authority):
                conflicts.add((str(r.authority), str(u.authority)))
    if conflicts and prefixes.mode == "ERROR":
        shown = ", ".join(f"{a} / {b}" for a, b in sorted(conflicts)[:5])
        raise OrphanError(
            "cannot tell whether some files are orphans: the metadata references files whose "
            f"paths match listed ones but for the scheme or authority (referenced / listed: "
            f"{shown}); name those that are equal with equal_schemes or equal_authorities, or "
            "set prefix_mismatch_mode to IGNORE (keep them) or DELETE (only if they are "
            "certainly different); nothing was deleted"
        )
    return sorted(orphans), conflicts


def roots(md: TableMetadata, location: str | None) -> list[str]:
    """The folders listed: the table's location (everything under it, as Iceberg 1.12's
    action lists it), or `location`."""
    return [(location if location is not None else md.location).rstrip("/")]


def hidden_test(md: TableMetadata) -> Any:
    """`hidden(relative_path)`: whether a file under a listed folder is hidden by one of the
    names between (Iceberg's PartitionAwareHiddenPathFilter over every partition spec)."""
    partition_names = tuple(
        f"{f.name}="
        for spec in md.partition_specs
        for f in spec.fields
        if f.name.startswith(("_", "."))
    )

    def hidden(relative: str) -> bool:
        for name in relative.strip("/").split("/"):
            if name.startswith(("_", ".")) and not name.startswith(partition_names):
                return True
        return False

    return hidden


def valid_files(io: Any, md: TableMetadata, metadata_location: str | None) -> set[str]:
    """Every file the table's metadata references (Iceberg's action's valid files): what every
    snapshot reaches (manifest lists, manifests, the data and delete files of their live
    entries), the current metadata file and those of its metadata log, the version hint, and
    every statistics and partition statistics file."""
    from mor.planner.expiry import reachable

    every = reachable(io, md, [s.snapshot_id for s in md.snapshots])
    out: set[str] = set()
    for paths in every.paths.values():
        out |= paths
    if metadata_location:
        out.add(metadata_location)
    out.update(e.metadata_file for e in md.metadata_log)
    folder = md.properties.get("write.metadata.path", f"{md.location.rstrip('/')}/metadata")
    out.add(f"{folder.rstrip('/')}/version-hint.text")
    for st in list(md.statistics or []) + list(getattr(md, "partition_statistics", None) or []):
        out.add(st.statistics_path)
    return out
