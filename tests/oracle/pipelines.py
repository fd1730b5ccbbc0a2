"""Flink's upsert sink as a writer: seeded CDC changelogs written by Apache Flink into a JDBC
catalog on PostgreSQL, read by mor at every snapshot against three truths.

    python -m tests.oracle.flink --pipelines 4 --seed 1     # the leg of `make test`
    python -m tests.oracle.flink --pipelines 40 --seed 100  # part of `make soak`

A pipeline is a generated changelog (+I, -U/+U, -D) over a primary key: keys upserted many
times inside one checkpoint and across checkpoints, deletes of keys never inserted, NULLs in
the other columns, sometimes a column added between jobs (`ALTER TABLE ... ADD`). Flink writes
it (tests/oracle/flink_job.py, in the PyFlink environment) with Iceberg's Flink sink in upsert
mode, one commit per checkpoint: partitioned by a column of the key and unpartitioned, format
v2 and v3 (deletion vectors).

The catalog is shared, not copied: a PostgreSQL server (tests/pgcatalog.py) holds Iceberg's
JDBC catalog `lake`, which Flink writes through, Iceberg's Spark runtime reads through and mor
reads by name from the user's configuration (PYICEBERG_CATALOG__LAKE__*: pyiceberg's
SqlCatalog on the same tables).

Truth, three ways, at every snapshot: the changelog folded per key in plain Python (independent
of every Iceberg reader), Flink's own batch read of the snapshot, and Iceberg's Spark reader.
mor must equal each, for the full scan, filters on key and non-key columns and aggregates
(each also evaluated on the folded rows); against Iceberg's reader also for `_file`/`_pos`,
`table_changes` over the whole history (netting to the snapshot differences) and the health
report. Exit 0 with no difference, 1 with any (each printed), 2 when Flink, PostgreSQL or
Iceberg's runtime cannot be set up (the reason printed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.oracle.run import OracleFailed, check_changes, check_health  # noqa: E402
from tests.oracle.runtime import RuntimeUnavailable, iceberg_session  # noqa: E402
from tests.pgcatalog import CATALOG, Postgres, PostgresUnavailable  # noqa: E402
from tests.trino import TRINO_VERSION, Trino, TrinoUnavailable  # noqa: E402

FLINK_ENV = ROOT / ".venv" / "flink"
FLINK_JARS = FLINK_ENV / "jars"
DB = "cdc"
NAMES = ("ann", "bob", "cy", "dee", None)


@dataclass
class Pipeline:
    """One seeded changelog and what folding it gives after each checkpoint."""

    seed: int
    partitioned: bool
    version: int
    columns: list[list[str]]  # the schema at the end: [name, Flink type]
    key: list[str]
    steps: list[dict] = field(default_factory=list)  # {"events": [...]} | {"alter": ...}
    truths: list[dict] = field(default_factory=list)  # per commit: {"columns", "rows"}
    counts: Counter = field(default_factory=Counter)

    @property
    def table(self) -> str:
        return f"t{self.seed}"

    @property
    def layout(self) -> str:
        return "Flink upsert, " + (
            "partitioned by p, key (id, p)" if self.partitioned else "unpartitioned, key (id)"
        )


def generate(seed: int, checkpoints: int | None = None) -> Pipeline:
    """A changelog as a CDC source emits it, cut into checkpoints of 100-400 events."""
    rng = random.Random(seed)
    partitioned = seed % 2 == 0
    version = 3 if (seed // 2) % 2 else 2
    columns = [
        ["id", "BIGINT"],
        ["p", "STRING"],
        ["name", "STRING"],
        ["qty", "INT"],
        ["amt", "DOUBLE"],
    ]
    key = ["id", "p"] if partitioned else ["id"]
    pl = Pipeline(seed, partitioned, version, columns, key)
    n_keys = rng.choice((30, 80, 200))
    parts = ("a", "b", "c")
    live: dict[tuple, list] = {}  # key -> row, as the sink's upserts leave it
    n_ckpt = checkpoints or rng.randint(4, 7)
    evolve_at = rng.randint(1, n_ckpt - 1) if rng.random() < 0.6 else -1

    def row(ident: int, p: str) -> list:
        vals: list[Any] = [
            ident,
            p,
            rng.choice(NAMES),
            None if rng.random() < 0.12 else rng.randint(-5, 50),
            None if rng.random() < 0.1 else round(rng.uniform(-100, 1000), 2),
        ]
        if len(pl.columns) > 5:
            vals.append(None if rng.random() < 0.4 else f"n{rng.randint(0, 9)}")
        return vals

    def key_of(vals: list) -> tuple:
        return (vals[0], vals[1]) if partitioned else (vals[0],)

    for step in range(n_ckpt):
        if step == evolve_at:
            pl.columns = [*pl.columns, ["note", "STRING"]]
            pl.steps.append(
                {
                    "alter": "ALTER TABLE {t} ADD `note` STRING",
                    "columns": [list(c) for c in pl.columns],
                }
            )
            live = {k: [*v, None] for k, v in live.items()}
            pl.counts["schema changes"] += 1
        events: list[list] = []
        for _ in range(rng.randint(100, 400)):
            ident = rng.randrange(n_keys)
            p = rng.choice(parts)
            if not partitioned:  # the key is id alone: its row keeps the p it was written with
                k = (ident,)
                p = live[k][1] if k in live and rng.random() < 0.8 else p
            k = (ident, p) if partitioned else (ident,)
            old = live.get(k)
            r = rng.random()
            if old is None:
                if r < 0.7:
                    new = row(ident, p)
                    events.append(["+I", new])
                    live[k] = new
                elif r < 0.85:  # a delete of a key never inserted (or already deleted)
                    events.append(["-D", row(ident, p)])
                    pl.counts["deletes of absent keys"] += 1
                else:  # an update whose before-image the source never sent
                    new = row(ident, p)
                    events.append(["+U", new])
                    live[k] = new
            elif r < 0.5:
                new = row(ident, p)
                events += [["-U", old], ["+U", new]]
                live[k] = new
            elif r < 0.65:  # an insert of a live key: the upsert replaces it
                new = row(ident, p)
                events.append(["+I", new])
                live[k] = new
            else:
                events.append(["-D", old])
                del live[k]
        for kind, _ in events:
            pl.counts[kind] += 1
        pl.counts["events"] += len(events)
        pl.steps.append({"events": events})
        pl.truths.append(
            {"columns": [c for c, _ in pl.columns], "rows": [list(v) for v in live.values()]}
        )
        assert all(key_of(v) == k for k, v in live.items())
    pl.counts["checkpoints"] = n_ckpt
    return pl


def spec(pipelines: list[Pipeline], pg: Postgres, warehouse: str) -> dict:
    return {
        "jars": str(FLINK_JARS),
        "catalog_name": CATALOG,
        "catalog": pg.flink_options(warehouse),
        "database": DB,
        "pipelines": [
            {
                "table": p.table,
                "columns": _first_columns(p),
                "key": p.key,
                "partition": ["p"] if p.partitioned else [],
                "version": p.version,
                "steps": p.steps,
            }
            for p in pipelines
        ],
    }


def _first_columns(p: Pipeline) -> list[list[str]]:
    n = len(p.columns) - sum(1 for s in p.steps if "alter" in s)
    return p.columns[:n]


def write(pipelines: list[Pipeline], pg: Postgres, warehouse: str, tmp: str) -> dict:
    """Flink writes every pipeline and reads back every snapshot: its output."""
    python = FLINK_ENV / "bin" / "python"
    if not python.exists() or not any(FLINK_JARS.glob("iceberg-flink-runtime-*.jar")):
        raise RuntimeUnavailable(
            f"the PyFlink environment {FLINK_ENV} or its jars are missing: run `make dev`"
        )
    spec_path, out_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "flink.json")
    with open(spec_path, "w") as f:
        json.dump(spec(pipelines, pg, warehouse), f)
    log = os.path.join(tmp, "flink.log")
    env = {**os.environ, "FLINK_LOG_DIR": tmp}
    with open(log, "wb") as out:
        proc = subprocess.run(
            [str(python), str(ROOT / "tests" / "oracle" / "flink_job.py"), spec_path, out_path],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=3600,
        )
    if proc.returncode != 0:
        tail = Path(log).read_text(errors="replace")[-3000:]
        raise RuntimeError(f"the Flink job failed (exit {proc.returncode}):\n{tail}")
    return json.loads(Path(out_path).read_text())


# ---- Trino as writer ---------------------------------------------------------------------

TRINO_COLUMNS = [
    ["id", "BIGINT"],
    ["p", "VARCHAR"],
    ["name", "VARCHAR"],
    ["qty", "INTEGER"],
    ["amt", "DOUBLE"],
]


@dataclass
class TrinoHistory:
    """Seeded DELETE / UPDATE / MERGE / INSERT statements Trino runs on a v2 table, and the
    table each leaves, by a model of the statements in plain Python."""

    seed: int
    partitioned: bool
    statements: list[str] = field(default_factory=list)
    truths: list[dict] = field(default_factory=list)  # after each statement
    counts: Counter = field(default_factory=Counter)
    version: int = 2  # Trino 476 writes format versions 1 and 2 only

    @property
    def table(self) -> str:
        return f"tr{self.seed}"

    @property
    def layout(self) -> str:
        return "Trino, partitioned by p" if self.partitioned else "Trino, unpartitioned"


def _sql(v: Any, kind: str) -> str:
    if v is None:
        return f"CAST(NULL AS {kind})"
    if kind == "VARCHAR":
        return "'" + v.replace("'", "''") + "'"
    if kind == "DOUBLE":
        return f"DOUBLE '{v!r}'"
    return f"{kind} '{v}'"


def _values(rows: list[list]) -> str:
    return ", ".join(
        "(" + ", ".join(_sql(v, t) for v, (_, t) in zip(r, TRINO_COLUMNS, strict=True)) + ")"
        for r in rows
    )


def generate_trino(seed: int, statements: int | None = None) -> TrinoHistory:
    rng = random.Random(seed * 31 + 7)
    th = TrinoHistory(seed, partitioned=seed % 2 == 1)
    rows: list[list] = []
    n_keys = rng.choice((20, 60))

    def new_row(ident: int | None = None) -> list:
        return [
            rng.randrange(n_keys) if ident is None else ident,
            rng.choice("abc"),
            rng.choice(NAMES),
            None if rng.random() < 0.15 else rng.randint(-5, 30),
            None if rng.random() < 0.1 else round(rng.uniform(-50, 500), 2),
        ]

    def gt(v: Any, x: int) -> bool:  # SQL's v > x: NULL is not greater
        return v is not None and v > x

    n = statements or rng.randint(6, 9)
    for step in range(n):
        t = "{t}"
        kind = (
            "INSERT"
            if step == 0
            else rng.choice(("INSERT", "DELETE", "DELETE", "UPDATE", "UPDATE", "MERGE", "MERGE"))
        )
        if kind == "INSERT":
            new = [new_row() for _ in range(rng.randint(20, 120))]
            th.statements.append(f"INSERT INTO {t} VALUES {_values(new)}")
            rows += new
        elif kind == "DELETE":
            how = rng.randrange(3)
            if how == 0:
                ids = sorted(rng.sample(range(n_keys), rng.randint(1, 6)))
                th.statements.append(f"DELETE FROM {t} WHERE id IN ({', '.join(map(str, ids))})")
                rows = [r for r in rows if r[0] not in ids]
            elif how == 1:
                p, x = rng.choice("abc"), rng.randint(0, 20)
                th.statements.append(f"DELETE FROM {t} WHERE p = '{p}' AND qty > {x}")
                rows = [r for r in rows if not (r[1] == p and gt(r[3], x))]
            else:
                x = rng.randrange(n_keys)
                th.statements.append(f"DELETE FROM {t} WHERE name IS NULL AND id < {x}")
                rows = [r for r in rows if not (r[2] is None and r[0] < x)]
        elif kind == "UPDATE":
            if rng.random() < 0.3:  # a row moves to another partition
                x, p = rng.randrange(n_keys), rng.choice("abc")
                th.statements.append(f"UPDATE {t} SET p = '{p}' WHERE id = {x}")
                for r in rows:
                    if r[0] == x:
                        r[1] = p
            else:
                a = rng.randrange(n_keys)
                b = a + rng.randint(0, n_keys // 3)
                th.statements.append(
                    f"UPDATE {t} SET qty = qty + 1, name = 'u{step}' WHERE id BETWEEN {a} AND {b}"
                )
                for r in rows:
                    if a <= r[0] <= b:
                        r[3] = None if r[3] is None else r[3] + 1
                        r[2] = f"u{step}"
        else:
            ids = rng.sample(range(n_keys + 10), rng.randint(3, 15))
            src = [new_row(i) for i in ids]
            th.statements.append(
                f"MERGE INTO {t} t USING (VALUES {_values(src)}) AS s(id, p, name, qty, amt) "
                "ON t.id = s.id "
                "WHEN MATCHED AND s.qty < 0 THEN DELETE "
                "WHEN MATCHED THEN UPDATE SET name = s.name, qty = s.qty, amt = s.amt "
                "WHEN NOT MATCHED THEN INSERT (id, p, name, qty, amt) "
                "VALUES (s.id, s.p, s.name, s.qty, s.amt)"
            )
            by_id = {r[0]: r for r in src}
            kept = []
            for r in rows:
                s_ = by_id.get(r[0])
                if s_ is None:
                    kept.append(r)
                elif s_[3] is not None and s_[3] < 0:
                    continue
                else:
                    kept.append([r[0], r[1], s_[2], s_[3], s_[4]])
            matched = {r[0] for r in rows}
            rows = kept + [list(s_) for s_ in src if s_[0] not in matched]
        th.counts[kind] += 1
        th.truths.append(
            {"columns": [c for c, _ in TRINO_COLUMNS], "rows": [list(r) for r in rows]}
        )
    return th


def run_trino(trino: Any, th: TrinoHistory) -> list[int]:
    """Trino runs the statements: the snapshot each leaves current (a statement that changed
    nothing may commit nothing)."""
    name = f"{CATALOG}.{DB}.{th.table}"
    cols = ", ".join(f"{c} {t}" for c, t in TRINO_COLUMNS)
    part = ", partitioning = ARRAY['p']" if th.partitioned else ""
    trino.query(f"CREATE TABLE {name} ({cols}) WITH (format_version = 2{part})")
    after = []
    for st in th.statements:
        trino.query(st.format(t=name))
        after.append(_current(trino, th.table))
    return after


def _current(trino: Any, table: str) -> int:
    rows = trino.query(
        f'SELECT snapshot_id FROM {CATALOG}.{DB}."{table}$snapshots" '
        "ORDER BY committed_at DESC LIMIT 1"
    )
    return rows[0][0]


# ---- comparing ---------------------------------------------------------------------------


def _norm(v: Any) -> Any:
    if isinstance(v, float):
        return None if math.isnan(v) else float(f"{v:.9g}")
    return v


def _bag(rows: Any) -> Counter:
    return Counter(tuple(_norm(v) for v in r) for r in rows)


def _diff(a: Counter, b: Counter) -> str:
    return (
        f"{sum(a.values())} rows vs {sum(b.values())}; only in the first: "
        f"{list((a - b).elements())[:4]}; only in the second: {list((b - a).elements())[:4]}"
    )


def mor_rows(spark: Any, sql: str, again: bool = True) -> list[tuple[str, list]]:
    """mor's rows for `sql` (the table named through the catalog `lake`), with `again` run
    twice when the table has equality deletes: cold (anti-joined: the first read), then
    resolving what the first run joined (the second read, setting resolve_at_read)."""
    from mor import mor_sql
    from mor.physical.spark import reuse
    from mor.planner.state import caches
    from mor.rules.physical import equality as resolution

    resolution.clear_resolved(caches())
    runs = [("", [tuple(r) for r in mor_sql(sql, catalog=CATALOG, spark=spark).collect()])]
    if again and (resolution.held(caches())[0] or resolution.seen(caches())):
        reuse.clear()
        again = mor_sql(sql, catalog=CATALOG, spark=spark).collect()
        runs.append((" (resolved)", [tuple(r) for r in again]))
    return runs


def iceberg_rows(spark: Any, sql: str) -> list[tuple]:
    try:
        return [tuple(r) for r in spark.sql(sql).collect()]
    except Exception as e:  # noqa: BLE001 - reported apart from differences
        raise OracleFailed(str(e).splitlines()[0][:200]) from e


def _python_answers(cols: list[str], rows: list[list], probe: int) -> dict[str, list[tuple]]:
    """The folded rows' answers to the queries `check` also asks mor: plain Python."""
    i = {c: n for n, c in enumerate(cols)}
    out = {
        "*": [tuple(r) for r in rows],
        "count": [(len(rows),)],
        "key": [(r[i["id"]], r[i["p"]], r[i["name"]]) for r in rows if r[i["id"]] == probe],
        "name": [(r[i["id"]], r[i["qty"]]) for r in rows if r[i["name"]] == "bob"],
        "qty": [(r[i["id"]],) for r in rows if r[i["qty"]] is not None and r[i["qty"]] > 20],
        "amt_null": [(r[i["id"]], r[i["p"]]) for r in rows if r[i["amt"]] is None],
    }
    groups: dict[Any, list] = {}
    for r in rows:
        groups.setdefault(r[i["p"]], []).append(r)
    agg = []
    for p, rs in groups.items():
        qty = [r[i["qty"]] for r in rs if r[i["qty"]] is not None]
        agg.append(
            (
                p,
                len(rs),
                sum(qty) if qty else None,
                min(r[i["id"]] for r in rs),
                max(r[i["id"]] for r in rs),
                sum(1 for r in rs if r[i["name"]] is not None),
            )
        )
    out["group"] = agg
    return out


