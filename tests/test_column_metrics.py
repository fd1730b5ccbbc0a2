"""Data files pruned by their column metrics (planner/column_metrics.py): the same answer as
pyiceberg's inclusive metrics evaluator for every file and filter, on random metrics; and by
their partition values (planner/partition_values.py): the same answer as pyiceberg's
expression evaluator, on random partition tuples. No Spark."""

from __future__ import annotations

import math
import struct
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.expressions import (
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNaN,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    NotEqualTo,
    NotIn,
    NotNaN,
    NotNull,
    Or,
    StartsWith,
)
from pyiceberg.expressions.visitors import _InclusiveMetricsEvaluator, expression_evaluator
from pyiceberg.manifest import DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType

from mor.planner.column_metrics import compile_inclusive
from mor.planner.manifests import EntryFile
from mor.planner.partition_values import compile_exact

# the fast tier too (`make check`: tests/legs.py)
pytestmark = [pytest.mark.check]

SCHEMA = Schema(
    NestedField(1, "l", LongType(), required=False),
    NestedField(2, "d", DoubleType(), required=False),
    NestedField(3, "s", StringType(), required=False),
    NestedField(4, "i", IntegerType(), required=False),
)
ENCODE = {
    1: lambda v: struct.pack("<q", v),
    2: lambda v: struct.pack("<d", v),
    3: lambda v: v.encode(),
    4: lambda v: struct.pack("<i", v),
}
VALUES = {
    1: st.integers(-5, 5),
    2: st.sampled_from([-1.5, 0.0, 2.0, 3.25]),
    3: st.sampled_from(["", "a", "ab", "b", "zz"]),
    4: st.integers(-5, 5),
}
BOUND_VALUES = {**VALUES, 2: st.sampled_from([-1.5, 0.0, 2.0, 3.25, math.nan])}
NAMES = {1: "l", 2: "d", 3: "s", 4: "i"}


@st.composite
def files(draw: Any) -> Any:
    metrics: dict[str, dict[int, Any]] = {
        k: {}
        for k in (
            "value_counts",
            "null_value_counts",
            "nan_value_counts",
            "lower_bounds",
            "upper_bounds",
        )
    }
    for fid in NAMES:
        if draw(st.booleans()):
            metrics["value_counts"][fid] = draw(st.integers(0, 4))
        if draw(st.booleans()):
            metrics["null_value_counts"][fid] = draw(st.integers(0, 4))
        if fid == 2 and draw(st.booleans()):
            metrics["nan_value_counts"][fid] = draw(st.integers(0, 4))
        if draw(st.booleans()):
            a, b = sorted(
                [draw(BOUND_VALUES[fid]), draw(BOUND_VALUES[fid])],
                key=lambda v: (isinstance(v, float) and math.isnan(v), v),
            )
            metrics["lower_bounds"][fid] = ENCODE[fid](a)
            metrics["upper_bounds"][fid] = ENCODE[fid](b)
            if draw(st.booleans()):  # one bound only
                del metrics[draw(st.sampled_from(["lower_bounds", "upper_bounds"]))][fid]
    none = draw(st.sets(st.sampled_from(sorted(metrics))))  # maps the entry does not record
    return SimpleNamespace(
        record_count=draw(st.sampled_from([-1, 0, 3])),
        **{k: (None if k in none else v) for k, v in metrics.items()},
    )


def _predicate(fid: int, draw: Any, with_starts: bool) -> BooleanExpression:
    name, value = NAMES[fid], draw(VALUES[fid])
    kinds: list[Any] = [
        LessThan,
        LessThanOrEqual,
        GreaterThan,
        GreaterThanOrEqual,
        EqualTo,
        NotEqualTo,
        "in",
        "not_in",
        "is_null",
        "not_null",
    ]
    if with_starts and fid == 3:
        kinds.append("starts")
    kind = draw(st.sampled_from(kinds))
    if kind == "in":
        return In(name, draw(st.sets(VALUES[fid], min_size=1, max_size=3)))
    if kind == "not_in":
        return NotIn(name, draw(st.sets(VALUES[fid], min_size=1, max_size=3)))
    if kind == "is_null":
        return IsNull(name)
    if kind == "not_null":
        return NotNull(name)
    if kind == "starts":
        return StartsWith(name, value)
    return kind(name, value)


@st.composite
def filters(draw: Any, depth: int = 2, with_starts: bool = False) -> BooleanExpression:
    if depth == 0 or draw(st.booleans()):
        return _predicate(draw(st.sampled_from(sorted(NAMES))), draw, with_starts)
    left = draw(filters(depth - 1, with_starts))
    right = draw(filters(depth - 1, with_starts))
    op = draw(st.sampled_from(["and", "or", "not"]))
    return And(left, right) if op == "and" else Or(left, right) if op == "or" else Not(left)


