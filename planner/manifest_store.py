"""Decoded manifests kept on this machine's disk, for the next process (every `mor run` is one).

A manifest is immutable once written, and decoding its entries is most of cold planning. The
first process that decodes one writes its live entries here; a later process planning a scan
of the same manifest reads them back (unpickling is several times faster than decoding the
Avro: bench/planning.py) instead of fetching and decoding the file. Manifest lists are kept
the same way, keyed by the path read and the length of the bytes read (the list is still
fetched: its length is recorded nowhere else; only its decoding is saved).

What makes an entry trustworthy:

- **The key** is everything the decoded entries depend on: the path the file is read from
  (after a path map), the length the manifest list records for it, and the list's sequence
  number, added snapshot id and spec id (which the entries inherit), and whether column
  metrics were decoded. A local file's modification time and size are in the key too (one
  `stat`, no request): a test or a user that writes a new file at a path used before never
  gets the old file's entries. An object store's files are never rewritten by Iceberg's
  writers (their names hold a UUID), and a HEAD request per manifest would cost what the
  cache saves.
- **Only files read whole** are stored: bytes whose length differs from the recorded length
  are decoded for this plan and never stored.
- **Written atomically** (a temporary file renamed into place), so concurrent processes see a
  whole entry or none; a file that does not read back whole (a crash, a disk full) is a miss
  and is removed.
- **This user's alone**: the folder is made with mode 0700 and not used when another user owns
  it or may write in it (an entry is a pickle: reading one written by someone else would run
  their code).

Bound: `manifest_disk_cache_mb` (0: off); beyond it, the entries least recently used go (a hit
refreshes an entry's time). Where: `$MOR_CACHE_DIR`, else `$XDG_CACHE_HOME/mor`, else
`~/.cache/mor`, in `manifests/`. `mor config` shows it; removing the folder is always safe.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
import time
from typing import Any

from mor.planner.cache import mark_trimmed, trimmed_lately
from mor.planner.settings import current

_MAGIC = b"MORM1\n"  # the format of an entry file; another version's files are misses
_lock = threading.Lock()
_state = {"written": 0, "trimmed": 0}  # bytes written since the last trim; trims done here


def cache_root() -> str:
    """$MOR_CACHE_DIR, else $XDG_CACHE_HOME/mor, else ~/.cache/mor."""
    explicit = os.environ.get("MOR_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mor")


def folder() -> str | None:
    """The manifests folder, made if missing; None when the cache is off or the folder is
    not this user's alone."""
    if current().manifest_disk_cache_mb <= 0:
        return None
    path = os.path.join(cache_root(), "manifests")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        return None
    return path


def key(read_path: str, manifest: Any, metrics: bool) -> str | None:
    """The entry's name for `manifest` (a ListedManifest) read from `read_path`; None: not
    cacheable (a local file that is gone)."""
    return _name(
        read_path,
        manifest.manifest_length,
        manifest.sequence_number or 0,
        manifest.added_snapshot_id,
        manifest.partition_spec_id,
        int(metrics),
    )


def list_key(read_path: str, length: int) -> str | None:
    """The entry's name for a manifest list read from `read_path`, `length` bytes as read (its
    entries depend on nothing else: a list carries its own sequence numbers)."""
    return _name(read_path, "manifest list", length)


def _name(read_path: str, *parts: Any) -> str | None:
    local = read_path.removeprefix("file://") if read_path.startswith("file:") else read_path
    stamp = ""
    if "://" not in local:
        try:
            st = os.stat(local.removeprefix("file:"))
        except OSError:
            return None
        stamp = f"{st.st_mtime_ns}:{st.st_size}"
    text = "\0".join(str(v) for v in (read_path, *parts, stamp))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _path(root: str, name: str) -> str:
    return os.path.join(root, name[:2], name[2:])


def get(root: str, name: str) -> list[Any] | None:
    """The entries stored under `name`, or None."""
    path = _path(root, name)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if not data.startswith(_MAGIC) or data[len(_MAGIC) : len(_MAGIC) + 64] != name.encode():
        _remove(path)
        return None
    try:
        entries = pickle.loads(data[len(_MAGIC) + 64 :])
    except Exception:  # noqa: BLE001 - cut short or damaged: a miss, and gone
        _remove(path)
        return None
    if not isinstance(entries, list):
        _remove(path)
        return None
    try:
        os.utime(path)  # recently used: trimmed last
    except OSError:
        pass
    return entries


def put(root: str, name: str, entries: list[Any]) -> None:
    """Store `entries` under `name` (best effort: a full disk or a folder gone is no error)."""
    path = _path(root, name)
    try:
        data = pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + name.encode() + data)
            os.replace(tmp, path)
        except BaseException:
            _remove(tmp)
            raise
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        return
    with _lock:
        _state["written"] += len(data)


def trim(root: str) -> None:
    """Remove the least recently used entries beyond the bound; run after a plan wrote entries
    (a listing of the folder, not a step per manifest), when it wrote a tenth of the bound or
    more since the last trim, or at its first write in this process unless any process
    trimmed the folder in the last TRIM_EVERY seconds (a marker file's time says when): every
    `mor run` is a new process, and listing a full folder (over 100,000 entries at the default
    bound) would cost each first call that decodes a manifest seconds."""
    bound = current().manifest_disk_cache_mb * 1024 * 1024
    with _lock:
        written = _state["written"]
        if written == 0:
            return
        if written < bound // 10 and (_state["trimmed"] or trimmed_lately(root)):
            return
        _state["written"] = 0
        _state["trimmed"] += 1
    mark_trimmed(root)
    files = []
    total = 0
    try:
        for sub in os.scandir(root):
            if not sub.is_dir(follow_symlinks=False):
                continue
            for e in os.scandir(sub.path):
                if e.name.endswith(".tmp"):
                    st = e.stat(follow_symlinks=False)
                    if time.time() - st.st_mtime > 3600:  # left by a process that died
                        _remove(e.path)
                    continue
                st = e.stat(follow_symlinks=False)
                files.append((st.st_mtime, st.st_size, e.path))
                total += st.st_size
    except OSError:
        return
    if total <= bound:
        return
    files.sort()
    for _, size, path in files:
        if total <= bound * 0.8:  # room for the next plans' writes
            break
        _remove(path)
        total -= size


def held() -> tuple[int, int]:
    """(entries, bytes) in the folder, for `mor config`."""
    root = folder()
    n = size = 0
    if root is None:
        return 0, 0
    try:
        for sub in os.scandir(root):
            if sub.is_dir(follow_symlinks=False):
                for e in os.scandir(sub.path):
                    if not e.name.endswith(".tmp"):
                        n += 1
                        size += e.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return n, size


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
