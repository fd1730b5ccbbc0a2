"""Differential runs: random Java-written histories, each query through mor and through Iceberg.

    python -m tests.oracle.run --histories 6            # the CI-sized run (make test runs it)
    python -m tests.oracle.run --histories 200 --seed 1000   # the soak (make soak)

Both readers run in one Spark session; results must be equal as multisets. Exit code 0 when
there are no differences, 1 when there are (each printed with its seed, query and rows), 2
when the Iceberg runtime cannot be set up here (the reason is printed).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.oracle.histories import History, Writer  # noqa: E402
from tests.oracle.runtime import RuntimeUnavailable, iceberg_session  # noqa: E402


def queries(h: History, rng_pick: Any) -> list[str]:
    """Templates over {t}: the table as each reader names it."""
    n = h.key_col
    qs = [
        "SELECT * FROM {t}",
        "SELECT count(*) FROM {t}",
        "SELECT amt FROM {t}",  # leaves out every equality column
        f"SELECT id, {n} FROM {{t}} WHERE {n} = 'bob'",
        f"SELECT id, {n}, amt FROM {{t}} WHERE {n} <> 'bob'",  # NULLs never pass
        "SELECT id, amt FROM {t} WHERE id BETWEEN 3 AND 15",
        "SELECT p, count(*), sum(amt), min(id), max(id) FROM {t} GROUP BY p",
        f"SELECT a.id, b.{n} FROM {{t}} a JOIN {{t}} b ON a.id = b.id",
        "SELECT count(DISTINCT id) FROM {t} WHERE amt > 10",
        # metadata columns, as Iceberg's Spark reader names them
        "SELECT id, _file, _pos, _spec_id FROM {t}",
        "SELECT id, _partition FROM {t}",
    ]
    if "k" in h.columns:
        qs.append("SELECT k, count(*) FROM {t} WHERE k <> 2 OR k IS NULL GROUP BY k")
    if h.v3:  # row lineage, on v3 tables and those upgraded to v3 ({lineage}: see lineage_view)
        qs.append("SELECT id, amt, _row_id, _last_updated_sequence_number FROM {lineage}")
        qs.append("SELECT _row_id, id FROM {lineage} WHERE _last_updated_sequence_number > 2")
    for sid in rng_pick(h.snapshots[:-1], 2):
        qs.append(f"SELECT * FROM {{t}} VERSION AS OF {sid}")
        qs.append(f"SELECT count(*) FROM {{t}} VERSION AS OF {sid}")
    return qs


def _norm(v: Any) -> Any:
    if isinstance(v, (list, tuple)):  # arrays and structs (Rows): hashable, compared by value
        return tuple(_norm(x) for x in v)
    if isinstance(v, float):  # 9 significant digits: sums of doubles depend on their order
        return None if math.isnan(v) else float(f"{v:.9g}")
    return v


def _bag(rows: list[Any]) -> Counter:
    return Counter(tuple(_norm(v) for v in r) for r in rows)


class OracleFailed(Exception):
    """Iceberg's own reader could not answer (mor did): nothing to compare against."""


# position deletes and deletion vectors through the anti-join instead of in-plan bitmaps
JOIN = {"position_bitmap_bytes": 0}