@settings(max_examples=400, deadline=None)
@given(expr=filters(), fs=st.lists(files(), min_size=1, max_size=6))
def test_same_answers_as_pyiceberg(expr: BooleanExpression, fs: list[Any]) -> None:
    mine = compile_inclusive(SCHEMA, expr)
    assert mine is not None, expr
    theirs = _InclusiveMetricsEvaluator(SCHEMA, expr, case_sensitive=True, include_empty_files=True)
    for f in fs:
        assert mine(f) == theirs.eval(f), (expr, f)
        # as planning holds it: a manifest entry's file, its metrics packed in one blob
        assert mine(_entry(f)) == theirs.eval(f), (expr, f)


def _entry(f: Any) -> EntryFile:
    raw = {"file_path": "f.parquet", "file_size_in_bytes": 1, **vars(f)}
    return EntryFile(raw, DataFileContent.DATA, FileFormat.PARQUET, (), 0)


@settings(max_examples=50, deadline=None)
@given(expr=filters(with_starts=True))
def test_what_it_cannot_compile_it_leaves_to_pyiceberg(expr: BooleanExpression) -> None:
    mine = compile_inclusive(SCHEMA, expr)
    assert (mine is None) == ("StartsWith" in repr(expr)), expr


def test_pruning_examples() -> None:
    f = SimpleNamespace(
        record_count=10,
        value_counts={1: 10},
        null_value_counts={1: 0},
        nan_value_counts=None,
        lower_bounds={1: struct.pack("<q", 10)},
        upper_bounds={1: struct.pack("<q", 20)},
    )
    assert not compile_inclusive(SCHEMA, LessThan("l", 10))(f)  # type: ignore[misc]
    assert compile_inclusive(SCHEMA, LessThanOrEqual("l", 10))(f)  # type: ignore[misc]
    assert not compile_inclusive(SCHEMA, In("l", {1, 30}))(f)  # type: ignore[misc]
    assert not compile_inclusive(SCHEMA, IsNull("l"))(f)  # type: ignore[misc]
    assert compile_inclusive(SCHEMA, Or(IsNull("l"), EqualTo("l", 15)))(f)  # type: ignore[misc]


# partition tuples in SCHEMA's field order: each value NULL sometimes, the double NaN too
PARTITION_VALUES = [st.one_of(st.none(), BOUND_VALUES[fid]) for fid in sorted(NAMES)]


@st.composite
def partition_filters(draw: Any, depth: int = 2) -> BooleanExpression:
    """filters(), NaN tests on the double besides (pyiceberg's exact evaluator has them)."""
    if depth > 0 and not draw(st.booleans()):
        left = draw(partition_filters(depth - 1))
        right = draw(partition_filters(depth - 1))
        op = draw(st.sampled_from(["and", "or", "not"]))
        return And(left, right) if op == "and" else Or(left, right) if op == "or" else Not(left)
    if draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from([IsNaN("d"), NotNaN("d")]))
    return _predicate(draw(st.sampled_from(sorted(NAMES))), draw, False)


@settings(max_examples=400, deadline=None)
@given(
    expr=partition_filters(),
    parts=st.lists(st.tuples(*PARTITION_VALUES), min_size=1, max_size=8),
)
def test_partition_values_same_answers_as_pyiceberg(
    expr: BooleanExpression, parts: list[tuple[Any, ...]]
) -> None:
    mine = compile_exact(SCHEMA, expr)
    assert mine is not None, expr
    theirs = expression_evaluator(SCHEMA, expr, True)
    for p in parts:
        assert mine(p) == theirs(p), (expr, p)


def test_partition_values_examples() -> None:
    p = (7, None, "a", 3)
    assert compile_exact(SCHEMA, EqualTo("l", 7))(p)  # type: ignore[misc]
    assert not compile_exact(SCHEMA, EqualTo("l", 8))(p)  # type: ignore[misc]
    assert not compile_exact(SCHEMA, LessThan("d", 1.0))(p)  # type: ignore[misc] - NULL
    assert compile_exact(SCHEMA, IsNull("d"))(p)  # type: ignore[misc]
    assert compile_exact(SCHEMA, Not(In("s", {"b", "zz"})))(p)  # type: ignore[misc]
    assert compile_exact(SCHEMA, StartsWith("s", "a")) is None  # left to pyiceberg
