"""File lists: the files of a scan read by Spark as one Parquet relation, without listing them.

Spark's DataFrame reader lists every path it is given: a status request per file on the driver,
and beyond `spark.sql.sources.parallelPartitionDiscovery.threshold` (32) paths a Spark job with
a task per path or two. mor knows every file, its size and more from the manifests, so listing
is pure cost: at 20,000 files, reads grouped under the threshold made a union of 625 Parquet
scans (36 s and 15,700 py4j calls to build the DataFrame, and a plan Spark analyses branch by
branch).

One input of Spark's reader names files without listing them: the metadata log of Spark's own
streaming file sink. A directory holding `_spark_metadata/0` (the line `v1`, then one JSON line
per file: path, size, modification time) is read by Spark as exactly those files (its
`MetadataLogFileIndex`), on every Spark mor supports, classic or Connect. mor writes one such
directory per set of files it reads, and reads it with:

- `recursiveFileLookup`: Spark infers no partition columns from `k=v` folders in the paths;
- each file's **modification time in the log is its key in the scan** (a small long): rows
  carry it as `unix_millis(_metadata.file_modification_time)`, and per-file values (sequence
  numbers, partitions, bitmaps) join on it. No path strings per row, no sizes that collide;
- the recorded sizes: Spark plans splits without a request per file, and packs the files into
  tasks as Iceberg packs its splits (a split target, `spark.sql.files.maxPartitionBytes`, and an
  open cost per file, `spark.sql.files.openCostInBytes`; large files split at row groups).

Safety: a sentinel file beside the log is no Parquet file, so a Spark that listed the directory
instead of reading the log (`spark.sql.streaming.fileStreamSink.metadata.ignored`, which mor
checks first) fails the query naming it rather than reading nothing. The log is also written
as `0.compact` (a hard link), which is the name Spark reads when a session sets the sink's
compact interval to 1. Files whose names Spark treats as hidden (`_x`, `.x`) are never put in a
list (physical/scan/reads.py reads them by path).

Where: setting `file_list_dir`, by default `mor-<uid>/file-lists` in the temporary directory.
Spark's driver reads the log (the executors get the files from it), so it must see that folder:
a classic session's driver is this machine's JVM; a Spark Connect server is asked once per
session (physical/scan/reads.py). Lists are content-addressed (the same files make the same
directory, reused) and the least recently used beyond `file_list_bytes` are removed, never one
used in the last hour (a Spark Connect server reads a list again each time a query runs). The
folder is read for that at most once every ten minutes (a marker file's time says when it last
was, for every process), not at each new list: a folder of tens of thousands of lists took a
second to read, which every query writing a list paid.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

from mor.planner.cache import mark_trimmed, trimmed_lately
from mor.planner.settings import current

LOG = "_spark_metadata"
SENTINEL = "NOT-DATA-mor-reads-the-log-in-_spark_metadata.parquet"
MIN_AGE = 3600.0  # seconds a list is kept after its last use, whatever the bound
_BLOCK = 32 << 20  # the block size given to Spark (it plans splits by maxPartitionBytes)
_PLAIN = re.compile(r"[A-Za-z0-9/._~=+,;:@!$&'()*-]*")  # needs no escape in a URI path
_SAFE = "/._~=+,;:@!$&'()*-"
_lock = threading.Lock()


def root() -> Path:
    """The folder lists are written in (created on first use, private to this user)."""
    configured = current().file_list_dir
    if configured:
        return Path(os.path.expanduser(configured))
    return Path(tempfile.gettempdir()) / f"mor-{os.getuid()}" / "file-lists"


def uri(path: str) -> str:
    """A file's path as the URI Spark's driver opens from the log (`new Path(new URI(...))`):
    a local path as `file:///...`, another scheme kept; the path part escaped, with duplicate
    slashes collapsed as Hadoop's `Path` collapses them in the paths mor gives it otherwise."""
    if path.startswith("file:"):
        scheme, authority, rest = "file", "", "/" + path[len("file:") :].lstrip("/")
    elif "://" in path:
        scheme, tail = path.split("://", 1)
        authority, _, rest = tail.partition("/")
        rest = "/" + rest
    else:
        scheme, authority, rest = "file", "", os.path.abspath(path)
    if "//" in rest:
        rest = re.sub(r"/{2,}", "/", rest)
    if len(rest) > 1 and rest[-1] == "/":
        rest = rest.rstrip("/")
    if not _PLAIN.fullmatch(rest):
        rest = quote(rest, safe=_SAFE)
    return f"{scheme}://{authority}{rest}"


