"""Where tables come from: a pyiceberg catalog, or a metadata file named in `iceberg_scan(...)`.

Every file the reader opens goes through `PathMap`, so copied or moved tables read where they
lie; matching and bounds checks keep using the paths as recorded in the metadata. `s3://` and
`s3n://` paths (what Iceberg's writers record) are read as `s3a://`, the scheme of Hadoop's S3
connector, unless the `s3a_paths` setting is off.

Files are opened with pyiceberg's FileIO, whose properties (`s3.endpoint`, keys, region, ...)
come, later ones winning: from the environment the AWS SDKs read (`io_defaults`), the config
file's `[file-io]` table, the catalog and the table's own configuration (vended credentials),
and the caller (`io_properties=`, `--io KEY=VALUE`).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg import serializers
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import (
    AuthorizationExpiredError,
    ForbiddenError,
    NoSuchNamespaceError,
    NoSuchTableError,
    OAuthError,
    UnauthorizedError,
    ValidationError,
)
from pyiceberg.io import FileIO, InputFile, OutputFile, load_file_io
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from mor.planner.errors import (
    CatalogAccessError,
    CatalogUnreachableError,
    ConfigError,
    MetadataError,
    MorError,
    TableNotFoundError,
    clipped,
)
from mor.planner.names import SparkNames
from mor.planner.requests import CountingFileIO

if TYPE_CHECKING:
    from mor.planner.pending import Pending


@dataclass(frozen=True, slots=True)
class PathMap:
    """Prefix substitutions `{recorded: actual}`; the longest matching prefix wins. Then, with
    `s3a`, an `s3://` or `s3n://` path is given the `s3a://` scheme (the same bucket and key:
    Spark's Hadoop has no `s3` file system unless the cluster adds one)."""

    pairs: tuple[tuple[str, str], ...] = ()
    s3a: bool = False

    @staticmethod
    def of(mapping: dict[str, str] | None, s3a: bool | None = None) -> PathMap:
        """Prefixes are whole path segments: a trailing `/` on either side is dropped, so
        `/a/b/=/c` and `/a/b=/c/` map `/a/b/x` to `/c/x` alike (never `/cx`). `s3a`: None
        takes the `s3a_paths` setting."""
        pairs = [(_trim(str(k)), _trim(str(v))) for k, v in (mapping or {}).items()]
        if s3a is None:
            from mor.planner.settings import current

            s3a = current().s3a_paths
        return PathMap(tuple(sorted(pairs, key=lambda kv: -len(kv[0]))), s3a)

    def __call__(self, path: str) -> str:
        mapped = self._prefix(path)
        if self.s3a and mapped[:5] in ("s3://", "s3n:/"):
            return "s3a://" + mapped[len("s3n://") if mapped[2] == "n" else len("s3://") :]
        return mapped

    def _prefix(self, path: str) -> str:
        local = _local_form(path)
        for old, new in self.pairs:
            if _under(path, old):
                return new + path[len(old) :]
            # a local path may be recorded as /x, file:/x or file:///x: match them alike
            old_local = _local_form(old)
            if local is not None and old_local is not None and _under(local, old_local):
                return new + local[len(old_local) :]
        return path


def prefix_rewrite(recorded: str, actual: str) -> tuple[str, str] | None:
    """(recorded prefix, read prefix) of a file read elsewhere than recorded, for EXPLAIN:
    where the two paths differ, plus the next path segment (`s3://whs -> s3a://whs`,
    `/old/wh -> /new/wh`), so a table shows one line, not one per file."""
    if recorded == actual:
        return None
    n = 0
    while n < min(len(recorded), len(actual)) and recorded[-1 - n] == actual[-1 - n]:
        n += 1
    tail = recorded[len(recorded) - n :]
    i = 0
    while i < len(tail) and tail[i] in ":/":
        i += 1
    j = tail.find("/", i)
    ext = tail[:j] if j >= 0 else tail[:i]
    return recorded[: len(recorded) - n] + ext, actual[: len(actual) - n] + ext


# FileIO properties the AWS SDKs' environment variables stand for (pyiceberg's FileIO reads
# none of them but the keys: an endpoint or region given only there would be ignored, and
# without a region pyiceberg asks AWS where the bucket is, which fails off AWS)
_AWS_ENV = (
    ("s3.endpoint", ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")),
    ("s3.region", ("AWS_REGION", "AWS_DEFAULT_REGION")),
    ("s3.access-key-id", ("AWS_ACCESS_KEY_ID",)),
    ("s3.secret-access-key", ("AWS_SECRET_ACCESS_KEY",)),
    ("s3.session-token", ("AWS_SESSION_TOKEN",)),
    ("s3.profile-name", ("AWS_PROFILE",)),
)


def io_defaults() -> dict[str, str]:
    """FileIO properties from the AWS SDKs' environment, then the config file's `[file-io]`."""
    from mor.planner.settings import user_config

    out = {}
    for prop, names in _AWS_ENV:
        value = next((os.environ[n] for n in names if os.environ.get(n)), None)
        if value is not None:
            out[prop] = value
    return {**out, **user_config().file_io}


def with_region(props: dict[str, str]) -> dict[str, str]:
    """An endpoint without a region is an S3-compatible store (or a proxy): give the SDK's
    default region rather than let pyiceberg ask AWS which region the bucket is in."""
    if props.get("s3.endpoint") and not (props.get("s3.region") or props.get("client.region")):
        return {**props, "s3.region": "us-east-1"}
    return props


def _trim(prefix: str) -> str:
    return prefix.rstrip("/") if prefix.rstrip("/") else prefix


def _under(path: str, prefix: str) -> bool:
    """`path` is `prefix` or lies below it (whole segments: /a/b is not under /a/bc's /a/b)."""
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def _local_form(path: str) -> str | None:
    """/x for a local path written /x, file:/x or file:///x; None for other schemes."""
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    if "://" in path:
        return None
    return path


class MappedFileIO(FileIO):
    """A read-only FileIO that applies a path map before opening anything."""

    def __init__(self, inner: FileIO, path_map: PathMap) -> None:
        super().__init__(properties=inner.properties)
        self._inner = inner if isinstance(inner, CountingFileIO) else CountingFileIO(inner)
        self._map = path_map

    @property
    def inner(self) -> CountingFileIO:
        """The FileIO itself, for paths already mapped (a task's read_path); its remote
        requests are tallied (planner/requests.py)."""
        return self._inner

    def new_input(self, location: str) -> InputFile:
        return self._inner.new_input(self._map(location))

    def new_output(self, location: str) -> OutputFile:
        raise MorError(f"mor only reads tables: refusing to write {location}")

    def delete(self, location: str | InputFile | OutputFile) -> None:
        raise MorError(f"mor only reads tables: refusing to delete {location}")


@dataclass(frozen=True, slots=True)
class TableSource:
    """A loaded table: its metadata and the FileIO to read its files with."""

    key: str  # metadata location as given: stable identity for the physical layer
    name: str  # printable name
    metadata: TableMetadata
    io: MappedFileIO
    path_map: PathMap
    metadata_location: str = ""  # the metadata file read

    def read_path(self, recorded: str) -> str:
        return self.path_map(recorded)


def _metadata_file_in(directory: str) -> str:
    """The current metadata file of a table directory, as Iceberg's Hadoop tables find it:
    `metadata/version-hint.text`, else the highest `v<N>` / `<N>-<uuid>` version. Files named
    otherwise (`vfinal.metadata.json`) are ordered by what the table records in them: a file
    listed in another's `metadata-log` is older; of the rest, the one with the highest last
    sequence number and update time is current. When that does not decide, the candidates are
    listed in the error: never a guess (an older file reads an older snapshot)."""
    meta = os.path.join(directory, "metadata")
    if not os.path.isdir(meta):
        raise TableNotFoundError(f"iceberg_scan: {directory} has no metadata/ folder")
    hint = os.path.join(meta, "version-hint.text")
    if os.path.exists(hint):
        with open(hint) as f:
            v = f.read().strip()
        for cand in (f"v{v}.metadata.json", f"{v}.metadata.json"):
            if os.path.exists(os.path.join(meta, cand)):
                return os.path.join(meta, cand)
    names = sorted(n for n in os.listdir(meta) if n.endswith(".metadata.json"))
    if not names:
        raise TableNotFoundError(f"iceberg_scan: no *.metadata.json file in {meta}")
    numbered = {n: re.match(r"^v?(\d+)(?:-[0-9a-f-]+)?\.metadata\.json$", n) for n in names}
    if all(numbered.values()):
        versions = sorted((int(m.group(1)), n) for n, m in numbered.items() if m)
        if len(versions) == 1 or versions[-1][0] > versions[-2][0]:
            return os.path.join(meta, versions[-1][1])
    return os.path.join(meta, _newest_by_content(meta, names))


def _newest_by_content(meta: str, names: list[str]) -> str:
    facts = {}
    for n in names:
        try:
            with open(os.path.join(meta, n)) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue  # unreadable: not a candidate for the current metadata
        logged = {
            str(e.get("metadata-file", "")).rsplit("/", 1)[-1]
            for e in doc.get("metadata-log") or []
        }
        order = (int(doc.get("last-sequence-number") or 0), int(doc.get("last-updated-ms") or 0))
        facts[n] = (logged, order)
    older = {x for logged, _ in facts.values() for x in logged}
    heads = sorted(((o, n) for n, (_, o) in facts.items() if n not in older), reverse=True)
    if heads and (len(heads) == 1 or heads[0][0] > heads[1][0]):
        return heads[0][1]
    raise TableNotFoundError(
        f"iceberg_scan: cannot tell which metadata file of {meta} is current "
        f"(no version-hint.text; candidates: {', '.join(names)}): name the file instead"
    )


def _missing_bucket(io: FileIO, location: str) -> str | None:
    """`bucket X does not exist (endpoint)` when the bucket of `location` is not there (one
    request), so a typo in the bucket is not reported as a missing file; else None."""
    if not hasattr(io, "fs_by_scheme") or not hasattr(io, "parse_location"):
        return None
    try:
        scheme, netloc, _ = io.parse_location(location, io.properties)
        from pyarrow.fs import FileType

        info = io.fs_by_scheme(scheme, netloc).get_file_info(netloc)
    except Exception:  # noqa: BLE001 - the probe only refines a message
        return None
    if info.type != FileType.NotFound:
        return None
    endpoint = io.properties.get("s3.endpoint") or "AWS"
    return f"bucket {netloc!r} does not exist (at {endpoint}): {location}"


def _is_metadata(path: str) -> bool:
    return path.endswith(".json") or path.endswith(".json.gz")


def is_table_path(name: str) -> bool:
    """A table given by its directory or metadata file rather than by name."""
    return "/" in name or name.endswith(".json")


class Resolver:
    """Loads tables by name (through a catalog) or by metadata path, each once per query;
    knows what else a statement's names may be (planner/names.py): what Spark's session
    holds (`spark`), the DataFrames the call hands in by name (`given`), and the tables a
    script's earlier statements create or drop (`pending`, checked before they run)."""

    def __init__(
        self,
        catalog: Catalog | Callable[[], Catalog] | None,
        path_map: PathMap,
        io_properties: dict[str, str] | None = None,
        *,
        spark: SparkNames | None = None,
        given: Iterable[str] = (),
        pending: Pending | None = None,
    ) -> None:
        """`catalog` may be a factory: it is then called only when a table is named.
        `io_properties`: the caller's FileIO properties, over every other source."""
        self._catalog = catalog
        self._map = path_map
        self._io_explicit = {str(k): str(v) for k, v in (io_properties or {}).items()}
        self._io_defaults = io_defaults()
        self._cache: dict[str, TableSource] = {}
        self.spark = spark if spark is not None else SparkNames()
        self.given = frozenset(g.lower() for g in given)
        self.pending = pending

    @property
    def catalog(self) -> Catalog:
        """The statement's catalog (made now when given as a factory)."""
        if callable(self._catalog) and not isinstance(self._catalog, Catalog):
            self._catalog = self._catalog()
        if self._catalog is None:
            raise TableNotFoundError("no catalog is configured")
        return self._catalog

    def catalog_name(self) -> str | None:
        """The statement's catalog's name, without making it (None: not known yet)."""
        if isinstance(self._catalog, Catalog):
            return self._catalog.name
        return None

    def catalog_has(self, parts: tuple[str, ...]) -> bool:
        """Whether mor's catalog holds a table named `parts` (`ns.t` or `cat.ns.t`)."""
        try:
            self.by_name(parts)
        except TableNotFoundError:
            return False
        return True

    def is_mor_catalog(self, name: str) -> bool:
        """Whether `name` names a catalog mor reads: the statement's own, or one configured
        for mor or pyiceberg."""
        own = self.catalog_name()
        if own is None:
            try:
                own = self.catalog.name
            except MorError:
                own = None
        return name == own or _is_configured(name)

    def _path_io(self, location: str) -> FileIO:
        """The FileIO of a table named by path: the defaults and the caller's properties."""
        return load_file_io(with_region({**self._io_defaults, **self._io_explicit}), location)

    def _catalog_io(self, table: Any) -> FileIO:
        """The FileIO a catalog gave the table (with its vended credentials), rebuilt only
        when the environment, the config file or the caller adds a property it lacks."""
        have = dict(table.io.properties)
        props = with_region({**self._io_defaults, **have, **self._io_explicit})
        if props == have:
            return table.io
        return load_file_io(props, table.metadata_location)

    @property
    def sources(self) -> dict[str, TableSource]:
        return self._cache

    def by_path(self, path: str) -> TableSource:
        actual = self._map(path)
        if os.path.isdir(actual):
            location = _metadata_file_in(actual)
        elif "://" in actual and not actual.startswith("file:") and not _is_metadata(actual):
            location = self._remote_metadata_file(actual)
        elif os.path.exists(actual) or "://" in actual:
            location = actual
        else:
            raise TableNotFoundError(f"iceberg_scan: no table or metadata file at {path}")
        if location in self._cache:
            return self._cache[location]
        io = MappedFileIO(self._path_io(location), self._map)
        try:
            metadata = read_metadata(io.new_input(location))
        except Exception as e:  # noqa: BLE001 - any parse failure is the user's file
            where = path if path == location else f"{path} (read as {location})"
            raise MetadataError(f"cannot read table metadata {where}: {_short(e)}") from e
        src = TableSource(location, path, metadata, io, self._map, location)
        self._cache[location] = src
        return src

    def _remote_metadata_file(self, directory: str) -> str:
        """The current metadata file of a table directory on an object store: as Iceberg's
        Hadoop tables record it, in `metadata/version-hint.text` (one read; an object store
        cannot be listed through FileIO)."""
        base = directory.rstrip("/")
        hint = f"{base}/metadata/version-hint.text"
        io = CountingFileIO(self._path_io(hint))
        try:
            with io.new_input(hint).open() as f:
                v = f.read().decode().strip()
        except FileNotFoundError:
            missing = _missing_bucket(io.inner, base)
            if missing:
                raise TableNotFoundError(f"iceberg_scan: {missing}") from None
            raise TableNotFoundError(
                f"iceberg_scan: {base} has no metadata/version-hint.text: name the table's "
                "metadata file (.../metadata/<version>.metadata.json) instead"
            ) from None
        except Exception as e:  # noqa: BLE001 - the store's error, in one line
            raise MetadataError(f"cannot read {hint}: {_short(e)}") from e
        for cand in (f"v{v}.metadata.json", f"{v}.metadata.json"):
            location = f"{base}/metadata/{cand}"
            try:
                if len(io.new_input(location)) >= 0:
                    return location
            except FileNotFoundError:
                continue
            except Exception as e:  # noqa: BLE001 - the store's error, in one line
                raise MetadataError(f"cannot read {location}: {_short(e)}") from e
        raise TableNotFoundError(
            f"iceberg_scan: {hint} names version {v!r}, but neither v{v}.metadata.json nor "
            f"{v}.metadata.json exists in {base}/metadata"
        )

    def by_text(self, name: str) -> TableSource:
        """A table named as users write it: its path (is_table_path) or `ns.t` / `cat.ns.t`."""
        return self.by_path(name) if is_table_path(name) else self.by_name(tuple(name.split(".")))

    def by_name(self, parts: tuple[str, ...]) -> TableSource:
        if callable(self._catalog) and not isinstance(self._catalog, Catalog):
            self._catalog = self._catalog()
        catalog = self._catalog
        if catalog is None:
            raise TableNotFoundError(f"table {'.'.join(parts)}: no catalog is configured")
        if len(parts) == 3:
            if parts[0] != catalog.name:
                catalog = load_named_catalog(parts[0])
            parts = parts[1:]
        if len(parts) != 2:
            raise TableNotFoundError(
                f"table name {'.'.join(parts)!r} must be namespace.table or catalog.namespace.table"
            )
        key = f"{catalog.name}:{'.'.join(parts)}"
        if key in self._cache:
            return self._cache[key]
        if self.pending is not None:
            found = self.pending.source(catalog.name, ".".join(parts), self._map)
            if found is not None:
                self._cache[key] = found
                return found
        try:
            with variants_understood():
                table = catalog.load_table(parts)
        except (NoSuchTableError, NoSuchNamespaceError) as e:
            where = catalog.properties.get("uri") or catalog.properties.get("warehouse")
            from pyiceberg.catalog.rest import RestCatalog

            rest = isinstance(catalog, RestCatalog)
            raise TableNotFoundError(
                f"table {'.'.join(parts)} not found in catalog {catalog.name!r}"
                + (f" ({where})" if where else "")
                + (
                    " (a REST catalog answers so for a table it does not grant you, too)"
                    if rest
                    else ""
                )
            ) from e
        except (ForbiddenError, UnauthorizedError, AuthorizationExpiredError, OAuthError) as e:
            refused = (
                "does not grant you table"
                if isinstance(e, ForbiddenError)
                else "did not accept your credentials for table"
            )
            raise CatalogAccessError(
                f"catalog {catalog.name!r} {refused} {'.'.join(parts)}: {clipped(str(e))}"
            ) from e
        except Exception as e:  # noqa: BLE001 - a missing, truncated or invalid metadata file
            raise MetadataError(
                f"table {'.'.join(parts)} in catalog {catalog.name!r}: its metadata cannot be "
                f"read: {_metadata_fault(e)}"
            ) from e
        src = self.loaded(key, ".".join(parts), table)
        self._cache[key] = src
        return src

    def loaded(self, key: str, name: str, table: Any) -> TableSource:
        """The source of a table its catalog loaded already (`key`: its identity), read
        through the catalog's FileIO with this resolver's path map and store settings."""
        io = MappedFileIO(self._catalog_io(table), self._map)
        return TableSource(key, name, table.metadata, io, self._map, table.metadata_location)


# pyiceberg 0.12 has no variant type and refuses every table with a variant column. mor reads
# such metadata with each variant typed as a geometry of this (impossible) CRS, a type pyiceberg
# parses and mor never reads: physical/scan/types.py turns it back into Spark's VARIANT.
VARIANT = "geometry('mor:variant')"


def read_metadata(input_file: InputFile, encoding: str = "utf-8") -> TableMetadata:
    """A metadata file as pyiceberg parses it, with variant columns typed VARIANT (the file
    read again only when pyiceberg refuses it and it holds one)."""
    try:
        return _PARSE(input_file, encoding)
    except ValidationError:  # parsed, and refused: a missing or unreadable file is raised as is
        with input_file.open() as f:
            raw = f.read()
        if input_file.location.endswith(".gz"):
            raw = gzip.decompress(raw)
        if b'"variant"' not in raw:
            raise
        doc = json.loads(raw)
        for schema in doc.get("schemas", []) + ([doc["schema"]] if "schema" in doc else []):
            _mark_variants(schema)
        return TableMetadataUtil.parse_obj(doc)


_PARSE = FromInputFile.table_metadata


def _mark_variants(node: Any) -> None:
    """Every `"variant"` type under this schema (struct) node replaced by VARIANT."""
    if not isinstance(node, dict):
        return
    for key in ("type", "element", "key", "value"):
        v = node.get(key)
        if v == "variant" and (key != "type" or "id" in node):
            node[key] = VARIANT
        elif isinstance(v, dict):
            _mark_variants(v)
    for f in node.get("fields", []) if node.get("type") == "struct" else []:
        _mark_variants(f)


@contextmanager
def variants_understood() -> Iterator[None]:
    """While a catalog loads a table: pyiceberg's metadata files read by read_metadata (the
    catalogs that read a metadata file themselves: SQL, Hive, Glue, ...; a REST catalog's
    response is parsed apart and still refuses a variant column)."""
    serializers.FromInputFile.table_metadata = staticmethod(read_metadata)  # type: ignore[method-assign]
    try:
        yield
    finally:
        serializers.FromInputFile.table_metadata = staticmethod(_PARSE)  # type: ignore[method-assign]


def load_named_catalog(name: str) -> Catalog:
    """A catalog by name (`_configured_catalog`); a failure to load or reach it is one
    MorError naming the catalog and the cause."""
    try:
        return _configured_catalog(name)
    except MorError:
        raise
    except Exception as e:  # noqa: BLE001 - pyiceberg raises several kinds here
        raise catalog_failure(name, e, configured=_is_configured(name)) from e


def _is_configured(name: str) -> bool:
    """Whether any configuration names the catalog: the config file's [catalogs.NAME], or
    pyiceberg's (~/.pyiceberg.yaml, PYICEBERG_CATALOG__NAME__*)."""
    from pyiceberg.catalog import _ENV_CONFIG

    from mor.planner.settings import user_config

    try:
        return bool(user_config().catalogs.get(name) or _ENV_CONFIG.get_catalog_config(name))
    except Exception:  # noqa: BLE001 - a configuration it cannot read names nothing
        return False


def _configured_catalog(name: str) -> Catalog:
    """A catalog by name: pyiceberg's configuration (~/.pyiceberg.yaml, PYICEBERG_CATALOG__*),
    with the properties of the config file's [catalogs.NAME] over it, and under both the
    store settings of the environment (AWS_*) and the config file's [file-io]: the catalog
    reads the table's metadata file through its own FileIO, which must reach the same store
    as mor's later reads (one store configuration for every path). A property the catalog
    configures, or a REST catalog's server vends for a table, wins over them."""
    from pyiceberg.catalog import _ENV_CONFIG

    from mor.planner.settings import user_config

    props = user_config().catalogs.get(name, {})
    configured = {**(_ENV_CONFIG.get_catalog_config(name) or {}), **props}
    store = with_region(
        {**io_defaults(), **{k: v for k, v in configured.items() if isinstance(v, str)}}
    )
    under = {k: v for k, v in store.items() if k not in configured}
    return load_catalog(name, **{**under, **props})


# what a failure to connect looks like, by the exception classes a catalog's client raises
# (requests, urllib3, sqlalchemy, psycopg, sockets), anywhere in the chain of causes
_UNREACHABLE = frozenset({
    "ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout", "OperationalError",
    "NewConnectionError", "MaxRetryError", "ConnectionRefusedError", "gaierror",
})  # fmt: skip
_CREDENTIALS_IN_URL = re.compile(r"(://[^:/@\s]+):[^@\s]+@")


def catalog_failure(name: str, e: BaseException, configured: bool = True) -> MorError:
    """Why the catalog `name` could not be loaded, in one line: a server that cannot be
    reached or refused the connection (CatalogUnreachableError) told apart from a name that is
    not configured (TableNotFoundError); a password in a URL it quotes is masked."""
    chain, seen = [], set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    unreachable = any(
        isinstance(x, (ConnectionError, TimeoutError))
        or any(k.__name__ in _UNREACHABLE for k in type(x).__mro__)
        for x in chain
    )
    reason = _CREDENTIALS_IN_URL.sub(r"\1:***@", _short(e))
    if unreachable:
        return CatalogUnreachableError(f"catalog {name!r} cannot be reached: {reason}")
    missing = next((x.name for x in chain if isinstance(x, ModuleNotFoundError) and x.name), None)
    if missing:
        top = missing.split(".")[0]
        package = _PACKAGES.get(top, top)
        return ConfigError(
            f"catalog {name!r} needs the Python module {top!r}, which is not installed in "
            f"this environment ({sys.executable}): pip install {package}"
        )
    if any(type(x).__name__ == "NotInstalledError" for x in chain):
        return ConfigError(f"catalog {name!r} cannot be loaded: {reason}")
    if reason.startswith("URI missing"):
        from mor.planner.settings import user_config

        if not configured:
            return TableNotFoundError(
                f"unknown catalog {name!r}: no [catalogs.{name}] in {user_config().path}, "
                f"and pyiceberg's configuration (~/.pyiceberg.yaml, "
                f"PYICEBERG_CATALOG__{name.upper()}__*) names none"
            )
        return ConfigError(
            f"catalog {name!r} has no uri: set `uri` under [catalogs.{name}] in "
            f"{user_config().path}, or PYICEBERG_CATALOG__{name.upper()}__URI"
        )
    if configured:  # configured, and its client refused the configuration
        return ConfigError(f"catalog {name!r} cannot be loaded: {reason}")
    return TableNotFoundError(f"unknown catalog {name!r}: {reason}")


# the package to install for a module a catalog's client imports, where the names differ
_PACKAGES = {
    "psycopg2": "psycopg2-binary",
    "psycopg": "'psycopg[binary]'",
    "sqlalchemy": "sqlalchemy",
    "boto3": "'pyiceberg[glue]'",
    "hive_metastore": "'pyiceberg[hive]'",
    "thrift": "'pyiceberg[hive]'",
    "pymysql": "pymysql",
    "google": "'pyiceberg[bigquery]'",
}


def _metadata_fault(e: BaseException) -> str:
    """What is wrong with a metadata file, in one line: the file when the error names it."""
    text = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    if isinstance(e, FileNotFoundError):
        m = re.search(r"'([^']+\.json)'", str(e))
        return f"metadata file {m.group(1) if m else '(unnamed)'} is missing"
    if type(e).__name__ == "ValidationError" and len(text) > 1:  # pydantic: the reason is line 2
        return f"the metadata JSON is invalid ({clipped(text[1], 160)})"
    return f"{type(e).__name__}: {clipped(text[0]) if text else ''}"


def _short(e: Any) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
