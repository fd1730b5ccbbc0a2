"""EXPLAIN text: deterministic, one node per line, then per-scan details and pruning."""

from __future__ import annotations

from mor.planner.nodes import (
    AntiJoin,
    CommitChanges,
    EqDeleteScan,
    IcebergScan,
    MetadataTable,
    Plan,
    SparkQuery,
    TableChanges,
    Union,
    show_ids,
)
from mor.planner.sources import prefix_rewrite


def _n(x: int) -> str:
    for unit, size in (("M", 1_000_000), ("K", 1_000)):
        if x >= size:
            v = x / size
            return f"{v:.1f}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return str(x)


def _rows(node: Plan) -> int | None:
    match node:
        case IcebergScan():
            return node.rows_estimate() if node.files is not None else None
        case EqDeleteScan():
            return None
        case Union(inputs=inputs):
            vals = [_rows(i) for i in inputs]
            return None if any(v is None for v in vals) else sum(v for v in vals if v is not None)
        case AntiJoin(left=left):
            return _rows(left)
    return None


def _label(node: Plan) -> str:
    match node:
        case IcebergScan():
            b = f" branch={node.branch[0]}/{node.branch[1]}" if node.branch else ""
            eq = ""
            if node.branch:
                eq = " eq_sets=[" + ", ".join(show_ids(s) for s in node.eq_sets) + "]"
            lim = f" limit={node.limit}" if node.limit is not None else ""
            return f"{node.table}{b}{eq}{lim}"
        case EqDeleteScan():
            return f"{node.table} eq_set={show_ids(node.eq_set)}  rows={_n(node.rows())}"
        case AntiJoin():
            on = (
                ", ".join(k.col.label for k in node.right.keys)
                if isinstance(node.right, EqDeleteScan)
                else ", ".join(r for _, r in node.keys)
            )
            scope = "partition+global"
            if isinstance(node.right, EqDeleteScan):
                parts = {f.partition_id < 0 for f in node.right.files}
                scope = {frozenset({True}): "global", frozenset({False}): "partition"}.get(
                    frozenset(parts), "partition+global"
                )
            guards = [
                g
                for g, on_ in (("data_seq<del_seq", node.seq_guard), ("partition", node.part_guard))
                if on_
            ]
            guard = ",".join(guards) or "none(proven)"
            nulls = "null_safe" if node.null_safe else "no_null_keys"
            return f"eq_set={show_ids(node.eq_set)} on=[{on}] {nulls} scope={scope} guard={guard}"
        case Union():
            return f"branches={len(node.inputs)}"
        case CommitChanges():
            return (
                f"commit={node.ordinal} snapshot={node.snapshot_id} operation={node.operation}"
                + ("" if node.children else " (changes no live row: nothing read)")
                + (
                    " reads=[" + ", ".join(k for k, _ in node.parts()) + "]"
                    if node.children
                    else ""
                )
            )
        case TableChanges():
            start = "first commit" if node.start_id is None else str(node.start_id)
            n = len(node.commits) if node.commits is not None else "?"
            keys = f" identifier=[{', '.join(node.identifier)}]" if node.identifier else ""
            return f"{node.table} after {start} up to {node.end_id}: commits={n}{keys}"
        case MetadataTable():
            rows = node.rows()
            return f"{node.table}.{node.kind}" + (f"  rows={rows}" if rows is not None else "")
        case SparkQuery():
            return ", ".join(f"scan_{i + 1}={ref}" for i, ref in enumerate(node.refs)) or "no scans"
    return ""


def render_plan(plan: Plan) -> tuple[list[str], list[tuple[int, Plan]]]:
    lines: list[str] = []
    seen: dict[int, int] = {}
    numbered: list[tuple[int, Plan]] = []

    def visit(node: Plan, depth: int) -> None:
        pad = "  " * depth
        if id(node) in seen:
            lines.append(f"{pad}Reuse #{seen[id(node)]}")
            return
        n = len(numbered)
        seen[id(node)] = n
        numbered.append((n, node))
        rows = _rows(node)
        est = (
            f"  rows~{_n(rows)}" if rows is not None and not isinstance(node, EqDeleteScan) else ""
        )
        lines.append(f"{pad}{type(node).__name__} #{n}: {_label(node)}{est}".rstrip())
        for c in node.children:
            visit(c, depth + 1)

    visit(plan, 0)
    return lines, numbered


