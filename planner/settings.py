"""Settings read from the environment and the user's config file (docs/configuration.md).

The machinery (`Setting`, `declare`, the typed `Settings` object, `current`/`applied`, the
config file) and the settings planner/ reads; the physical rules and physical/ declare theirs
beside the code they steer (rules/physical/rule_settings.py,
physical/spark/spark_settings.py): a setting is declared by the lowest layer that reads it.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from mor.planner.errors import ConfigError, InternalError

# --- tuning settings: declared by the layer each steers, read as one typed object ---------


@dataclass(frozen=True)
class Setting:
    """One tuning setting: its name (API `settings={...}`, CLI `--set`, config file), its
    environment variable, type, default and what it does (docs/configuration.md). `check`:
    for a string, the error a value gets (None: the value is good). `layer`: the module that
    declared it (`declare`)."""

    name: str
    env: str
    kind: type
    default: Any
    doc: str
    minimum: int = 0
    session: bool = False  # applies only to a Spark session mor starts
    check: Callable[[str], str | None] | None = field(default=None, compare=False)
    layer: str = ""


# every setting declared, in the order declared: each layer declares the settings it reads
# (planner here, the physical rules in rules/physical/rule_settings.py, reading files and starting
# sessions in physical/spark/spark_settings.py), as Spark's modules declare their SQLConf entries;
# mor/__init__.py names the declaring modules (`declared_in`), imported when a setting is first
# looked up, so no setting is missing once mor is imported and `import mor` stays light (the
# `mor` command's first step: mor/launch.py)
_DECLARED: dict[str, Setting] = {}
_PENDING: list[str] = []  # modules that declare settings, not imported yet


def declared_in(*modules: str) -> None:
    """Name modules that declare settings: imported before any setting is looked up."""
    _PENDING.extend(m for m in modules if m not in _PENDING)


def _settings() -> dict[str, Setting]:
    """Every setting declared, the named modules imported first."""
    while _PENDING:
        import importlib

        importlib.import_module(_PENDING.pop(0))  # taken first: its imports may look one up
    return _DECLARED


def declare(layer: str, *settings: Setting) -> tuple[Setting, ...]:
    """Declare the settings of `layer` (a module's name); a name is declared once (a module
    imported again declares the same settings: they replace themselves)."""
    out = []
    for setting in settings:
        held = _DECLARED.get(setting.name)
        if held is not None and held.layer != layer:
            raise InternalError(f"setting {setting.name!r} declared by {layer} and by {held.layer}")
        _DECLARED[setting.name] = replace(setting, layer=layer)
        out.append(_DECLARED[setting.name])
    return tuple(out)


_LAYERS = ("mor.planner.", "mor.rules.", "mor.physical.")


def _rank(setting: Setting) -> int:
    return next((i for i, p in enumerate(_LAYERS) if setting.layer.startswith(p)), len(_LAYERS))


def declared() -> tuple[Setting, ...]:
    """Every setting: planner's first, then the physical rules', then physical/'s, each
    layer's in the order it declared them."""
    return tuple(sorted(_settings().values(), key=_rank))


PLANNING = declare(
    __name__,
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
        "manifest_disk_cache_mb",
        "MOR_MANIFEST_DISK_CACHE_MB",
        int,
        1024,
        "decoded manifests kept on this machine's disk for later processes, in MiB "
        "($MOR_CACHE_DIR, else $XDG_CACHE_HOME/mor, else ~/.cache/mor; least recently used "
        "dropped beyond it); 0: off",
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
        "timezone",
        "MOR_TIMEZONE",
        str,
        "UTC",
        "spark.sql.session.timeZone of a session mor starts",
        session=True,
    ),
    Setting(
        "s3a_paths",
        "MOR_S3A_PATHS",
        bool,
        True,
        "files recorded as s3:// or s3n:// (what Iceberg's writers write) are read as s3a://, "
        "Hadoop's S3 connector; off where the cluster serves s3:// itself (EMRFS)",
    ),
)


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
    wrong = setting.check(value) if setting.check is not None else None
    if wrong:
        raise ConfigError(f"{what} must be {wrong}, got {value!r}")
    return value


def unknown_setting(name: str, origin: str) -> ConfigError:
    names = list(_settings())
    close = difflib.get_close_matches(name.lower().removeprefix("mor_"), names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(names)})"
    return ConfigError(f"{origin}: unknown setting {name!r}{hint}")