QUERIES = {
    "*": "SELECT * FROM {t}",
    "count": "SELECT count(*) FROM {t}",
    "key": "SELECT id, p, name FROM {t} WHERE id = {probe}",
    "name": "SELECT id, qty FROM {t} WHERE name = 'bob'",
    "qty": "SELECT id FROM {t} WHERE qty > 20",
    "amt_null": "SELECT id, p FROM {t} WHERE amt IS NULL",
    "group": "SELECT p, count(*), sum(qty), min(id), max(id), count(name) FROM {t} GROUP BY p",
    # against Iceberg's reader only: positions are the writer's, not the changelog's
    "file_pos": "SELECT id, p, _file, _pos FROM {t}",
    "file_count": "SELECT _file, count(*), max(_pos) FROM {t} GROUP BY _file",
}


TRINO_QUERIES = ("*", "count", "group")
# run a second time from the positions the first run resolved (the other queries once: the
# Java histories of run.py run every query both ways)
TWICE = (
    "*",
    "count",
    "key",
    "group",
    "file_pos",
)  # also asked of Trino, in its SQL (same text here)


def check(
    spark: Any,
    pl: Any,
    chain: list[int],
    truths: list[dict],
    rng: random.Random,
    flink_rows: dict | None = None,
    trino: Any = None,
    refused: Counter | None = None,
) -> tuple[Counter, list[str]]:
    """Every snapshot of one table (`chain`, with the rows `truths` says it holds at each):
    mor against the truth, Iceberg's reader, Flink's read (`flink_rows`) and Trino (`trino`).
    A reader that refuses the table outright is counted in `refused`, not as a difference.
    Returns (comparisons made, by pair of readers; differences)."""
    diffs: list[str] = []
    n: Counter = Counter()
    where = f"seed {pl.seed} ({pl.layout}, v{pl.version})"
    if len(chain) != len(truths):
        return n, [f"{where}: {len(chain)} snapshots for {len(truths)} commits"]
    final_cols = truths[-1]["columns"]
    trino_name = f"{CATALOG}.{DB}.{pl.table}"
    for i, (sid, truth) in enumerate(zip(chain, truths, strict=True)):
        cols = truth["columns"]
        probe = rng.choice([r[0] for r in truth["rows"]] or [0])
        want = _python_answers(cols, truth["rows"], probe)
        # Flink reads a snapshot with the table's current schema: the folded rows, padded
        pad = tuple([None] * (len(final_cols) - len(cols)))
        padded = _bag([tuple(r) + pad for r in truth["rows"]])
        if flink_rows is not None:
            n["Flink vs the truth"] += 1
            flink = _bag(flink_rows[str(sid)])
            if flink != padded:
                diffs.append(
                    f"{where} snapshot {i} ({sid}): Flink's read vs the truth: "
                    f"{_diff(flink, padded)}"
                )
        if trino is not None:
            for q in TRINO_QUERIES:
                sql = QUERIES[q].format(t=f"{trino_name} FOR VERSION AS OF {sid}", probe=probe)
                try:
                    got = _bag(trino.query(sql))
                except Exception as e:  # noqa: BLE001 - a refusal, counted by its reason
                    if refused is None:
                        raise
                    refused[f"Trino: {str(e).splitlines()[0][:120]}"] += 1
                    break
                ref = _bag(want[q])
                n["Trino vs the truth"] += 1
                if got != ref and not (q == "*" and got == padded):
                    diffs.append(
                        f"{where} snapshot {i} ({sid}): Trino: {sql}\n  Trino vs the "
                        f"truth: {_diff(got, ref)}"
                    )
        for name, template in QUERIES.items():
            ours_sql = template.format(t=f"{DB}.{pl.table} VERSION AS OF {sid}", probe=probe)
            theirs_sql = template.format(t=f"{trino_name} VERSION AS OF {sid}", probe=probe)
            try:
                runs = mor_rows(spark, ours_sql, again=name in TWICE)
            except Exception as e:  # noqa: BLE001 - an error from mor is a difference
                diffs.append(
                    f"{where} snapshot {i}: {ours_sql}\n  error: {str(e).splitlines()[0][:300]}"
                )
                continue
            refs = []
            if name in want:
                refs.append(("the truth", _bag(want[name])))
            refs.append(("Iceberg's reader", _bag(iceberg_rows(spark, theirs_sql))))
            for how, rows in runs:
                got = _bag(rows)
                for ref_name, ref in refs:
                    n[f"mor vs {ref_name}"] += 1
                    if got != ref:
                        diffs.append(
                            f"{where} snapshot {i} ({sid}){how}: {ours_sql}\n  mor vs "
                            f"{ref_name}: {_diff(got, ref)}"
                        )
    h = _AsHistory(pl)
    n["mor vs Iceberg's reader"] += 2  # table_changes over the history, the health report
    try:
        diffs += check_changes(spark, h, rng)
    except OracleFailed as e:
        diffs.append(f"{where}: table_changes: Iceberg's reader failed: {e}")
    except Exception as e:  # noqa: BLE001 - an error from mor is a difference
        diffs.append(f"{where}: table_changes\n  error: {str(e).splitlines()[0][:300]}")
    try:
        diffs += check_health(spark, h)
    except Exception as e:  # noqa: BLE001 - an error from mor is a difference
        diffs.append(f"{where}: health\n  error: {str(e).splitlines()[0][:300]}")
    return n, diffs