def lineage_view(spark: Any, h: History) -> tuple[str, int]:
    """Iceberg's rows of `id, amt, _row_id, _last_updated_sequence_number` as the spec defines
    them, and how many rows it corrected. Iceberg 1.10.2's reader gives a row that inherits
    `_last_updated_sequence_number` its file's *file* sequence number; the spec says the data
    sequence number (apache/iceberg#17039; 1.12.0, the oracle here, agrees with the spec).
    The two differ only for a file a compaction rewrote before the upgrade to v3
    (rewrite_data_files keeps the data sequence number it started from), and there Iceberg's
    value is exactly the file sequence number: a value stored in a file is older than the
    commit that wrote it, so it never equals it."""
    view = f"lineage_spec_{h.seed}"
    spark.sql(
        f"""CREATE OR REPLACE TEMP VIEW {view} AS
        SELECT x.id, x.amt, x._row_id,
          CASE WHEN e.seq <> e.fseq AND x.lus = e.fseq THEN e.seq ELSE x.lus END
            AS _last_updated_sequence_number,
          e.seq <> e.fseq AND x.lus = e.fseq AS corrected
        FROM (SELECT id, amt, _row_id, _last_updated_sequence_number lus, _file
              FROM {h.table}) x
        LEFT JOIN (SELECT data_file.file_path path, sequence_number seq,
                          file_sequence_number fseq
                   FROM {h.table}.entries WHERE status <> 2 AND data_file.content = 0) e
          ON x._file = e.path"""
    )
    (n,) = _iceberg(spark, f"SELECT count_if(corrected) FROM {view}")[0]
    return view, n


def compare(
    spark: Any, h: History, sql: str, settings: dict | None = None, lineage: str = ""
) -> str | None:
    """`{t}` in `sql` is the table; `{lineage}` is the table for mor and `lineage` (a view of
    Iceberg's rows with the spec's lineage: lineage_view) for Iceberg's side.

    mor runs the query twice when it has equality deletes (rules/physical/equality.py): cold
    (nothing resolved: the first read anti-joins, setting resolve_at_read, unless the caller's
    settings resolve at the first read), then with its DataFrames dropped (resolving what the
    first run joined, or from the positions it resolved); each must give Iceberg's rows."""
    from mor import mor_sql
    from mor.physical.spark import reuse
    from mor.planner.state import caches
    from mor.rules.physical import equality as resolution

    at = f"iceberg_scan('{h.location}')"
    resolution.clear_resolved(caches())
    ours = mor_sql(sql.format(t=at, lineage=at), spark=spark, settings=settings).collect()
    runs = [("", ours)]
    if resolution.held(caches())[0] or resolution.seen(caches()):
        how = " (resolved positions held)" if resolution.held(caches())[0] else " (resolved)"
        reuse.clear()
        again = mor_sql(sql.format(t=at, lineage=at), spark=spark, settings=settings).collect()
        runs.append((how, again))
    theirs = _iceberg(spark, sql.format(t=h.table, lineage=lineage))
    b = _bag(theirs)
    for how, rows in runs:
        a = _bag(rows)
        if a == b:
            continue
        missing = list((b - a).elements())[:5]
        extra = list((a - b).elements())[:5]
        return (
            f"seed {h.seed} ({h.layout}, v{h.version}{', ' + str(settings) if settings else ''})"
            f"{how}: {sql}\n  mor rows {sum(a.values())}, iceberg rows "
            f"{sum(b.values())}\n  missing from mor: {missing}\n  extra in mor: {extra}"
        )
    return None


def _iceberg(spark: Any, sql: str) -> list[Any]:
    """Iceberg's rows of `sql`; OracleFailed with the reason when its reader fails."""
    try:
        return spark.sql(sql).collect()
    except Exception as e:  # noqa: BLE001 - reported apart from differences, with its cause
        raise OracleFailed(first_cause(e)) from e


def first_cause(e: BaseException, width: int = 200) -> str:
    """Why a JVM call failed, in one line: the first `Caused by` line of its error, else the
    error's first line (cut to `width`)."""
    text = str(e).strip()
    if "Caused by" in text:
        return text[text.find("Caused by") :].splitlines()[0]
    return text.splitlines()[0][:width] if text else type(e).__name__


CHANGE_COLS = ("_change_type", "_change_ordinal", "_commit_snapshot_id")


