"""One test per rule, each with its no-op case; plans compared as EXPLAIN text."""

from __future__ import annotations

import pytest
import sqlglot

from helpers import data_file, eq_delete, scan
from mor.planner.explain import render_plan
from mor.planner.nodes import AntiJoin, Expr, IcebergScan, Pred, Union
from mor.rules import RuleContext, optimize
from mor.rules.split_equality_deletes import split_equality_deletes

# the fast tier too (`make check`: tests/legs.py)
pytestmark = [pytest.mark.check]

CTX = RuleContext()


def _text(p) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(render_plan(p)[0])


def test_split_equality_deletes_builds_fast_lane_and_branches() -> None:
    s1, s13 = frozenset({1}), frozenset({1, 3})
    s = scan(
        data=(data_file(0), data_file(1, eq=(s1,)), data_file(2, eq=(s1, s13))),
        deletes=(eq_delete(10, ids={1}), eq_delete(11, ids={1, 3})),
    )
    out = split_equality_deletes(s, CTX)
    assert _text(out) == "\n".join(
        [
            "Union #0: branches=3  rows~300",
            "  IcebergScan #1: lake.orders branch=1/3 eq_sets=[]  rows~100",
            "  AntiJoin #2: eq_set={1} on=[id] null_safe scope=partition guard=none(proven)  rows~100",
            "    IcebergScan #3: lake.orders branch=2/3 eq_sets=[{1}]  rows~100",
            "    EqDeleteScan #4: lake.orders eq_set={1}  rows=10",
            "  AntiJoin #5: eq_set={1,3} on=[id, amount] null_safe scope=partition guard=none(proven)  rows~100",
            "    AntiJoin #6: eq_set={1} on=[id] null_safe scope=partition guard=none(proven)  rows~100",
            "      IcebergScan #7: lake.orders branch=3/3 eq_sets=[{1}, {1,3}]  rows~100",
            "      Reuse #4",
            "    EqDeleteScan #8: lake.orders eq_set={1,3}  rows=10",
        ]
    )
    # a file reached by two id sets is anti-joined with both (regression 4)
    outer = out.inputs[2]
    assert isinstance(outer, AntiJoin) and isinstance(outer.left, AntiJoin)
    assert {outer.eq_set, outer.left.eq_set} == {s1, s13}
    # the equality column is read although the query did not select it (regression 14)
    branch_scan = outer.left.left
    assert isinstance(branch_scan, IcebergScan)
    assert 1 in {f.field_id for f in branch_scan.fields}
    assert isinstance(out, Union) and [c.name for c in out.columns] == ["c_region", "c_amount"]


def test_split_equality_deletes_noop_without_equality_deletes() -> None:
    s = scan(data=(data_file(0), data_file(1, pos=(5,))))
    assert split_equality_deletes(s, CTX) is s
    unplanned = scan(planned=False)
    assert split_equality_deletes(unplanned, CTX) is unplanned


def test_split_equality_deletes_global_scope_is_printed() -> None:
    s = scan(
        data=(data_file(0, eq=(frozenset({1}),)),), deletes=(eq_delete(10, ids={1}, global_=True),)
    )
    assert "scope=global" in _text(split_equality_deletes(s, CTX))


def _cond(col: str, text: str, sql: str | None = None, pred: bool = True) -> Expr:
    tree = sqlglot.parse_one(sql or f"`{col}` > 1", read="spark")
    return Expr(
        tree=tree,
        text=text,
        refs=frozenset({col}),
        pred=Pred(column=col, op=">", values=(1,)) if pred else None,
    )


def test_optimize_records_which_rules_fired() -> None:
    s1 = frozenset({1})
    plain = scan(data=(data_file(0),))
    _, trace = optimize(plain, (split_equality_deletes,))
    assert [(t.rule, t.changed) for t in trace] == [("split_equality_deletes", False)]
    split = scan(data=(data_file(0, eq=(s1,)),), deletes=(eq_delete(10, ids={1}),))
    out, trace = optimize(split, (split_equality_deletes,))
    assert [(t.rule, t.changed) for t in trace] == [("split_equality_deletes", True)]
    assert trace[0].plan is out


