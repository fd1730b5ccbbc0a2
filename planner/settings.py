"""Settings read from the environment (listed in docs/configuration.md)."""

from __future__ import annotations

import os

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