def check_changes(spark: Any, h: History, rng: Any) -> list[str]:
    """table_changes over the whole history, held to Iceberg's reader at every snapshot: for
    each commit, its DELETE rows were live at the parent, parent - DELETE + INSERT is the
    commit's snapshot (on the columns both snapshots have by name), no identical DELETE/INSERT
    pair is left, and ordinals and snapshot ids follow the history; then
    three random commits alone, a range of several and a range given by timestamps against the
    whole run's rows, and the range's INSERT - DELETE against its end - start."""
    from mor import changes

    loc = str(h.location)
    cat = getattr(h, "catalog", None)  # a table named through a catalog (tests/oracle/flink.py)
    snaps = {
        r.snapshot_id: r
        for r in _iceberg(
            spark,
            f"SELECT snapshot_id, parent_id, operation, unix_millis(committed_at) ms "
            f"FROM {h.table}.snapshots",
        )
    }
    chain: list[Any] = []
    cur = _iceberg(spark, f"SELECT snapshot_id FROM {h.table}.refs WHERE name = 'main'")
    sid = cur[0].snapshot_id if cur else None
    while sid is not None and sid in snaps:
        chain.append(snaps[sid])
        sid = snaps[sid].parent_id
    chain.reverse()
    out: list[str] = []

    def fail(text: str) -> None:
        out.append(f"seed {h.seed} ({h.layout}, v{h.version}): table_changes: {text}")

    whole = changes(loc, catalog=cat, spark=spark)
    cols = [c for c in whole.columns if c not in CHANGE_COLS]
    rows = [r.asDict() for r in whole.collect()]
    by_ord: dict[int, list[dict]] = {}
    for r in rows:
        by_ord.setdefault(r["_change_ordinal"], []).append(r)
    if set(by_ord) - set(range(len(chain))):
        fail(f"ordinals {sorted(set(by_ord))} for {len(chain)} commits")
    live_then: list[dict] = []  # the table before the first commit: empty
    for i, snap in enumerate(chain):
        mine = by_ord.get(i, [])
        if any(r["_commit_snapshot_id"] != snap.snapshot_id for r in mine):
            fail(f"commit {i} rows name another snapshot than {snap.snapshot_id}")
        if snap.operation == "replace" and mine:
            fail(f"replace commit {snap.snapshot_id} reported {len(mine)} changes")
        live_now = [
            r.asDict()
            for r in _iceberg(spark, f"SELECT * FROM {h.table} VERSION AS OF {snap.snapshot_id}")
        ]
        names = sorted(
            set(cols)
            & set(_columns(spark, h, snap.snapshot_id))
            & (set(_columns(spark, h, chain[i - 1].snapshot_id)) if i else set(cols))
        )

        def bag(rs: list[dict]) -> Counter:
            return _bag([tuple(r.get(n) for n in names) for r in rs])

        dels = bag([r for r in mine if r["_change_type"] in ("DELETE", "UPDATE_BEFORE")])
        ins = bag([r for r in mine if r["_change_type"] in ("INSERT", "UPDATE_AFTER")])
        then, now = bag(live_then), bag(live_now)
        if dels - then:
            fail(
                f"commit {i} ({snap.operation}) deleted rows not live before it: "
                f"{list((dels - then).elements())[:5]}"
            )
        if (then - dels) + ins != now:
            got = (then - dels) + ins
            fail(
                f"commit {i} ({snap.operation}) on {names}: parent - DELETE + INSERT != snapshot: "
                f"missing {list((now - got).elements())[:5]}, "
                f"extra {list((got - now).elements())[:5]}"
            )
        if set(names) == set(cols) and dels & ins:
            fail(
                f"commit {i}: identical DELETE/INSERT pairs left: "
                f"{list((dels & ins).elements())[:3]}"
            )
        live_then = live_now

    def same(sub: Any, lo: int, hi: int, how: str) -> list[Any]:
        """`sub`'s rows are the whole run's commits lo..hi-1 (renumbered from 0), on the
        columns both have by name (the end snapshot's schema names the columns)."""
        names = sorted(set(sub.columns) & set(whole.columns))
        collected = sub.collect()
        got = [r.asDict() for r in collected]
        want = [
            dict(r, _change_ordinal=r["_change_ordinal"] - lo)
            for r in rows
            if lo <= r["_change_ordinal"] < hi
        ]
        a = _bag([tuple(r[n] for n in names) for r in got])
        b = _bag([tuple(r[n] for n in names) for r in want])
        if a != b:
            fail(
                f"{how}: {sum(a.values())} rows, the whole run's commits {lo}..{hi - 1} have "
                f"{sum(b.values())}; missing {list((b - a).elements())[:3]}, "
                f"extra {list((a - b).elements())[:3]}"
            )
        return collected

    # every commit is checked above; a few are also read alone (each is a query of its own)
    for i in sorted(rng.sample(range(len(chain)), min(3, len(chain)))):
        start = chain[i - 1].snapshot_id if i else None
        sub = changes(
            loc,
            start_snapshot_id=start,
            end_snapshot_id=chain[i].snapshot_id,
            catalog=cat,
            spark=spark,
        )
        same(sub, i, i + 1, f"commit {i} alone")
    if len(chain) >= 3:
        a, b = sorted(rng.sample(range(len(chain)), 2))
        sub = changes(
            loc,
            start_snapshot_id=chain[a].snapshot_id,
            end_snapshot_id=chain[b].snapshot_id,
            catalog=cat,
            spark=spark,
        )
        ranged = same(sub, a + 1, b + 1, f"commits after {a} up to {b}")
        # INSERT minus DELETE over the range is the end snapshot minus the start one
        names = sorted(
            set(cols)
            & set(_columns(spark, h, chain[a].snapshot_id))
            & set(_columns(spark, h, chain[b].snapshot_id))
        )
        picked = ", ".join(f"`{n}`" for n in names)

        def at(sid: int) -> Counter:
            return _bag(
                [
                    tuple(r)
                    for r in _iceberg(spark, f"SELECT {picked} FROM {h.table} VERSION AS OF {sid}")
                ]
            )

        net: Counter = Counter()
        for r in ranged:
            key = _bag([tuple(r[n] for n in names)])
            sign = -1 if r["_change_type"] in ("DELETE", "UPDATE_BEFORE") else 1
            for k in key:
                net[k] += sign
        start, end = at(chain[a].snapshot_id), at(chain[b].snapshot_id)
        want = Counter(end)
        want.subtract(start)
        if names and {k: v for k, v in net.items() if v} != {k: v for k, v in want.items() if v}:
            fail(f"commits after {a} up to {b}: INSERT - DELETE != end - start on {names}")
        ts = changes(
            loc,
            start_timestamp=chain[a].ms,
            end_timestamp=chain[b].ms,
            catalog=cat,
            spark=spark,
        )
        same(ts, a + 1, b + 1, f"commits by time after {a} up to {b}")
    return out