def trino_chain(th: TrinoHistory, after: list[int]) -> tuple[list[int], list[dict], list[str]]:
    """The snapshots Trino's statements committed, with the model's rows at each; a statement
    that committed nothing must have changed nothing."""
    chain: list[int] = []
    truths: list[dict] = []
    bad: list[str] = []
    for k, (sid, truth) in enumerate(zip(after, th.truths, strict=True)):
        if chain and sid == chain[-1]:
            if _bag(map(tuple, truth["rows"])) != _bag(map(tuple, truths[-1]["rows"])):
                bad.append(
                    f"seed {th.seed} ({th.layout}): statement {k} committed nothing but "
                    f"changes rows in the model: {th.statements[k][:200]}"
                )
            truths[-1] = truth
            continue
        chain.append(sid)
        truths.append(truth)
    return chain, truths, bad


class _AsHistory:
    """What tests/oracle/run.py's table_changes and health checks read of a history."""

    def __init__(self, pl: Pipeline) -> None:
        self.seed = pl.seed
        self.layout = pl.layout
        self.version = pl.version
        self.table = f"{CATALOG}.{DB}.{pl.table}"
        self.location = f"{DB}.{pl.table}"
        self.catalog = CATALOG


def delete_files(spark: Any, pl: Any) -> Counter:
    rows = iceberg_rows(
        spark,
        f"SELECT content, file_format, count(*) FROM {CATALOG}.{DB}.{pl.table}.all_delete_files "
        "GROUP BY content, file_format",
    )
    kinds = {
        (1, "PARQUET"): "position delete files",
        (1, "PUFFIN"): "deletion vectors",
        (2, "PARQUET"): "equality delete files",
    }
    return Counter({kinds.get((c, f), f"{c}/{f}"): n for c, f, n in rows})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipelines", type=int, default=4, help="Flink pipelines")
    ap.add_argument("--trino", type=int, default=2, help="Trino-written histories")
    ap.add_argument("--statements", type=int, default=None, help="per Trino history (6-9)")
    ap.add_argument("--java", type=int, default=2, help="Java-written histories Trino reads")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--checkpoints", type=int, default=None, help="per pipeline (default 4-7)")
    args = ap.parse_args(argv)
    started = time.monotonic()
    pipelines = [generate(args.seed + i, args.checkpoints) for i in range(args.pipelines)]
    histories = [generate_trino(args.seed + i, args.statements) for i in range(args.trino)]
    tmp = tempfile.mkdtemp(prefix="mor-pipelines-")
    warehouse = f"file://{tmp}/wh"
    try:
        with Postgres() as pg:
            print(f"PostgreSQL {pg.version} on 127.0.0.1:{pg.port}: JDBC catalog {CATALOG!r}")
            t0 = time.monotonic()
            try:
                written = write(pipelines, pg, warehouse, tmp)
            except RuntimeUnavailable as e:
                print(f"cannot run Flink here: {e}")
                return 2
            print(
                f"Flink {written['flink']} (Iceberg {written['iceberg']}) wrote "
                f"{len(pipelines)} pipelines in {time.monotonic() - t0:.0f}s"
            )
            with Trino(pg, warehouse) as trino:
                print(
                    f"Trino {TRINO_VERSION} up in {trino.started_in:.0f}s on 127.0.0.1:{trino.port}"
                )
                t0 = time.monotonic()
                after = [run_trino(trino, th) for th in histories]
                print(
                    f"Trino ran {sum(len(th.statements) for th in histories)} statements in "
                    f"{time.monotonic() - t0:.0f}s"
                )
                os.environ.update(pg.environment(warehouse))
                try:
                    spark = iceberg_session(
                        f"file://{tmp}/java", small_data=True, conf=pg.spark_conf(warehouse)
                    )
                except RuntimeUnavailable as e:
                    print(f"cannot run the oracle here: {e}")
                    return 2
                java = [args.seed + i for i in range(args.java)]
                return _report(
                    spark,
                    trino,
                    pipelines,
                    written,
                    histories,
                    after,
                    f"file://{tmp}/java",
                    java,
                    started,
                )
    except (PostgresUnavailable, TrinoUnavailable) as e:
        print(f"cannot run the pipelines leg here: {e}")
        return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _report(
    spark: Any,
    trino: Any,
    pipelines: list[Pipeline],
    written: dict,
    histories: list[TrinoHistory],
    after: list[list[int]],
    java_wh: str,
    java_seeds: list[int],
    started: float,
) -> int:
    total: Counter = Counter()
    refused: Counter = Counter()
    diffs: list[str] = []
    n: Counter = Counter()
    for pl, w in zip(pipelines, written["pipelines"], strict=True):
        rng = random.Random(pl.seed * 7919)
        try:
            k, d = check(spark, pl, w["snapshots"], pl.truths, rng, w["flink_rows"], trino, refused)
        except Exception:  # noqa: BLE001 - the harness itself failed: report it as such
            k, d = Counter(), [f"seed {pl.seed}: harness error\n{traceback.format_exc()}"]
        n += k
        diffs += d
        files = delete_files(spark, pl)
        total.update(pl.counts)
        total.update(files)
        total["snapshots"] += len(w["snapshots"])
        print(
            f"  Flink seed {pl.seed}: {pl.layout}, v{pl.version}: {pl.counts['events']} "
            f"events ({pl.counts['deletes of absent keys']} deletes of absent keys), "
            f"{pl.counts['checkpoints']} checkpoints, {len(w['snapshots'])} snapshots, "
            f"{_files(files)}{', a column added' if pl.counts['schema changes'] else ''}"
            f": {len(d)} differences"
        )
    for th, sids in zip(histories, after, strict=True):
        rng = random.Random(th.seed * 104729)
        chain, truths, bad = trino_chain(th, sids)
        try:
            k, d = check(spark, th, chain, truths, rng, None, trino)
        except Exception:  # noqa: BLE001
            k, d = Counter(), [f"Trino seed {th.seed}: harness error\n{traceback.format_exc()}"]
        n += k
        d = bad + d
        diffs += d
        files = delete_files(spark, th)
        total.update(files)
        total["snapshots"] += len(chain)
        print(
            f"  Trino seed {th.seed}: {th.layout}, v{th.version}: "
            f"{', '.join(f'{v} {k}' for k, v in sorted(th.counts.items()))}; "
            f"{len(chain)} snapshots, {_files(files)}: {len(d)} differences"
        )
    k, d, lines = java_tables_in_trino(spark, trino, java_wh, java_seeds, refused)
    n["Trino vs Iceberg's reader (Java histories)"] += k
    diffs += d
    if lines:
        print("\n".join(lines))
    if pipelines:
        n["mor's CLI vs the truth"] += 1
        diffs += cli_reads_by_name(pipelines[0], os.path.dirname(java_wh.removeprefix("file://")))
    spark.stop()
    for d in diffs:
        print("DIFFERENCE " + d)
    for reason, k in refused.items():
        print(f"refused ({k} snapshots): {reason}")
    summary = ", ".join(f"{v} {k}" for k, v in sorted(total.items()))
    print(
        f"pipelines: {len(pipelines)} Flink, {len(histories)} Trino ({summary}); "
        f"{sum(n.values())} comparisons ({', '.join(f'{v} {k}' for k, v in sorted(n.items()))}), "
        f"{len(diffs)} differences ({time.monotonic() - started:.0f}s)"
    )
    return 1 if diffs else 0