class Settings:
    """mor's tuning settings, typed: `settings.io_threads`. Each value comes from, lowest
    first: its default, the config file, its environment variable (`MOR_*`), per-call
    overrides (`settings={...}` of the API, `--set NAME=VALUE` of the CLI). `sources` says
    where each value came from. Immutable; equal when every value is (whatever the sources).
    `Settings(io_threads=4)`: these values over the defaults (checked as `--set` is)."""

    __slots__ = ("_values", "sources")

    def __init__(self, *, sources: Mapping[str, str] | None = None, **values: Any) -> None:
        for name in values:
            if name not in _settings():
                raise unknown_setting(name, "Settings")
        typed = {n: _parse(_settings()[n], v, "Settings") for n, v in values.items()}
        object.__setattr__(self, "_values", typed)
        object.__setattr__(self, "sources", dict(sources or {}))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        setting = _settings().get(name)
        if setting is None:
            raise AttributeError(f"no setting {name!r}")
        return setting.default

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Settings are immutable: use overridden()")

    def values(self) -> dict[str, Any]:
        """Every setting's value, by name, in the order declared."""
        return {s.name: getattr(self, s.name) for s in _settings().values()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and self.values() == other.values()

    def __hash__(self) -> int:
        return hash(tuple(self.values().items()))

    def __repr__(self) -> str:
        changed = {n: v for n, v in self.values().items() if v != _settings()[n].default}
        return f"Settings({', '.join(f'{n}={v!r}' for n, v in changed.items())})"

    @classmethod
    def load(cls, overrides: Settings | Mapping[str, Any] | None = None) -> Settings:
        """Defaults, then the config file, then the environment, then `overrides`."""
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        config = user_config()
        for s in declared():
            if s.name in config.settings:
                values[s.name] = config.settings[s.name]
                sources[s.name] = f"config file {config.path}"
            raw = os.environ.get(s.env)
            if raw is not None and raw.strip():
                values[s.name] = _parse(s, raw, None, s.env)
                sources[s.name] = f"${s.env}"
        for s in declared():
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
                for s in declared()
                if overrides.source(s.name) != "default"
            }
        if not isinstance(overrides, Mapping):
            raise ConfigError(
                "settings must map setting names to values (a dict), not "
                + type(overrides).__name__
            )
        values = {}
        for name, value in overrides.items():
            if name not in _settings():
                raise unknown_setting(str(name), origin)
            values[name] = _parse(_settings()[name], value, origin)
        if not values:
            return self
        sources = {**self.sources, **dict.fromkeys(values, origin)}
        return Settings(**{**self._values, **values}, sources=sources)

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

_FILE_KEYS = {
    "warehouse": "the embedded catalog's warehouse folder (relative: to the config file)",
    "catalog": "a pyiceberg catalog name to read from instead of the embedded one",
    "spark": "a table of Spark settings for sessions mor starts, as --conf KEY=VALUE",
    "path-map": "a table of recorded path prefix = actual prefix, as --path-map",
    "file-io": "a table of pyiceberg FileIO properties (s3.endpoint, ...), as --io KEY=VALUE",
    "catalogs": "tables [catalogs.NAME] of pyiceberg catalog properties (type, uri, ...), "
    "over ~/.pyiceberg.yaml's for the same name",
}


def config_keys() -> dict[str, str]:
    """The keys a config file may hold: its own, then every setting's name."""
    return {**_FILE_KEYS, **{s.name: s.doc for s in declared()}}


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
    keys = config_keys()
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        close = difflib.get_close_matches(unknown[0], keys, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(keys)}"
        raise ConfigError(f"{path}: unknown setting {unknown[0]!r} ({hint})")
    settings = {k: _parse(_settings()[k], v, path) for k, v in raw.items() if k in _settings()}
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


# Where the user's configuration puts the embedded catalog, its tables and their files (the
# API, the CLI and the CLI's early session read them alike; no planner import needed)


def warehouse_and_source(warehouse: str | None = None) -> tuple[str, str]:
    """The embedded catalog's warehouse and where it comes from: the argument (--warehouse),
    else $MOR_WAREHOUSE, else `warehouse` in the config file, else ./warehouse."""
    if warehouse:
        return os.path.abspath(warehouse), "--warehouse / warehouse="
    if os.environ.get("MOR_WAREHOUSE"):
        return os.path.abspath(os.environ["MOR_WAREHOUSE"]), "$MOR_WAREHOUSE"
    config = user_config()
    if config.warehouse:
        return config.warehouse, f"config file {config.path}"
    return os.path.abspath("warehouse"), "default ./warehouse"


def warehouse_dir(warehouse: str | None = None) -> str:
    return warehouse_and_source(warehouse)[0]


def default_catalog_name(warehouse: str | None = None) -> str | None:
    """The config file's `catalog`, which applies only when no warehouse is named by argument
    or $MOR_WAREHOUSE (the config file's own warehouse does not override it)."""
    if warehouse or os.environ.get("MOR_WAREHOUSE"):
        return None
    return user_config().catalog


def effective_path_map(path_map: dict[str, str] | None) -> dict[str, str]:
    """The config file's `path-map`, with the caller's entries winning for the same prefix."""
    return {**user_config().path_map, **(path_map or {})}