def check_health(spark: Any, h: History) -> list[str]:
    """mor health against Iceberg's metadata tables (files by kind) and its reader (live rows):
    with --exact every count; without, the position part whenever no equality delete applies."""
    from mor import health

    loc = str(h.location)
    cat = getattr(h, "catalog", None)
    out: list[str] = []
    exact = health(loc, catalog=cat, exact=True, spark=spark)
    approx = health(loc, catalog=cat)
    live = _iceberg(spark, f"SELECT count(*) n FROM {h.table}")[0].n
    files = _iceberg(
        spark,
        f"SELECT content, file_format, count(*) n, sum(record_count) r FROM {h.table}.files "
        "GROUP BY content, file_format",
    )
    kinds = {(r.content, r.file_format): (r.n, r.r) for r in files}
    want = {
        "data_files": kinds.get((0, "PARQUET"), (0, 0))[0],
        "data_records": kinds.get((0, "PARQUET"), (0, 0))[1] or 0,
        "position_delete_files": kinds.get((1, "PARQUET"), (0, 0))[0],
        "deletion_vectors": kinds.get((1, "PUFFIN"), (0, 0))[0],
        "equality_delete_files": kinds.get((2, "PARQUET"), (0, 0))[0],
    }
    for report, how in ((exact, "exact"), (approx, "metadata only")):
        got = {k: report[k] for k in want}
        if got != want:
            out.append(f"seed {h.seed}: health ({how}) {got} != Iceberg's files table {want}")
        parts = report["partitions"]
        for k in ("data_files", "data_records"):
            if sum(p[k] for p in parts) != report[k]:
                out.append(f"seed {h.seed}: health ({how}) partitions' {k} do not add up")
    eq = _iceberg(
        spark,
        f"SELECT sort_array(equality_ids) ids, count(*) n, sum(record_count) r "
        f"FROM {h.table}.delete_files WHERE content = 2 GROUP BY sort_array(equality_ids)",
    )
    want_eq = {"{" + ",".join(map(str, r.ids)) + "}": (r.n, r.r) for r in eq}
    got_eq = {
        k["field_ids"]: (k["delete_files"], k["delete_records"]) for k in exact["equality_keys"]
    }
    if got_eq != want_eq:
        out.append(f"seed {h.seed}: health equality keys {got_eq} != Iceberg's {want_eq}")
    if exact["data_records"] - exact["deleted_records"] != live:
        out.append(
            f"seed {h.seed}: health --exact: {exact['data_records']} records - "
            f"{exact['deleted_records']} deleted != {live} live rows in Iceberg's reader"
        )
    if approx["deleted_records_exact"] and approx["deleted_records"] != exact["deleted_records"]:
        out.append(
            f"seed {h.seed}: health says {approx['deleted_records']} deleted exactly without "
            f"Spark, {exact['deleted_records']} with the anti-joins"
        )
    return [f"{d} ({h.layout}, v{h.version})" for d in out]


