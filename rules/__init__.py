"""mor's rules: no I/O, no pyspark.

Logical rules (this module's MOR_RULES) rewrite the scans of a logical plan, pure functions of
it; the query around the scans is Spark's to optimize. They run after scan planning (I/O done
by the planner), because equality-delete routing needs each scan's files. Physical rules
(rules/physical/) then decide what each node becomes in Spark, from the plan, the session's
facts and what the process's caches hold (positions resolved by earlier queries, files read
before): the same plan may be planned differently later in a process, never with other rows.

    planner.sql.bind -> planner.attach.attach_files -> MOR_RULES -> rules.physical.plan_physical
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mor.planner.nodes import Plan
from mor.rules.split_equality_deletes import split_equality_deletes


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleContext:
    """What logical rules may consult besides the plan (none needs anything yet: every fact they
    use is in the plan). The physical rules get the session's facts (SessionFacts) and the
    process's caches (planner/state.py) instead."""


Rule = Callable[[Plan, RuleContext], Plan]

# split_equality_deletes needs each scan's files (attached by scan planning); it adds the
# equality columns itself, so column pruning must not run after it.
MOR_RULES: tuple[Rule, ...] = (split_equality_deletes,)


@dataclass(frozen=True, slots=True)
class TraceStep:
    rule: str
    changed: bool
    plan: Plan


def optimize(
    plan: Plan, rules: tuple[Rule, ...], ctx: RuleContext | None = None
) -> tuple[Plan, list[TraceStep]]:
    """Apply `rules` in order; the trace records, by identity, which ones changed the plan."""
    ctx = ctx or RuleContext()
    trace = []
    for rule in rules:
        out = rule(plan, ctx)
        trace.append(TraceStep(rule.__name__, out is not plan, out))
        plan = out
    return plan, trace