def write(entries: Iterable[tuple[str, int, int]]) -> str:
    """The directory (as a URI for Spark's reader) of the file list of these
    (read path, size, key) entries; written unless the same list exists, else reused."""
    lines = ["v1"]
    for path, size, key in entries:
        u = uri(path)
        text = f'"{u}"' if '"' not in u and "\\" not in u else json.dumps(u)
        lines.append(
            f'{{"path":{text},"size":{int(size)},"isDir":false,"modificationTime":{int(key)},'
            f'"blockReplication":1,"blockSize":{_BLOCK},"action":"add"}}'
        )
    log = ("\n".join(lines) + "\n").encode()
    base = root()
    target = base / hashlib.blake2b(log, digest_size=16).hexdigest()
    if (target / LOG / "0").is_file():
        _touch(target)
        return uri(str(target))
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = base / f".tmp-{uuid.uuid4().hex}"
    (tmp / LOG).mkdir(parents=True)
    (tmp / LOG / "0").write_bytes(log)
    os.link(tmp / LOG / "0", tmp / LOG / "0.compact")
    (tmp / SENTINEL).write_text(
        "This folder is a list of files mor wrote for Spark: Spark reads the files named in "
        f"{LOG}/0. If Spark read this file, it listed the folder instead "
        "(spark.sql.streaming.fileStreamSink.metadata.ignored is set).\n"
    )
    try:
        os.rename(tmp, target)
    except OSError:  # another process wrote the same list meanwhile: theirs is ours
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / LOG / "0").is_file():
            raise
    _trim(base, target)
    return uri(str(target))


def _touch(target: Path) -> None:
    try:
        os.utime(target)
    except OSError:  # removed meanwhile by another process's trim: written again next time
        pass


def _trim(base: Path, keep: Path) -> None:
    """Remove the least recently used lists beyond `file_list_bytes` (never `keep`, nor a list
    used in the last MIN_AGE seconds), unless a process did so in the last TRIM_EVERY seconds
    (planner/cache.py's marker): reading the folder costs a stat per list, and between two
    trims the folder grows by what ten minutes of queries write, which the hour every list is
    kept for allows anyway."""
    now = time.time()
    with _lock:
        if trimmed_lately(base):
            return
        mark_trimmed(base)
        lists = []
        with os.scandir(base) as entries:
            for d in entries:
                if d.name.startswith(".") or d.path == str(keep):
                    continue
                try:
                    used = d.stat().st_mtime
                    size = os.stat(os.path.join(d.path, LOG, "0")).st_size
                except OSError:
                    continue
                lists.append((used, size, d.path))
        limit = current().file_list_bytes
        held = sum(size for _, size, _ in lists) + (keep / LOG / "0").stat().st_size
        for used, size, d in sorted(lists):
            if held <= limit:
                break
            if now - used < MIN_AGE:
                break  # the rest are younger still
            shutil.rmtree(d, ignore_errors=True)
            held -= size


def probe_file() -> tuple[Path, str]:
    """A new file in the lists' folder and its URI: physical/scan/reads.py asks a Spark Connect
    server whether it sees it (then it sees the lists)."""
    base = root()
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = base / f".probe-{uuid.uuid4().hex}.txt"
    path.write_text("mor\n")
    return path, uri(str(path))