def _columns(spark: Any, h: History, sid: int) -> list[str]:
    return list(spark.sql(f"SELECT * FROM {h.table} VERSION AS OF {sid} LIMIT 0").columns)


def check_history(
    spark: Any, h: History, rng: Any, coverage: Counter, oracle_failed: Counter
) -> tuple[int, list[str]]:
    """Every query of one written history through mor and Iceberg's reader, then its changes
    and its health report: (queries run, differences)."""
    seed = h.seed
    n_queries = 0
    diffs: list[str] = []
    coverage.update(h.coverage)
    coverage[f"snapshots {min(len(h.snapshots), 10)}{'+' if len(h.snapshots) >= 10 else ''}"] += 1
    qs = [(q, None) for q in queries(h, lambda xs, k: rng.sample(xs, min(k, len(xs))))]
    qs += [("SELECT * FROM {t}", JOIN), ("SELECT id, _pos FROM {t}", JOIN)]
    view = ""
    if h.v3:
        try:
            view, corrected = lineage_view(spark, h)
            coverage["lineage rows read per spec (iceberg#17039)"] += corrected
        except OracleFailed as e:
            oracle_failed["lineage: " + str(e)[:140]] += 1
            qs = [(q, st) for q, st in qs if "{lineage}" not in q]
    for q, settings in qs:
        n_queries += 1
        try:
            d = compare(spark, h, q, settings, view)
        except OracleFailed as e:
            oracle_failed[str(e)[:160]] += 1
            d = None
        except Exception as e:  # noqa: BLE001 - an error from mor is a difference
            d = f"seed {seed} ({h.layout}): {q}\n  error: {str(e).splitlines()[0][:300]}"
        if d:
            diffs.append(d + "\n  history:\n    " + "\n    ".join(h.log))
    n_queries += 1
    try:
        found = check_changes(spark, h, rng)
    except OracleFailed as e:
        oracle_failed["table_changes: " + str(e)[:140]] += 1
        found = []
    except Exception as e:  # noqa: BLE001 - an error from mor is a difference
        found = [
            f"seed {seed} ({h.layout}): table_changes\n  error: {str(e).splitlines()[0][:300]}"
        ]
    coverage["table_changes commits"] += len(h.snapshots)
    n_queries += 1
    try:
        found += check_health(spark, h)
    except OracleFailed as e:
        oracle_failed["health: " + str(e)[:140]] += 1
    except Exception as e:  # noqa: BLE001 - an error from mor is a difference
        found.append(f"seed {seed} ({h.layout}): health\n  error: {str(e).splitlines()[0][:300]}")
    for d in found:
        diffs.append(d + "\n  history:\n    " + "\n    ".join(h.log))
    return n_queries, diffs


