"""A filter on partition values, compiled once per spec into plain closures over a file's
partition tuple.

The answers are those of pyiceberg's `expression_evaluator` over the same bound expression
(mor used it before): the same comparisons on the same values, NULL and NaN as it treats them
(`<` and its kin false on NULL, `=` and `IN` Python's equality, NOT the negation of its
child's answer). pyiceberg walks the expression with a visitor object per file (about 5 us a
file); here the walk is done once. A term that is not a top-level field of the partition
tuple, or a predicate without a closure here, makes `compile_exact` return None and the caller
keeps pyiceberg's evaluator. tests/test_column_metrics.py holds the two to the same answers
on random partition values and filters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyiceberg.expressions import (
    BooleanExpression,
    BoundEqualTo,
    BoundGreaterThan,
    BoundGreaterThanOrEqual,
    BoundIn,
    BoundIsNaN,
    BoundIsNull,
    BoundLessThan,
    BoundLessThanOrEqual,
    BoundNotEqualTo,
    BoundNotIn,
    BoundNotNaN,
    BoundNotNull,
    BoundNotStartsWith,
    BoundReference,
    BoundStartsWith,
    Not,
)
from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema

from mor.planner.column_metrics import compile_tree

Test = Callable[[tuple[Any, ...]], bool]  # a partition tuple -> its files may match


def compile_exact(schema: Schema, expr: BooleanExpression) -> Test | None:
    """A test of a partition tuple (values in the order of `schema`'s fields: the spec's
    partition type) against `expr`, or None when some part of it has no closure here. Raises
    as pyiceberg's evaluator does when `expr` does not bind."""
    return _compile(bind(schema, expr, case_sensitive=True))


def _position(e: Any) -> int | None:
    """The tuple position a bound predicate's term reads, or None (a nested or transformed
    term: pyiceberg's evaluator decides those)."""
    term = e.term
    if not isinstance(term, BoundReference):
        return None
    accessor = term.accessor
    if accessor.inner is not None:
        return None
    return accessor.position


_ORDERED = {
    BoundLessThan: lambda v, lit: v is not None and v < lit,
    BoundLessThanOrEqual: lambda v, lit: v is not None and v <= lit,
    BoundGreaterThan: lambda v, lit: v is not None and v > lit,
    BoundGreaterThanOrEqual: lambda v, lit: v is not None and v >= lit,
}


def _compile(e: BooleanExpression) -> Test | None:
    return compile_tree(e, _leaf)


def _leaf(e: BooleanExpression) -> Test | None:
    """A NOT or a predicate (constants, ANDs and ORs are compile_tree's)."""
    if isinstance(e, Not):
        child = _compile(e.child)
        return None if child is None else (lambda p: not child(p))
    if isinstance(e, (BoundStartsWith, BoundNotStartsWith)):
        return None  # rare on partitions: pyiceberg's evaluator
    pos = _position(e) if hasattr(e, "term") else None
    if pos is None:
        return None
    if isinstance(e, BoundIsNull):
        return lambda p: p[pos] is None
    if isinstance(e, BoundNotNull):
        return lambda p: p[pos] is not None
    if isinstance(e, BoundIsNaN):
        return lambda p: p[pos] != p[pos]
    if isinstance(e, BoundNotNaN):
        return lambda p: p[pos] == p[pos]
    if isinstance(e, BoundIn):
        values = e.value_set
        return lambda p: p[pos] in values
    if isinstance(e, BoundNotIn):
        values = e.value_set
        return lambda p: p[pos] not in values
    if isinstance(e, BoundEqualTo):
        lit = e.literal.value
        return lambda p: p[pos] == lit
    if isinstance(e, BoundNotEqualTo):
        lit = e.literal.value
        return lambda p: p[pos] != lit
    op = _ORDERED.get(type(e))
    if op is None:
        return None
    lit = e.literal.value
    return lambda p: op(p[pos], lit)
