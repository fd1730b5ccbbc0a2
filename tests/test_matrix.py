"""mor on this Spark (another version, Spark Connect, a cluster) against answers checked on
Spark 3.5 by Iceberg's own reader.

`make test` first runs tests/test_oracle.py on pyspark 3.5, which builds TPC-H (and in `make
soak`, TPC-DS) merge-on-read tables with Iceberg's Java writer, checks mor's results against
Iceberg's Spark reader and exports the tables with Iceberg's answers to .venv/mor-matrix/. The
other legs of the matrix (pyspark 4.x classic and Spark Connect, local-cluster) run the same
queries here, with no Iceberg runtime, and must give the same answers. Without the export this
fails, naming the command that makes it: nothing is skipped.
"""

from __future__ import annotations

import pickle
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from legs import soak_in
from mor import mor_sql

# the legs beyond pyspark 3.5 classic that run this file (markers: pyproject.toml)
pytestmark = [pytest.mark.replay, pytest.mark.cluster, pytest.mark.spark4, pytest.mark.connect]

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / ".venv" / "mor-matrix"


def _load(suite: str, test: str | None = None) -> dict[str, Any]:
    path = MATRIX / suite / "results.pickle"
    if not path.exists():
        if suite == "tpcds":  # make soak's: not in make test's 90 minutes
            how = (
                f"make it with `.venv/bin/python -m tests.oracle.tpc tpcds --sf 0.01 --export "
                f"{MATRIX / suite}` (part of `make soak`)"
            )
        else:
            how = (
                f"the pyspark 3.5 leg makes it (`.venv/bin/python -m pytest "
                f"tests/test_oracle.py -k {test or suite}`, part of `make test`)"
            )
        pytest.fail(f"{path} is missing: {how}")
    with open(path, "rb") as f:
        return pickle.load(f)


def test_v3_answers_equal_those_iceberg_gave_on_spark_3_5(spark: Any) -> None:
    """Deletion vectors (in-plan bitmaps and the anti-join), a column default and row lineage
    on this Spark, against the answers of Iceberg's reader (tests/oracle/v3_faults.py)."""
    from tests.oracle.run import _bag

    exported = _load("v3", "test_deletion_vector_faults_are_refused_by_name")
    assert len(exported["queries"]) >= 5
    for sql, settings, expected in exported["queries"]:
        got = _bag(mor_sql(sql, spark=spark, settings=settings).collect())
        assert got == expected, f"{sql} with {settings}: {got} != {expected}"


# on the clusters in `make soak` (with the 3.5 export soak makes) and on the newest pyspark's
# classic session there too; Spark Connect replays 4.1's in make test
@soak_in("cluster", "4.3")
def test_column_types_answers_equal_those_checked_with_iceberg(spark: Any) -> None:
    """uuid columns (filters, joins, grouping, nested, equality deletes on a uuid key, identity
    and bucket partitions on one) and void, VARIANT (Spark 4) or a refusal for the other types,
    against the answers the harness checked on Spark 3.5 (on 4.x: 4.1, the newest Spark with
    an Iceberg runtime) against a model of the history and Iceberg's reader."""
    import pyspark

    from mor import MorError
    from tests.oracle.column_types import _bag

    line = "3.5" if pyspark.__version__.startswith("3.") else "4.1"
    exported = _load(f"types-{line}", "test_column_types_match_the_spec_and_iceberg_reader")
    assert len(exported["queries"]) >= 20
    for sql, expected in exported["queries"]:
        got = _bag(mor_sql(sql, spark=spark).collect())
        assert got == expected, f"{sql}: {got} != {expected}"
    for sql, refusal in exported.get("refusals", []):
        with pytest.raises(MorError, match=refusal):
            mor_sql(sql, spark=spark).collect()


# TPC-H replayed through Spark Connect in make test, on the clusters and the newest pyspark's
# classic session in `make soak` (since 2026-11-29, for CI's time); TPC-DS (its export is make
# soak's) in `make soak` on every leg
@soak_in("cluster", "4.3")
@pytest.mark.parametrize(
    "suite,count", [("tpch", 22), pytest.param("tpcds", 99, marks=pytest.mark.soak)]
)
def test_tpc_answers_equal_those_iceberg_gave_on_spark_3_5(
    suite: str, count: int, spark: Any
) -> None:
    from tests.oracle.tpc import _bag, bag_difference

    def across_versions(bag: Counter) -> Counter:
        """Decimals to 9 significant digits: Spark 4 types some decimal divisions with another
        scale than Spark 3.5 did (TPC-DS Q36 gives -0.581630489 where 3.5 gave
        -0.5816304890532035515); a version's own arithmetic is not mor's to compare."""
        out: Counter = Counter()
        for row, n in bag.items():
            out[tuple(float(f"{v:.9g}") if isinstance(v, Decimal) else v for v in row)] += n
        return out

    exported = _load(suite)
    assert len(exported["queries"]) == count
    differences = []
    rows = 0
    for n, sql, expected in exported["queries"]:
        got = across_versions(_bag(mor_sql(sql, spark=spark).collect()))
        expected = across_versions(expected)
        rows += sum(expected.values())
        diff = bag_difference(n, got, expected, "")
        if diff is not None:
            differences.append(diff)
    print(f"{suite}: {count} queries, {rows} result rows, {len(differences)} differences")
    assert not differences, "\n".join(differences)