class Consumer:
    """mor.stream_changes over a history while it is written: polled between commits with at
    most 1-3 commits a batch, stopped at random points (before writing a batch, after writing
    it, while moving the checkpoint) and started again from its checkpoint, into a sink that
    keeps each batch under its id. At the end, the sink must hold exactly table_changes over
    the whole history, each commit in one committed batch, batch ids 0, 1, 2..."""

    STOPS = ("none", "none", "none", "before", "written", "checkpoint")

    def __init__(self, spark: Any, location: str, rng: Any, folder: str) -> None:
        self.spark, self.location, self.rng = spark, location, rng
        self.checkpoint = os.path.join(folder, f"{uuid.uuid4().hex}.json")
        self.sink: dict[int, tuple[list[str], list[dict]]] = {}
        self.ranges: dict[int, tuple[int | None, tuple[int, ...]]] = {}
        self.errors: list[str] = []
        self.stops: Counter = Counter()

    def poll(self, drain: bool = False) -> None:
        import mor.consume
        from mor import stream_changes

        if not drain and self.rng.random() < 0.4:
            return
        try:
            for b in stream_changes(
                self.location,
                self.checkpoint,
                spark=self.spark,
                max_commits=None if drain else self.rng.randint(1, 3),
            ):
                if b.redelivered and self.ranges.get(b.batch_id) != (
                    b.start_snapshot_id,
                    b.commits,
                ):
                    self.errors.append(f"batch {b.batch_id} delivered again as another range")
                self.ranges[b.batch_id] = (b.start_snapshot_id, b.commits)
                stop = "none" if drain else self.rng.choice(self.STOPS)
                self.stops[stop] += 1
                if stop == "before":
                    return
                self.sink[b.batch_id] = (b.df.columns, [r.asDict() for r in b.df.collect()])
                if stop == "written":
                    return
                if stop == "checkpoint":
                    real = mor.consume.os.replace

                    def fail(*a: Any) -> None:
                        raise OSError("stopped")

                    mor.consume.os.replace = fail  # type: ignore[assignment]
                    try:
                        b.commit()
                    except Exception:  # noqa: BLE001 - the stop this simulates
                        return
                    finally:
                        mor.consume.os.replace = real  # type: ignore[assignment]
                    self.errors.append("a commit whose checkpoint was not written succeeded")
                b.commit()
        except Exception as e:  # noqa: BLE001 - an error from mor is a difference
            self.errors.append(f"stream_changes: {str(e).splitlines()[0][:300]}")

    def check(self, h: History) -> list[str]:
        from mor import changes
        from mor.consume import read_checkpoint
        from mor.planner.batches import current_chain
        from mor.planner.sources import PathMap, Resolver

        self.poll(drain=True)
        out = [f"seed {h.seed} ({h.layout}): consumer: {e}" for e in self.errors]
        if out:
            return out
        done = read_checkpoint(self.checkpoint)
        ids = sorted(self.sink)
        if done is None or done.pending is not None or ids != list(range(done.batch_id + 1)):
            return [f"seed {h.seed}: consumer: batch ids {ids}, checkpoint {done}"]
        delivered = [c for i in ids for c in self.ranges[i][1]]
        src = Resolver(None, PathMap.of({})).by_text(self.location)
        chain = [s.snapshot_id for s in current_chain(src.metadata)[0]]
        if delivered != chain:
            out.append(f"seed {h.seed}: consumer: delivered {delivered}, history {chain}")
        whole = changes(self.location, spark=self.spark)
        rows = [r.asDict() for r in whole.collect()]
        for i in ids:
            cols, got = self.sink[i]
            names = sorted((set(cols) & set(whole.columns)) - {"_change_ordinal"})
            mine = set(self.ranges[i][1])
            theirs = [r for r in rows if r["_commit_snapshot_id"] in mine]
            want = _bag([tuple(r[n] for n in names) for r in theirs])
            have = _bag([tuple(r[n] for n in names) for r in got])
            if want != have:
                out.append(
                    f"seed {h.seed} ({h.layout}): consumer batch {i} (commits {sorted(mine)}) "
                    f"on {names}: missing {list((want - have).elements())[:5]}, "
                    f"extra {list((have - want).elements())[:5]}"
                )
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--histories", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--seeds",
        help="these seeds (comma-separated) instead of --histories from --seed, e.g. 1,4,5: "
        "the v2, v2->v3 and v3 histories of seeds 1-6",
    )
    ap.add_argument("--steps", type=int, default=10, help="operations per history")
    ap.add_argument("--keep", help="keep the warehouse here instead of a temporary folder")
    ap.add_argument(
        "--no-consumer",
        action="store_true",
        help="no stream_changes consumer during the writing (it checks mor against mor)",
    )
    args = ap.parse_args(argv)

    warehouse = Path(args.keep or tempfile.mkdtemp(prefix="mor-oracle-"))
    try:
        spark = iceberg_session(warehouse, small_data=True)
    except RuntimeUnavailable as e:
        print(f"oracle: the Iceberg runtime cannot be set up here: {e}")
        return 2
    import random

    started = time.monotonic()
    coverage: Counter = Counter()
    oracle_failed: Counter = Counter()
    diffs: list[str] = []
    n_queries = 0
    seeds = (
        [int(x) for x in args.seeds.split(",")]
        if args.seeds
        else [args.seed + i for i in range(args.histories)]
    )
    for seed in seeds:
        rng = random.Random(seed * 7919)
        writer = Writer(spark, warehouse, seed)
        consumer = Consumer(spark, writer.h.location, random.Random(seed), str(warehouse))
        try:
            h = writer.run(args.steps, after_step=None if args.no_consumer else consumer.poll)
        except Exception:  # noqa: BLE001 - a writer failure is the harness's bug: report it
            diffs.append(f"seed {seed}: the history could not be written\n{traceback.format_exc()}")
            continue
        n, found = check_history(spark, h, rng, coverage, oracle_failed)
        n_queries += n
        diffs += found
        if args.no_consumer:
            continue
        n_queries += 1
        diffs += consumer.check(h)
        coverage.update({f"consumer stops: {k}": v for k, v in consumer.stops.items()})
        coverage["consumer batches"] += len(consumer.sink)
    spark.stop()
    if not args.keep:
        shutil.rmtree(warehouse, ignore_errors=True)

    print(
        f"oracle: {len(seeds)} histories (seeds {', '.join(map(str, seeds))}), "
        f"{n_queries} queries, {len(diffs)} differences, {time.monotonic() - started:.0f}s"
    )
    if oracle_failed:
        print(
            f"queries Iceberg's own reader could not answer (mor did): "
            f"{sum(oracle_failed.values())}"
        )
        for cause, n in oracle_failed.most_common():
            print(f"  {n:>4} x {cause}")
    print("coverage:")
    for key, count in sorted(coverage.items()):
        print(f"  {key:<28} {count}")
    for d in diffs:
        print("DIFFERENCE " + d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
