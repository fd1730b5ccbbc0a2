"""Spark reads a table's `s3a://` files with the store settings mor's FileIO has for that table:
a REST catalog's vended credentials, the catalog's `s3.*` properties, the config file's
`[file-io]`, the AWS environment. The same settings reach the catalog's metadata reads, mor's
driver-side reads and Spark's executors.

How, without a jar and without changing the session: Hadoop keeps one file system per (scheme,
bucket, user) in each JVM, created with the settings of the first read that opens it, so a
read's own s3a options would be ignored once another read of the bucket made the file system,
and per-bucket session settings cannot tell apart two tables of one bucket vended different
credentials (the common case: credentials scoped to one table's prefix). So each set of store
settings gets a scheme of its own, `s3a-mor-<digest>`, served by Hadoop's own S3A file system
(`fs.<scheme>.impl`), with the settings as options of the reads that use it (Spark passes a
read's options into the Hadoop configuration of that read, on the driver and the executors
alike). Two tables with different credentials are two schemes: two file systems that never
see each other's paths; a refreshed credential is a new digest, so a file system made with an
old one is never asked again. The digest covers every setting (keys, token, endpoint,
region), so the same name always means the same settings, in every process that reaches a
long-lived Spark (a Spark Connect server, a cluster's executors). Spark redacts the options
in its UI and plans (`spark.redaction.regex` matches `secret`, `token`, `access.key`); mor's
EXPLAIN prints the scheme, never the settings.

The cost: one S3A file system (its connection pool and threads) per set of settings per JVM,
made once; a catalog that vends new credentials at every load makes one per load, which is why
a table's earlier credentials are kept while they stay valid (`scoped`).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mor.planner.state import caches

S3A_IMPL = "org.apache.hadoop.fs.s3a.S3AFileSystem"
TEMPORARY = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
SIMPLE = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"

# pyiceberg's FileIO property -> the s3a setting (per bucket: fs.s3a.bucket.<b>.<setting>)
_SETTINGS = {
    "s3.access-key-id": "access.key",
    "s3.secret-access-key": "secret.key",
    "s3.session-token": "session.token",
    "s3.endpoint": "endpoint",
    "s3.region": "endpoint.region",
}
EXPIRES = "s3.session-token-expires-at-ms"
KEEP_FOR_S = 15 * 60  # earlier credentials of a table are kept while valid this much longer


@dataclass(frozen=True)
class StoreAccess:
    """The scheme Spark reads a table's `s3a://` paths under, and the Hadoop settings of the
    file system behind it (`settings`: per-bucket names filled in by `options`)."""

    scheme: str
    settings: tuple[tuple[str, str], ...]
    expires_ms: int | None = None

    def path(self, path: str) -> str:
        """`path` as Spark is given it: an `s3a://` path under this scheme, others unchanged."""
        if path.startswith("s3a://"):
            return self.scheme + path[3:]
        return path

    def options(self, paths: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
        """Options of a Spark read (or write) of `paths`: the scheme's file system, and the
        settings for each bucket named (a per-bucket setting of the session would otherwise
        win over the general one)."""
        out = {f"fs.{self.scheme}.impl": S3A_IMPL}
        for k, v in self.settings:
            out[f"fs.s3a.{k}"] = v
        for bucket in sorted({_bucket(p) for p in paths} - {""}):
            for k, v in self.settings:
                out[f"fs.s3a.bucket.{bucket}.{k}"] = v
        return out

    def arrow_options(self) -> tuple[tuple[str, Any], ...]:
        """The same settings as pyarrow's `S3FileSystem` arguments (compaction's tasks write
        with them: physical/rewrite_jobs.write_arrow)."""
        given = dict(self.settings)
        out: dict[str, Any] = {}
        for setting, arg in (
            ("access.key", "access_key"),
            ("secret.key", "secret_key"),
            ("session.token", "session_token"),
            ("endpoint.region", "region"),
        ):
            if setting in given:
                out[arg] = given[setting]
        endpoint = given.get("endpoint", "")
        if endpoint:
            scheme, _, host = endpoint.rpartition("://")
            out["endpoint_override"] = host
            out["scheme"] = scheme or (
                "https" if given.get("connection.ssl.enabled", "true") == "true" else "http"
            )
            out["force_virtual_addressing"] = given.get("path.style.access") != "true"
        return tuple(sorted(out.items()))

    def describe(self) -> str:
        """One line for EXPLAIN: what the settings hold, never a key, secret or token."""
        given = dict(self.settings)
        parts = []
        if "access.key" in given:
            parts.append("keys" + (" + session token" if "session.token" in given else ""))
        if self.expires_ms is not None:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.expires_ms / 1000))
            parts.append(f"expiring {when}")
        for k, label in (("endpoint", "endpoint"), ("endpoint.region", "region")):
            if k in given:
                parts.append(f"{label} {given[k]}")
        if given.get("path.style.access") == "true":
            parts.append("path-style")
        return f"{', '.join(parts)}; Spark reads its s3a:// paths as {self.scheme}://"


def _bucket(path: str) -> str:
    rest = path.split("://", 1)[1] if "://" in path else ""
    return rest.split("/", 1)[0]


def access_of(properties: Mapping[str, str]) -> StoreAccess | None:
    """The access for a FileIO's properties; None when they hold no store setting (Spark reads
    with the session's own s3a settings)."""
    given = {_SETTINGS[k]: str(v) for k, v in properties.items() if k in _SETTINGS and v}
    if not given:
        return None
    endpoint = given.get("endpoint", "")
    if endpoint:
        given["connection.ssl.enabled"] = str(not endpoint.startswith("http://")).lower()
        virtual = str(properties.get("s3.force-virtual-addressing", "")).lower() == "true"
        given["path.style.access"] = str(not virtual).lower()
    if str(properties.get("s3.path-style-access", "")).lower() == "true":
        given["path.style.access"] = "true"
    if "access.key" in given:
        given["aws.credentials.provider"] = TEMPORARY if "session.token" in given else SIMPLE
    settings = tuple(sorted(given.items()))
    digest = hashlib.sha256(repr(settings).encode()).hexdigest()[:24]
    expires = properties.get(EXPIRES)
    return StoreAccess(
        f"s3a-mor-{digest}", settings, int(expires) if str(expires or "").isdigit() else None
    )


