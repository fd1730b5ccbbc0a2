"""`mor health`, its presentation: the report as a text table (`render_table`) and as a PNG
chart (`plot`, matplotlib)."""

from __future__ import annotations

from typing import Any

from mor.planner.errors import MorError


def bar(ratio: float, width: int = 20) -> str:
    filled = min(width, max(0, round(ratio * width)))
    return "█" * filled + "·" * (width - filled)


def _history_lines(h: dict[str, Any] | None) -> list[str]:
    if not h:
        return []
    size = "?" if h["metadata_file_bytes"] is None else _size(h["metadata_file_bytes"])
    oldest = "-" if h["oldest_snapshot_days"] is None else f"{h['oldest_snapshot_days']} days"
    lines = [
        f"history      {h['snapshots']} snapshots (oldest {oldest}), {h['refs']} refs, "
        f"metadata file {size} ({h['metadata_log_entries']} earlier in its log)"
    ]
    m = h.get("manifests")
    if m:
        regrouped = (
            f", {m['after_rewrite']} after rewrite_manifests"
            if m["after_rewrite"] < m["count"]
            else ""
        )
        lines.append(
            f"manifests    {m['count']} in the current snapshot ({m['data']} data, "
            f"{m['deletes']} delete; {_size(m['bytes'])}){regrouped}"
        )
    e = h.get("expiry") or {}
    if "error" in e:
        lines.append(f"expiry       cannot tell: {e['error']}")
    elif e.get("snapshots"):
        files = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in e["files"].items() if v)
        gc = "" if h["gc_enabled"] else " (gc.enabled=false: nothing would be deleted)"
        lines.append(
            f"expiry       the table's retention removes {e['snapshots']} snapshots"
            f"{', refs ' + ', '.join(e['refs']) if e['refs'] else ''}, frees {files or 'no file'}"
            f"{gc}"
        )
    else:
        lines.append("expiry       nothing older than the table's retention")
    o = h.get("orphans")
    if o is not None and "error" in o:
        lines.append(f"orphans      cannot tell: {o['error']}")
    elif o is not None:
        lines.append(f"orphans      {o['files']} files ({_size(o['bytes'])}) older than 3 days")
    return lines


def render_table(report: dict[str, Any]) -> str:
    """The report as text: the table's figures, a bar of the delete ratio per partition, the
    equality keys and the advice."""

    def amp(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}x"

    est = "" if report["deleted_records_exact"] else " (estimated: --exact counts it)"
    lines = [
        f"table        {report['table']} @ snapshot {report['snapshot_id']} "
        f"(v{report['format_version']}, {report['snapshots']} snapshots)",
        f"data         {report['data_files']} files, {report['data_records']} records, "
        f"{_size(report['data_bytes'])}, {report['small_files']} small",
        f"deletes      {report['position_delete_files']} position delete files, "
        f"{report['deletion_vectors']} deletion vectors, {report['equality_delete_files']} "
        f"equality delete files ({_size(report['delete_file_bytes'])}), "
        f"{report['dangling_delete_files']} dangling",
        f"deleted      {report['deleted_records']} records{est}, delete ratio "
        f"{report['delete_ratio']:.2%}",
        f"read         ~{amp(report['read_amplification'])} the cost of the same rows compacted",
        *_history_lines(report.get("history")),
    ]
    for k in report["equality_keys"]:
        lines.append(
            f"eq keys      {k['field_ids']} ({', '.join(k['columns'])}): {k['delete_files']} "
            f"files, {k['delete_records']} keys, sequence numbers "
            f"{k['min_sequence_number']}..{k['max_sequence_number']}"
        )
    if report["partitions"]:
        width = max(len(p["partition"]) for p in report["partitions"])
        width = min(max(width, 9), 48)
        lines += [
            "",
            f"{'partition':<{width}}  {'files':>6} {'records':>9} {'pos':>4} {'dv':>4} "
            f"{'eq':>4} {'deleted':>8}  delete ratio{'':<17} read",
        ]
        for p in report["partitions"]:
            name = p["partition"]
            name = name if len(name) <= width else name[: width - 1] + "…"
            lines.append(
                f"{name:<{width}}  {p['data_files']:>6} {p['data_records']:>9} "
                f"{p['position_delete_files']:>4} {p['deletion_vectors']:>4} "
                f"{p['equality_delete_files']:>4} {p['deleted_records']:>8}  "
                f"{bar(p['delete_ratio'])} {p['delete_ratio']:>6.1%}  "
                f"{amp(p['read_amplification'])}"
            )
    lines.append("")
    if not report["advice"]:
        lines.append("advice       none: the table is healthy to read")
    for a in report["advice"]:
        lines.append(f"advice       {a['reason']}")
        if a.get("mor"):
            lines += [
                f"             {a['mor']}",
                f"             or, with Iceberg's runtime: {a['call']}",
            ]
        else:
            lines.append(f"             {a['call']}")
    return "\n".join(lines) + "\n"


def _size(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def plot(report: dict[str, Any], path: str) -> None:
    """A PNG chart of the delete ratio and the delete files per partition (matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise MorError(
            "--plot needs matplotlib: pip install 'mor[plot]' (or matplotlib itself)"
        ) from e
    parts = report["partitions"] or [
        {
            "partition": "(empty table)",
            "delete_ratio": 0.0,
            "position_delete_files": 0,
            "deletion_vectors": 0,
            "equality_delete_files": 0,
        }
    ]
    names = [p["partition"] for p in parts]
    height = max(3.0, 0.35 * len(names) + 1.5)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, height), sharey=True)
    ys = range(len(names))
    ratios = [p["delete_ratio"] for p in parts]
    threshold = report.get("thresholds", {}).get("delete_ratio", 0.3)
    left.barh(ys, ratios, color=["#c0392b" if r >= threshold else "#2e86c1" for r in ratios])
    left.axvline(threshold, color="#555", linestyle="--", linewidth=1)
    left.set_xlim(0, max(1.0, max(ratios) * 1.05))
    left.set_xlabel(f"delete ratio (dashed: {threshold}, rewrite_data_files' threshold)")
    left.set_yticks(list(ys), names)
    left.invert_yaxis()
    pos = [p["position_delete_files"] for p in parts]
    dvs = [p["deletion_vectors"] for p in parts]
    eqs = [p["equality_delete_files"] for p in parts]
    right.barh(ys, pos, label="position delete files", color="#2e86c1")
    right.barh(ys, dvs, left=pos, label="deletion vectors", color="#7fb3d5")
    right.barh(
        ys,
        eqs,
        left=[a + b for a, b in zip(pos, dvs)],
        label="equality delete files",
        color="#e67e22",
    )
    right.set_xlabel("delete files that apply to the partition's data files")
    right.legend(loc="lower right", fontsize="small")
    est = "" if report["deleted_records_exact"] else " (equality deletes estimated)"
    fig.suptitle(f"{report['table']} @ snapshot {report['snapshot_id']}{est}")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as e:
        raise MorError(f"cannot write the chart to {path}: {e}") from e
    finally:
        plt.close(fig)