def java_tables_in_trino(
    spark: Any, trino: Any, warehouse: str, seeds: list[int], refused: Counter
) -> tuple[int, list[str], list[str]]:
    """Iceberg's Java writer's random histories (tests/oracle/histories.py: equality deletes
    through RowDelta, Spark's DELETE/UPDATE/MERGE, schema changes) registered in the JDBC
    catalog, read by Trino at every snapshot against Iceberg's reader of the same files.
    Returns (comparisons, differences, one line per table)."""
    from tests.oracle.histories import Writer

    trino.query(f"CREATE SCHEMA IF NOT EXISTS {CATALOG}.java")
    n, diffs, lines = 0, [], []
    for seed in seeds:
        h = Writer(spark, warehouse, seed).run(8)
        trino.query(
            f"CALL {CATALOG}.system.register_table(schema_name => 'java', table_name => "
            f"'{h.name}', table_location => '{h.location}')"
        )
        ours = 0
        refusal = ""
        for sid in h.snapshots:
            want = _bag(iceberg_rows(spark, f"SELECT * FROM {h.table} VERSION AS OF {sid}"))
            sql = f"SELECT * FROM {CATALOG}.java.{h.name} FOR VERSION AS OF {sid}"
            try:
                got = _bag(trino.query(sql))
            except Exception as e:  # noqa: BLE001 - a refusal, counted by its reason
                refusal = str(e).splitlines()[0][:120]
                refused[f"Trino: {refusal}"] += 1
                continue
            n += 1
            ours += 1
            if got != want:
                diffs.append(
                    f"Java seed {seed} ({h.layout}, v{h.version}) snapshot {sid}: "
                    f"Trino vs Iceberg's reader: {_diff(got, want)}"
                )
        lines.append(
            f"  Java seed {seed}: {h.layout}, v{h.version}: {len(h.snapshots)} "
            f"snapshots, {ours} read by Trino"
            + (f" (refused the others: {refusal})" if refusal else "")
        )
    return n, diffs, lines


