"""Settings read from the environment and the user's config file (docs/configuration.md)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from mor.planner.errors import ConfigError


def env_int(name: str, default: int, minimum: int = 0) -> int:
    """An integer setting; a malformed or too small value is a one-line error, not a default."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    try:
        n = int(value)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None
    if n < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {n}")
    return n


# --- the user's config file ---------------------------------------------------------------

CONFIG_KEYS = {
    "warehouse": "the embedded catalog's warehouse folder (relative: to the config file)",
    "catalog": "a pyiceberg catalog name to read from instead of the embedded one",
    "master": "the Spark master of sessions mor starts",
    "spark": "a table of Spark settings for sessions mor starts, as --conf KEY=VALUE",
    "path-map": "a table of recorded path prefix = actual prefix, as --path-map",
}


@dataclass(frozen=True)
class UserConfig:
    """Settings from the config file; command-line flags, API arguments and environment
    variables override each of them."""

    path: str
    exists: bool
    warehouse: str | None = None
    catalog: str | None = None
    master: str | None = None
    spark: dict[str, str] = field(default_factory=dict)
    path_map: dict[str, str] = field(default_factory=dict)


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
        raise ConfigError(
            f"{path}: unknown setting {unknown[0]!r} (known: {', '.join(CONFIG_KEYS)})"
        )
    for key in ("warehouse", "catalog", "master"):
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
        master=raw.get("master") or None,
        spark=_table_of_strings(path, "spark", raw.get("spark", {})),
        path_map=_table_of_strings(path, "path-map", raw.get("path-map", {})),
    )
