"""Settings read from the environment and the user's config file (docs/configuration.md)."""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from mor.planner.errors import ConfigError

# --- tuning settings: one typed object ----------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One tuning setting: its name (API `settings={...}`, CLI `--set`, config file), its
    environment variable, type, default and what it does (docs/configuration.md)."""

    name: str
    env: str
    kind: type
    default: Any
    doc: str
    minimum: int = 0
    session: bool = False  # applies only to a Spark session mor starts


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "planning_threads",
        "MOR_PLANNING_THREADS",
        int,
        8,
        "manifests fetched in parallel during scan planning (decoded on the planning thread)",
        minimum=1,
    ),
    Setting(
        "manifest_cache_entries",
        "MOR_MANIFEST_CACHE_ENTRIES",
        int,
        500_000,
        "manifest entries kept across queries of one process",
    ),
    Setting(
        "position_cache_rows",
        "MOR_POSITION_CACHE_ROWS",
        int,
        10_000_000,
        "positions of position delete files kept across queries of one process (read on the "
        "driver for bitmaps; 8 bytes each), and the bitmaps made of them (a word's text, about "
        "20 bytes, weighs three)",
    ),
    Setting(
        "io_threads",
        "MOR_IO_THREADS",
        int,
        16,
        "sizes of remote files and position delete files fetched in parallel",
        minimum=1,
    ),
    Setting(
        "broadcast_rows",
        "MOR_BROADCAST_ROWS",
        int,
        20_000_000,
        "delete sides with at most this many rows are broadcast",
    ),
    Setting(
        "broadcast_bytes",
        "MOR_BROADCAST_BYTES",
        int,
        0,
        "delete sides whose estimated hash relation is at most this many bytes are broadcast "
        "(0: an eighth of spark.driver.memory, at most half of spark.driver.maxResultSize); "
        "larger ones are joined by a shuffle",
    ),
    Setting(
        "delete_cache_bytes",
        "MOR_DELETE_CACHE_BYTES",
        int,
        256 << 20,
        "delete sides Spark reads (equality keys, and deleted positions joined rather than "
        "bitmapped) are kept in Spark's cache across queries of a session, least recently "
        "used first out beyond this many estimated bytes; 0 keeps none",
    ),
    Setting(
        "resolve_equality_deletes",
        "MOR_RESOLVE_EQUALITY_DELETES",
        bool,
        True,
        "the positions equality deletes remove from each data file are resolved by the first "
        "query that reads it (a job reading its key columns) and kept: later queries read the "
        "file as one with position deletes, without the anti-join; off: every query joins",
    ),
    Setting(
        "resolved_cache_rows",
        "MOR_RESOLVED_CACHE_ROWS",
        int,
        20_000_000,
        "resolved equality-delete positions kept across queries of one process (8 bytes each), "
        "least recently used out first; a branch whose files could lose more rows than this "
        "is joined, not resolved",
    ),
    Setting(
        "scan_barrier",
        "MOR_SCAN_BARRIER",
        bool,
        True,
        "a table scan read as several Parquet groups or delete-file branches is a barrier to "
        "Spark's optimizer, as a data source scan is: the query's semi and anti joins (IN and "
        "EXISTS subqueries) are not copied into each group (a shuffle each); Spark's own filter "
        "pushdown stops there too (mor pushes the query's filters into the reads itself)",
    ),
    Setting(
        "file_lists",
        "MOR_FILE_LISTS",
        bool,
        True,
        "Spark reads each scan's files as one Parquet relation through a file list mor writes "
        "(no listing, no request per file, a plan whose size does not grow with the files); "
        "off: by path, in groups of at most Spark's listing threshold, unioned",
    ),
    Setting(
        "file_list_dir",
        "MOR_FILE_LIST_DIR",
        str,
        "",
        "where file lists are written; Spark's driver must read it (a Spark Connect server on "
        "another machine: a shared folder); empty: mor-<uid>/file-lists in the temporary folder",
    ),
    Setting(
        "file_list_bytes",
        "MOR_FILE_LIST_BYTES",
        int,
        2 << 30,
        "file lists kept in file_list_dir for reuse, least recently used removed beyond this "
        "many bytes (about 150 bytes a file; none used in the last hour)",
    ),
    Setting(
        "s3a_paths",
        "MOR_S3A_PATHS",
        bool,
        True,
        "files recorded as s3:// or s3n:// (what Iceberg's writers write) are read as s3a://, "
        "Hadoop's S3 connector; off where the cluster serves s3:// itself (EMRFS)",
    ),
    Setting(
        "s3a_packages",
        "MOR_S3A_PACKAGES",
        bool,
        True,
        "a Spark session mor starts for a query that reads s3a:// paths gets Hadoop's s3a "
        "connector as spark-submit --packages adds it: hadoop-aws of the Hadoop version Spark "
        "ships (Spark's Ivy fetches it and its AWS SDK bundle from Maven Central once); off "
        "where Spark has the connector or cannot reach a Maven repository",
        session=True,
    ),
    Setting(
        "position_bitmap_bytes",
        "MOR_POSITION_BITMAP_BYTES",
        int,
        4 << 20,
        "position deletes become in-plan bitmaps when these take at most this many bytes "
        "(one bit per row of each data file with deletes); 0 always uses the anti-join",
    ),
    Setting(
        "position_driver_rows",
        "MOR_POSITION_DRIVER_ROWS",
        int,
        2_000_000,
        "... and the position delete files hold at most this many rows (read on the driver)",
    ),
    Setting(
        "master",
        "MOR_SPARK_MASTER",
        str,
        "local[*]",
        "the master of a Spark session mor starts",
        session=True,
    ),
    Setting(
        "shuffle_partitions",
        "MOR_SHUFFLE_PARTITIONS",
        int,
        8,
        "spark.sql.shuffle.partitions of a session mor starts",
        minimum=1,
        session=True,
    ),
    Setting(
        "driver_memory",
        "MOR_DRIVER_MEMORY",
        str,
        "4g",
        "spark.driver.memory of a session mor starts (4g, 2048m)",
        session=True,
    ),
    Setting(
        "timezone",
        "MOR_TIMEZONE",
        str,
        "UTC",
        "spark.sql.session.timeZone of a session mor starts",
        session=True,
    ),
    Setting(
        "spark_log_level",
        "MOR_SPARK_LOG_LEVEL",
        str,
        "FATAL",
        "the log level of a session mor starts",
        session=True,
    ),
)
BY_NAME = {s.name: s for s in SETTINGS}
_LOG_LEVELS = ("ALL", "DEBUG", "ERROR", "FATAL", "INFO", "OFF", "TRACE", "WARN")


def _parse(setting: Setting, value: Any, origin: str | None, label: str | None = None) -> Any:
    """A setting's value checked and typed. The error names `origin` (a file, `--set`) and the
    setting (`label`: its environment variable when it came from there)."""
    what = f"{origin + ': ' if origin else ''}{label or setting.name}"
    if setting.kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower() if isinstance(value, (str, int)) else None
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise ConfigError(f"{what} must be true or false, got {value!r}")
    if setting.kind is int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{what} must be an integer, got {value!r}")
        try:
            n = int(value)
        except ValueError:
            raise ConfigError(f"{what} must be an integer, got {value!r}") from None
        if n < setting.minimum:
            raise ConfigError(f"{what} must be at least {setting.minimum}, got {n}")
        return n
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{what} must be a non-empty string, got {value!r}")
    value = value.strip()
    if setting.name == "driver_memory" and not re.fullmatch(r"\d+[kmgtKMGT]?", value):
        raise ConfigError(f"{what} must be a size like 4g or 2048m, got {value!r}")
    if setting.name == "spark_log_level" and value.upper() not in _LOG_LEVELS:
        raise ConfigError(f"{what} must be one of {', '.join(_LOG_LEVELS)}, got {value!r}")
    return value


def unknown_setting(name: str, origin: str) -> ConfigError:
    close = difflib.get_close_matches(name.lower().removeprefix("mor_"), BY_NAME, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(BY_NAME)})"
    return ConfigError(f"{origin}: unknown setting {name!r}{hint}")


@dataclass(frozen=True)
class Settings:
    """mor's tuning settings, typed. Each value comes from, lowest first: its default, the
    config file, its environment variable (`MOR_*`), per-call overrides (`settings={...}` of
    the API, `--set NAME=VALUE` of the CLI). `sources` says where each value came from."""

    planning_threads: int = 8
    manifest_cache_entries: int = 500_000
    position_cache_rows: int = 10_000_000
    io_threads: int = 16
    broadcast_rows: int = 20_000_000
    broadcast_bytes: int = 0
    delete_cache_bytes: int = 256 << 20
    resolve_equality_deletes: bool = True
    resolved_cache_rows: int = 20_000_000
    scan_barrier: bool = True
    file_lists: bool = True
    file_list_dir: str = ""
    file_list_bytes: int = 2 << 30
    s3a_paths: bool = True
    s3a_packages: bool = True
    position_bitmap_bytes: int = 4 << 20
    position_driver_rows: int = 2_000_000
    master: str = "local[*]"
    shuffle_partitions: int = 8
    driver_memory: str = "4g"
    timezone: str = "UTC"
    spark_log_level: str = "FATAL"
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def load(cls, overrides: Settings | Mapping[str, Any] | None = None) -> Settings:
        """Defaults, then the config file, then the environment, then `overrides`."""
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        config = user_config()
        for s in SETTINGS:
            if s.name in config.settings:
                values[s.name] = config.settings[s.name]
                sources[s.name] = f"config file {config.path}"
            raw = os.environ.get(s.env)
            if raw is not None and raw.strip():
                values[s.name] = _parse(s, raw, None, s.env)
                sources[s.name] = f"${s.env}"
        for s in SETTINGS:
            sources.setdefault(s.name, "default")
        return cls(**values, sources=sources).overridden(overrides)

    def overridden(
        self, overrides: Settings | Mapping[str, Any] | None, origin: str = "settings"
    ) -> Settings:
        """These settings with `overrides` on top: a mapping of setting names to values, or a
        Settings (its values that are not defaults)."""
        if overrides is None:
            return self
        if isinstance(overrides, Settings):
            overrides = {
                s.name: getattr(overrides, s.name)
                for s in SETTINGS
                if overrides.source(s.name) != "default"
            }
        if not isinstance(overrides, Mapping):
            raise ConfigError(
                "settings must map setting names to values (a dict), not "
                + type(overrides).__name__
            )
        values = {}
        for name, value in overrides.items():
            if name not in BY_NAME:
                raise unknown_setting(str(name), origin)
            values[name] = _parse(BY_NAME[name], value, origin)
        if not values:
            return self
        sources = {**self.sources, **dict.fromkeys(values, origin)}
        return replace(self, **values, sources=sources)

    def source(self, name: str) -> str:
        return self.sources.get(name, "default")


_ACTIVE: ContextVar[Settings | None] = ContextVar("mor_settings", default=None)


def current() -> Settings:
    """The settings of the call in progress (see `applied`), else loaded anew."""
    active = _ACTIVE.get()
    return active if active is not None else Settings.load()


@contextmanager
def applied(
    overrides: Settings | Mapping[str, Any] | None, origin: str = "settings"
) -> Iterator[Settings]:
    """The settings in effect (those of an enclosing call, else loaded anew) with `overrides`
    on top, made current for the calls inside."""
    settings = current().overridden(overrides, origin)
    token = _ACTIVE.set(settings)
    try:
        yield settings
    finally:
        _ACTIVE.reset(token)


# --- the user's config file ---------------------------------------------------------------

CONFIG_KEYS = {
    "warehouse": "the embedded catalog's warehouse folder (relative: to the config file)",
    "catalog": "a pyiceberg catalog name to read from instead of the embedded one",
    "spark": "a table of Spark settings for sessions mor starts, as --conf KEY=VALUE",
    "path-map": "a table of recorded path prefix = actual prefix, as --path-map",
    "file-io": "a table of pyiceberg FileIO properties (s3.endpoint, ...), as --io KEY=VALUE",
    "catalogs": "tables [catalogs.NAME] of pyiceberg catalog properties (type, uri, ...), "
    "over ~/.pyiceberg.yaml's for the same name",
    **{s.name: s.doc for s in SETTINGS},
}


@dataclass(frozen=True)
class UserConfig:
    """Settings from the config file; command-line flags, API arguments and environment
    variables override each of them."""

    path: str
    exists: bool
    warehouse: str | None = None
    catalog: str | None = None
    spark: dict[str, str] = field(default_factory=dict)
    path_map: dict[str, str] = field(default_factory=dict)
    file_io: dict[str, str] = field(default_factory=dict)
    catalogs: dict[str, dict[str, str]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # tuning settings, checked


def config_path() -> str:
    """$MOR_CONFIG, else $XDG_CONFIG_HOME/mor/config.toml, else ~/.config/mor/config.toml."""
    explicit = os.environ.get("MOR_CONFIG")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "mor", "config.toml")


def _table_of_strings(path: str, key: str, value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ConfigError(f'{path}: `{key}` must be a table of KEY = "value" entries')
    out = {}
    for k, v in value.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        if not isinstance(v, (str, int, float)):
            raise ConfigError(f"{path}: `{key}.{k}` must be a string or a number")
        out[str(k)] = str(v)
    return out


def _catalogs(path: str, value: object) -> dict[str, dict[str, str]]:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: `catalogs` must hold tables [catalogs.NAME]")
    return {str(k): _table_of_strings(path, f"catalogs.{k}", v) for k, v in value.items()}


def user_config() -> UserConfig:
    """The config file, read anew each time (it is small); a file named by $MOR_CONFIG must
    exist. A malformed file or an unknown key is a one-line ConfigError naming the file."""
    path = config_path()
    if not os.path.isfile(path):
        if os.environ.get("MOR_CONFIG"):
            raise ConfigError(f"MOR_CONFIG names {path}, which does not exist")
        return UserConfig(path=path, exists=False)
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: {e}") from None
    unknown = sorted(set(raw) - set(CONFIG_KEYS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], CONFIG_KEYS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(CONFIG_KEYS)}"
        raise ConfigError(f"{path}: unknown setting {unknown[0]!r} ({hint})")
    settings = {k: _parse(BY_NAME[k], v, path) for k, v in raw.items() if k in BY_NAME}
    for key in ("warehouse", "catalog"):
        if key in raw and not isinstance(raw[key], str):
            raise ConfigError(f"{path}: `{key}` must be a string")
    warehouse = raw.get("warehouse")
    if warehouse:
        warehouse = os.path.join(os.path.dirname(path), os.path.expanduser(warehouse))
    return UserConfig(
        path=path,
        exists=True,
        warehouse=os.path.abspath(warehouse) if warehouse else None,
        catalog=raw.get("catalog") or None,
        spark=_table_of_strings(path, "spark", raw.get("spark", {})),
        path_map=_table_of_strings(path, "path-map", raw.get("path-map", {})),
        file_io=_table_of_strings(path, "file-io", raw.get("file-io", {})),
        catalogs=_catalogs(path, raw.get("catalogs", {})),
        settings=settings,
    )