def cli_reads_by_name(pl: Pipeline, tmp: str) -> list[str]:
    """The CLI as a user runs it, in a process of its own: `mor run --catalog lake` with the
    catalog named only in the environment (PYICEBERG_CATALOG__LAKE__*), its own Spark session;
    the count and the sum of `qty` must be the folded changelog's."""
    rows = pl.truths[-1]["rows"]
    want = f"{len(rows)},{sum(r[3] for r in rows if r[3] is not None)}"
    sql = f"SELECT count(*), sum(qty) FROM {DB}.{pl.table}"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mor.cli",
            "run",
            "--catalog",
            CATALOG,
            "-e",
            sql,
            "--format",
            "csv",
        ],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0 or want not in proc.stdout.split():
        return [
            f"CLI `mor run --catalog {CATALOG} -e '{sql}'`: exit {proc.returncode}, want "
            f"{want!r} in {proc.stdout[-400:]!r} {proc.stderr[-800:]!r}"
        ]
    print(f"  CLI: mor run --catalog {CATALOG} -e '{sql}' --format csv -> {want}")
    return []


def _files(files: Counter) -> str:
    return ", ".join(f"{v} {k}" for k, v in sorted(files.items())) or "no delete files"


if __name__ == "__main__":
    sys.exit(main())