def _scan_details(n: int, scan: IcebergScan) -> list[str]:
    f = scan.files
    out = [f"#{n} IcebergScan {scan.table} @ snapshot {scan.snapshot_id}"]
    if f is None:
        out.append("   files     (not planned)")
    else:
        pos = sum(1 for d in f.deletes if d.kind == "position" and not d.is_dv)
        dvs = sum(1 for d in f.deletes if d.is_dv)
        eqs: dict[frozenset[int], int] = {}
        for d in f.deletes:
            if d.kind == "equality":
                eqs[d.eq_ids] = eqs.get(d.eq_ids, 0) + 1
        eq_text = " | ".join(
            f"{show_ids(s)}: {c}" for s, c in sorted(eqs.items(), key=lambda kv: sorted(kv[0]))
        )
        out.append(
            f"   files     data {len(f.data)} | pos-delete {pos}"
            f"{f' | deletion-vector {dvs}' if dvs else ''}"
            f"{' -> position filter' if pos or dvs else ''} | eq-delete {sum(eqs.values())}"
            f"{' (' + eq_text + ')' if eq_text else ''}"
        )
        moved = next(
            (prefix_rewrite(t.path, t.read_path) for t in (*f.data, *f.deletes)),
            None,
        )
        if moved is not None:
            out.append(f"   paths     {moved[0]}/... read as {moved[1]}/...")
    pushed = " AND ".join(e.text for e in scan.pushed) or "none"
    out.append(f"   pushed    {pushed}")
    cols = ", ".join([fl.col.show() for fl in scan.fields] + list(scan.hidden))
    cols = cols or "(none: row count only)"
    out.append(f"   columns   {cols}" + (f" + {', '.join(scan.meta)}" if scan.meta else ""))
    return out


def _pruning(scans: list[IcebergScan]) -> list[str]:
    out = []
    for s in scans:
        if s.files is None:
            continue
        p = s.files.pruning
        out.append(f"{s.table} @ snapshot {s.snapshot_id}")
        out.append(
            f"  manifests    data {p.manifests_data[0]} of {p.manifests_data[1]}, "
            f"delete {p.manifests_delete[0]} of {p.manifests_delete[1]} (partition summaries)"
        )
        t, a, b = p.data_files
        out.append(f"  data files   {t} -> {a} (partition) -> {b} (column bounds)")
        out.append(
            f"  pos deletes  {p.pos_deletes[0]} -> {p.pos_deletes[1]} "
            "(partition, sequence number, file_path bounds)"
        )
        if p.dvs[0]:
            out.append(
                f"  deletion vectors {p.dvs[0]} -> {p.dvs[1]} (referenced data file; a vector "
                "replaces the file's position deletes)"
            )
        eq = " | ".join(f"{show_ids(ids)}: {tot} -> {kept}" for ids, tot, kept in p.eq_deletes)
        out.append(f"  eq deletes   {eq or 'none'}")
        if p.limit is not None:
            rows, kept, read = p.limit
            out.append(
                f"  limit        {rows} rows: {kept} data files kept, {read} of "
                f"{p.manifests_data[0]} data manifests read (files sure to hold the rows, "
                "without deletes first; the figures above count the manifests read)"
            )
    return out


def scan_names(query: SparkQuery) -> tuple[str, ...]:
    """The names EXPLAIN gives the scans' views in the query text: scan_1, scan_2, ...; and
    a DataFrame handed in by name is shown under that name."""
    return tuple(f"scan_{i + 1}" for i in range(len(query.scans))) + query.relations


def query_section(optimized: Plan, output: str | None = None) -> list[str]:
    """The statement as Spark receives it, table references replaced by the scans' views."""
    if not isinstance(optimized, SparkQuery):
        return []
    text, _ = optimized.text_with(scan_names(optimized))
    out = ["== Query (Spark SQL: Spark analyzes and optimizes it over the scans below) ==", text]
    if output is not None:
        out.append(f"-- output: {output}")
    if optimized.note:
        out.append(f"-- {optimized.note}")
    if optimized.relations:
        out.append(f"-- DataFrames handed in (views=): {', '.join(optimized.relations)}")
    return out + [""]


def explain_text(
    optimized: Plan,
    trace: list[tuple[str, bool, Plan]] | None = None,
    output: str | None = None,
) -> str:
    """`output`: the query's columns as Spark's analyzer found them, when it was asked."""
    lines, numbered = render_plan(optimized)
    out = [
        *query_section(optimized, output),
        "== Optimized Logical Plan ==",
        *lines,
        "",
        "== Scans ==",
    ]
    scans = []
    for n, node in numbered:
        if isinstance(node, IcebergScan):
            out += _scan_details(n, node)
            scans.append(node)
        elif isinstance(node, EqDeleteScan):
            kinds = sorted({"global" if f.partition_id < 0 else "partition" for f in node.files})
            out.append(f"#{n} EqDeleteScan {node.table} eq_set={show_ids(node.eq_set)}")
            out.append(
                f"   files     eq-delete {len(node.files)} ({', '.join(kinds)}) rows={node.rows()}"
            )
            if node.pushed:
                out.append("   pushed    " + " AND ".join(e.text for e in node.pushed))
            out.append(
                "   columns   "
                + ", ".join(k.col.show() for k in node.keys)
                + (" + $del_seq, $del_partition" if node.meta else "")
            )
    out += ["", "== Pruning =="] + (_pruning(_first_of_each(scans)) or ["(no scans)"])
    if trace is not None:
        out += ["", "== Rules =="]
        for name, changed, plan in trace:
            if not changed:
                out.append(f"after {name}: unchanged")
            else:
                out.append(f"after {name}:")
                out += ["  " + ln for ln in render_plan(plan)[0]]
    return "\n".join(out) + "\n"


def _first_of_each(scans: list[IcebergScan]) -> list[IcebergScan]:
    """Branches of one split scan share its pruning: print it once."""
    out, seen = [], set()
    for s in scans:
        key = (s.table, s.snapshot_id, s.files.pruning if s.files else None)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out