def test_split_equality_deletes_keeps_only_the_guards_it_cannot_prove() -> None:
    s1 = frozenset({1})
    # file 1 (seq 6) is reached only by delete 11 (seq 9); delete 10 (seq 5) must not touch it
    s = scan(
        data=(data_file(0, seq=1, eq=(s1,)), data_file(1, seq=6, eq=(s1,))),
        deletes=(eq_delete(10, ids={1}, seq=5), eq_delete(11, ids={1}, seq=9)),
    )
    join = split_equality_deletes(s, CTX)
    assert isinstance(join, Union) and isinstance(join.inputs[0], AntiJoin)
    aj = join.inputs[0]
    assert (aj.seq_guard, aj.part_guard) == (True, False)
    assert "guard=data_seq<del_seq" in _text(join)
    # two partitions, deletes newer than all data: only the partition guard is needed
    s = scan(
        data=(data_file(0, part=0, eq=(s1,)), data_file(1, part=1, eq=(s1,))),
        deletes=(eq_delete(10, ids={1}, part=0), eq_delete(11, ids={1}, part=1)),
    )
    aj = split_equality_deletes(s, CTX).inputs[0]
    assert (aj.seq_guard, aj.part_guard) == (False, True)
    assert aj.left.meta == ("$partition",)


def test_split_equality_deletes_moves_key_filters_to_the_delete_scan() -> None:
    """A pushed filter on an equality key column also filters the delete keys (renamed); a
    filter on another column, or one that is not a simple predicate, stays off the delete side."""
    from dataclasses import replace

    from mor.planner.nodes import EqDeleteScan

    s1 = frozenset({1})
    base = scan(data=(data_file(0, eq=(s1,)),), deletes=(eq_delete(10, ids={1}),), fields=(1, 2, 3))
    on_key = _cond("c_id", "id > 1")
    on_other = _cond("c_amount", "amount > 1", "`c_amount` > 1")
    opaque = _cond("c_id", "id % 2 = 0", "`c_id` % 2 = 0", pred=False)
    out = split_equality_deletes(replace(base, pushed=(on_key, on_other, opaque)), CTX)
    (ds,) = [n for n in out.walk() if isinstance(n, EqDeleteScan)]
    assert [(e.sql, e.text, e.refs) for e in ds.pushed] == [
        ("`$del1_1` > 1", "id > 1", frozenset({"$del1_1"}))
    ]
    # the data side keeps all three
    (branch,) = [n for n in out.walk() if isinstance(n, IcebergScan)]
    assert branch.pushed == (on_key, on_other, opaque)


def test_anti_join_uses_equals_only_when_no_delete_key_can_be_null() -> None:
    from dataclasses import replace

    s1 = frozenset({1})
    clean = replace(eq_delete(10, ids={1}), null_free=s1)
    unknown = eq_delete(11, ids={1})  # no null count recorded: NULL keys possible

    def joins(*deletes):  # type: ignore[no-untyped-def]
        out = split_equality_deletes(scan(data=(data_file(0, eq=(s1,)),), deletes=deletes), CTX)
        return [n for n in out.walk() if isinstance(n, AntiJoin)]

    (j,) = joins(clean)
    assert not j.null_safe and "no_null_keys" in _text(j)
    (j,) = joins(clean, unknown)
    assert j.null_safe and " null_safe " in _text(j)


def test_every_physical_node_kind_is_formatted_and_translated() -> None:
    """Each kind of physical node has a format (physical/describe.py) and a translation
    (physical/compile.py), both dispatched by kind: a kind added without them fails here,
    not as a class name printed in EXPLAIN or an error at run time. The one step with
    effects is formatted with its branch and run, not translated; a commit's parts are
    translated by its table_changes node."""
    from mor.physical.compile import TRANSLATIONS, Compiler
    from mor.physical.describe import _FORMATS, _Describer
    from mor.rules.physical import nodes

    kinds = {
        c
        for c in vars(nodes).values()
        if isinstance(c, type) and issubclass(c, nodes.PhysicalNode) and c is not nodes.PhysicalNode
    }
    assert len(kinds) >= 12, kinds
    assert kinds - set(_FORMATS) == {nodes.ResolveEqDeletes}
    assert kinds - set(TRANSLATIONS) == {nodes.ResolveEqDeletes, nodes.CommitExec}
    assert all(callable(getattr(_Describer, m, None)) for m in _FORMATS.values())
    assert all(callable(getattr(Compiler, m, None)) for m in TRANSLATIONS.values())
