"""Physical layer: logical plan -> PySpark DataFrame. The only layer that imports pyspark.

Names are loaded on first use, so `physical.describe` (EXPLAIN PHYSICAL) needs no pyspark.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Compiler": "mor.physical.compile",
    "to_dataframe": "mor.physical.compile",
    "local_session": "mor.physical.session",
    "prepare_session": "mor.physical.session",
    "remote_session": "mor.physical.session",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(name)


__all__ = list(_EXPORTS)
