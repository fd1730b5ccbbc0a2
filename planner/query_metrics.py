"""Merge-on-read metrics of a planned query: what it reads, known before any data is read."""

from __future__ import annotations

from dataclasses import dataclass, field

from mor.planner.nodes import EqDeleteScan, IcebergScan, Plan, show_ids


@dataclass
class MorMetrics:
    planning_seconds: float = 0.0
    data_files: int = 0
    data_bytes: int = 0
    data_rows: int = 0  # record counts of the data files read, before any delete
    pos_delete_files: int = 0
    pos_delete_bytes: int = 0
    pos_delete_rows: int = 0
    deletion_vectors: int = 0
    dv_bytes: int = 0  # the blobs' sizes (what is read of their Puffin files)
    dv_rows: int = 0  # positions the vectors hold
    eq_delete_files: dict[str, int] = field(default_factory=dict)  # "{1,3}" -> files
    eq_delete_bytes: dict[str, int] = field(default_factory=dict)
    eq_delete_rows: dict[str, int] = field(default_factory=dict)
    # object-store requests on the driver (GET, HEAD, LIST: planner/requests.py) while the
    # call planned (metrics()) or planned and built the DataFrame (EXPLAIN ANALYZE)
    store_requests: dict[str, int] = field(default_factory=dict)
    # filled by EXPLAIN ANALYZE, which runs counts
    rows_removed_by_position: int | None = None
    rows_removed_by_equality: dict[str, int] | None = None
    rows_live: int | None = None

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def static_metrics(plan: Plan, planning_seconds: float) -> MorMetrics:
    m = MorMetrics(planning_seconds=planning_seconds)
    seen: set[int] = set()
    for node in plan.walk():
        if isinstance(node, IcebergScan) and node.files is not None:
            for t in node.files.data:
                m.data_files += 1
                m.data_bytes += t.size_bytes
                m.data_rows += t.record_count
            for d in node.files.deletes:
                if d.kind == "position" and (id(node), d.file_id) not in seen:
                    seen.add((id(node), d.file_id))  # type: ignore[arg-type]
                    if d.dv is not None:
                        m.deletion_vectors += 1
                        m.dv_bytes += d.dv.length
                        m.dv_rows += d.record_count
                        continue
                    m.pos_delete_files += 1
                    m.pos_delete_bytes += d.size_bytes
                    m.pos_delete_rows += d.record_count
        elif isinstance(node, EqDeleteScan) and id(node) not in seen:
            seen.add(id(node))
            k = show_ids(node.eq_set)
            m.eq_delete_files[k] = m.eq_delete_files.get(k, 0) + len(node.files)
            m.eq_delete_bytes[k] = m.eq_delete_bytes.get(k, 0) + sum(
                f.size_bytes for f in node.files
            )
            m.eq_delete_rows[k] = m.eq_delete_rows.get(k, 0) + node.rows()
    return m


def render(m: MorMetrics) -> str:
    lines = ["== Merge-on-read metrics =="]
    lines.append(f"planning      {m.planning_seconds * 1000:.1f} ms")
    lines.append(f"data          {m.data_files} files, {m.data_bytes} bytes, {m.data_rows} rows")
    lines.append(
        f"pos deletes   {m.pos_delete_files} files, {m.pos_delete_bytes} bytes, "
        f"{m.pos_delete_rows} positions"
    )
    if m.deletion_vectors:
        lines.append(
            f"deletion vec  {m.deletion_vectors} vectors, {m.dv_bytes} bytes, {m.dv_rows} positions"
        )
    for k in sorted(m.eq_delete_files):
        lines.append(
            f"eq deletes    {k}: {m.eq_delete_files[k]} files, {m.eq_delete_bytes[k]} bytes,"
            f" {m.eq_delete_rows[k]} keys"
        )
    if any(m.store_requests.values()):
        r = m.store_requests
        lines.append(
            f"requests      {sum(r.values())} to the object store from the driver ("
            + ", ".join(f"{k} {v}" for k, v in r.items())
            + ")"
        )
    if m.rows_live is not None:
        kind = "position deletes" + (" and deletion vectors" if m.deletion_vectors else "")
        lines.append(f"rows removed  by {kind} {m.rows_removed_by_position}")
        for k, v in sorted((m.rows_removed_by_equality or {}).items()):
            lines.append(f"rows removed  by equality deletes {k} {v}")
        lines.append(f"rows live     {m.rows_live} (of {m.data_rows} in the files read)")
    return "\n".join(lines) + "\n"