_LOCK = threading.Lock()
_KEPT: dict[tuple[str, str], StoreAccess] = {}  # (table location, endpoint) -> latest access
_KEPT_MAX = 256


def scoped(
    location: str, properties: Mapping[str, str], now_ms: int | None = None
) -> StoreAccess | None:
    """The access Spark reads the table at `location` with. A catalog that vends credentials
    may vend new ones at every load: the table's earlier ones are used again while they stay
    valid at least KEEP_FOR_S longer, so a process that queries a table again reuses its file
    system instead of making one per query (the catalog granted them for this location: a
    revoked grant fails the load itself, before any read). Credentials without an expiry are
    used as given."""
    access = access_of(properties)
    if access is None or access.expires_ms is None:
        return access
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    key = (location, dict(access.settings).get("endpoint", ""))
    with _LOCK:
        kept = _KEPT.get(key)
        if kept is not None and kept.expires_ms is not None:
            if kept.expires_ms - now_ms >= KEEP_FOR_S * 1000:
                return kept
        if len(_KEPT) >= _KEPT_MAX:
            _KEPT.pop(next(iter(_KEPT)))
        _KEPT[key] = access
    return access


def table_access(node: Any) -> StoreAccess | None:
    """The access for a scan node's table (its FileIO's properties), or None with the
    `table_store_access` setting off."""
    return access_for(node.source_key.split("/metadata/", 1)[0], node.io)


def access_for(location: str, io: Any, writing: bool = False) -> StoreAccess | None:
    """The access for the table at `location` read through `io`, or None with the
    `table_store_access` setting off. `writing`: the credentials of this load, never earlier
    ones kept (a catalog that narrowed a grant since decides what is written)."""
    from mor.planner.settings import current

    if not current().table_store_access or io is None:
        return None
    properties = getattr(io, "properties", {}) or {}
    return access_of(properties) if writing else scoped(location, properties)


def _kept_figures() -> tuple[int, int]:
    with _LOCK:
        return len(_KEPT), len(_KEPT)


def _clear_kept() -> None:
    with _LOCK:
        _KEPT.clear()


caches().register(
    "vended credentials kept",
    "per table location: the latest store credentials with an expiry, used again while "
    f"valid {KEEP_FOR_S // 60} minutes longer (one S3A file system per set in Spark)",
    "tables",
    "the tables read with expiring credentials",
    _kept_figures,
    _clear_kept,
)
