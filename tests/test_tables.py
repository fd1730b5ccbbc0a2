"""The small per-file tables a scan joins (physical/scan/tables.py): the bitmap table carries each
data file's words, row count and recorded path exactly, inline (a local relation Spark broadcasts
without a job, its words one query parameter) or through createDataFrame beyond BITMAP_SMALL."""

from __future__ import annotations

from typing import Any

import pytest

from mor.physical.scan import tables
from mor.rules.physical.reading import FileKey

pytestmark = [pytest.mark.check]


def _rows(n: int) -> list[tuple[Any, str, int, str]]:
    """(key, words as text, row count, path): empty bitmaps, one word, a word with bit 63 set
    (negative as a signed long), long texts, paths with quotes, commas and non-ASCII."""
    out = []
    for i in range(n):
        if i % 5 == 0:
            text = ""
        elif i % 5 == 1:
            text = str(1 << (i % 63))
        elif i % 5 == 2:
            text = f"{-(1 << 63)},0,{(1 << 63) - 1}"
        else:
            text = ",".join(str((i * 7919 + w) * (-1) ** w) for w in range(i % 97 + 1))
        out.append((i * 3 + 1, text, 1000 + i, f"s3://b/d/x='{i}',ü/f-{i}.parquet"))
    return out


def _want(rows: list[tuple[Any, str, int, str]]) -> list[tuple[Any, ...]]:
    return [(k, [int(w) for w in t.split(",")] if t else [], c, p) for k, t, c, p in rows]


@pytest.mark.parametrize("n", [1, tables.BITMAP_SMALL, tables.BITMAP_SMALL + 1])
def test_bitmap_table_rows_are_exact_inline_or_not(
    spark: Any, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    from mor.physical.spark.session import is_connect

    seen: list[Any] = []
    values = tables.values

    def counted(spark: Any, names: Any, rows: Any, args: Any = None) -> Any:
        seen.append(args)
        return values(spark, names, rows, args)

    monkeypatch.setattr(tables, "values", counted)
    rows = _rows(n)
    df = tables.bitmap_table(spark, FileKey("file_id"), rows)
    got = sorted((r[0], list(r[1]), r[2], r[3]) for r in df.collect())
    assert got == _want(rows)
    inline = n <= tables.BITMAP_SMALL and not is_connect(spark)
    assert len(seen) == (1 if inline else 0)
    if inline:
        # every file's words in one parameter (one py4j call, not one per file), and Spark
        # holds the table as a local relation: its broadcast runs no job
        # (no parameter at all when every bitmap is empty)
        any_words = any(text for _, text, _, _ in rows)
        assert (list(seen[0]) if seen[0] is not None else None) == (["b"] if any_words else None)
        plan = df._jdf.queryExecution().optimizedPlan().getClass().getSimpleName()
        assert plan == "LocalRelation"
