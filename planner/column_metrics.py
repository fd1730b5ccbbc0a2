"""File pruning by column metrics, compiled once per filter into plain closures.

The answers are those of pyiceberg's `_InclusiveMetricsEvaluator` (with empty files kept),
which mor used before: a file is dropped only when its metrics prove that no row can match.
One difference, on the safe side: NaN counts are read for float and double columns only (a
NaN count recorded for another type is not a fact about it), so such a file is kept.
pyiceberg builds a visitor per file (five metric maps read, a dispatch per predicate); here the
bound filter becomes nested closures once, and each file's test reads only the metric maps
its predicates name. Predicates without a closure here (starts-with, NaN tests) make `compile`
return None, and the caller keeps pyiceberg's evaluator for the whole filter.
tests/test_column_metrics.py holds the two to the same answers on random metrics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    BoundEqualTo,
    BoundGreaterThan,
    BoundGreaterThanOrEqual,
    BoundIn,
    BoundIsNull,
    BoundLessThan,
    BoundLessThanOrEqual,
    BoundNotEqualTo,
    BoundNotIn,
    BoundNotNull,
    Or,
)
from pyiceberg.expressions.visitors import IN_PREDICATE_LIMIT, bind, rewrite_not
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, FloatType, PrimitiveType

from mor.planner.manifests import EntryFile

Test = Callable[[Any], bool]  # a manifest entry's file -> rows might match


def compile_inclusive(schema: Schema, expr: BooleanExpression) -> Test | None:
    """A test of a data file's metrics against `expr`, or None when some predicate has no
    closure here. Raises as pyiceberg's evaluator does when `expr` does not bind."""
    test = _compile(bind(schema, rewrite_not(expr), case_sensitive=True))
    if test is None:
        return None

    def evaluate(f: Any) -> bool:
        if f.record_count < 0:  # an imported file whose count is unknown
            return True
        # an entry's metric blob unpacked once for all the predicates, not once per map read
        return test(f.metrics_view() if isinstance(f, EntryFile) else f)

    return evaluate


def _nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _only(f: Any, counts: str, field_id: int) -> bool:
    """Every value of the field is NULL (counts 'null_value_counts') or NaN ('nan_value_counts'),
    as pyiceberg tests it (both counts known and non-zero, and equal)."""
    n = (getattr(f, counts) or {}).get(field_id)
    if not n:
        return False
    v = (f.value_counts or {}).get(field_id)
    return bool(v) and n == v


def _nulls_or_nans_only(f: Any, field_id: int, floats: bool) -> bool:
    """pyiceberg tests NaN counts for every type; only float and double columns have NaNs,
    and not testing them elsewhere can only keep a file, never drop one."""
    return _only(f, "null_value_counts", field_id) or (
        floats and _only(f, "nan_value_counts", field_id)
    )


def _bound(f: Any, which: str, field_id: int, ftype: Any) -> Any:
    raw = (getattr(f, which) or {}).get(field_id)
    if raw is None:
        return None
    impl = _FROM_BYTES.get(type(ftype))
    if impl is None:  # pyiceberg's conversion for this type, found once (not per file)
        impl = _FROM_BYTES[type(ftype)] = from_bytes.dispatch(type(ftype))
    return impl(ftype, raw)


_FROM_BYTES: dict[type, Callable[[Any, bytes], Any]] = {}


def compile_tree(e: BooleanExpression, leaf: Callable[[Any], Test | None]) -> Test | None:
    """Closures for a bound filter's constants, ANDs and ORs, over `leaf(e)`'s closure for
    anything else (None where `leaf` has none, and then for the whole filter). Shared by the
    column-metric and the partition-value filters (planner/partition_values.py)."""
    if isinstance(e, AlwaysTrue):
        return lambda _f: True
    if isinstance(e, AlwaysFalse):
        return lambda _f: False
    if isinstance(e, (And, Or)):
        left, right = compile_tree(e.left, leaf), compile_tree(e.right, leaf)
        if left is None or right is None:
            return None
        if isinstance(e, And):
            return lambda f: left(f) and right(f)
        return lambda f: left(f) or right(f)
    return leaf(e)


def _compile(e: BooleanExpression) -> Test | None:
    return compile_tree(e, _predicate)


def _predicate(e: BooleanExpression) -> Test | None:
    if isinstance(e, (BoundNotEqualTo, BoundNotIn)):
        return lambda _f: True  # bounds cannot rule these out
    if not isinstance(
        e,
        (
            BoundIsNull,
            BoundNotNull,
            BoundLessThan,
            BoundLessThanOrEqual,
            BoundGreaterThan,
            BoundGreaterThanOrEqual,
            BoundEqualTo,
            BoundIn,
        ),
    ):
        return None
    field = e.term.ref().field
    fid, ftype = field.field_id, field.field_type
    if isinstance(e, BoundIsNull):
        return lambda f: (f.null_value_counts or {}).get(fid) != 0
    if isinstance(e, BoundNotNull):
        return lambda f: not _only(f, "null_value_counts", fid)
    if not isinstance(ftype, PrimitiveType):
        return None  # pyiceberg raises here: leave it to say so
    floats = isinstance(ftype, (FloatType, DoubleType))
    if isinstance(e, BoundIn):
        return _in(fid, ftype, set(e.value_set), floats)
    lit = e.literal.value
    # the bounds first (they rule most files out), then the counts (as pyiceberg orders them:
    # a NaN bound is no bound, a column of only NULLs or NaNs matches nothing)
    if isinstance(e, (BoundLessThan, BoundLessThanOrEqual)):
        strict = isinstance(e, BoundLessThan)

        def below(f: Any) -> bool:
            lo = _bound(f, "lower_bounds", fid, ftype)
            if lo is not None and not _nan(lo) and (lo >= lit if strict else lo > lit):
                return False
            return not _nulls_or_nans_only(f, fid, floats)

        return below
    if isinstance(e, (BoundGreaterThan, BoundGreaterThanOrEqual)):
        strict = isinstance(e, BoundGreaterThan)

        def above(f: Any) -> bool:
            hi = _bound(f, "upper_bounds", fid, ftype)
            if hi is not None and not _nan(hi) and (hi <= lit if strict else hi < lit):
                return False
            return not _nulls_or_nans_only(f, fid, floats)

        return above

    def equal(f: Any) -> bool:
        if _nulls_or_nans_only(f, fid, floats):
            return False
        lo = _bound(f, "lower_bounds", fid, ftype)
        if lo is not None:
            if _nan(lo):
                return True
            if lo > lit:
                return False
        hi = _bound(f, "upper_bounds", fid, ftype)
        if hi is not None:
            if _nan(hi):
                return True
            if hi < lit:
                return False
        return True

    return equal


def _in(fid: int, ftype: Any, values: set[Any], floats: bool) -> Test:
    def inside(f: Any) -> bool:
        if _nulls_or_nans_only(f, fid, floats):
            return False
        if len(values) > IN_PREDICATE_LIMIT:
            return True
        left = values
        lo = _bound(f, "lower_bounds", fid, ftype)
        if lo is not None:
            if _nan(lo):
                return True
            left = {v for v in left if lo <= v}
            if not left:
                return False
        hi = _bound(f, "upper_bounds", fid, ftype)
        if hi is not None:
            if _nan(hi):
                return True
            left = {v for v in left if hi >= v}
            if not left:
                return False
        return True

    return inside
