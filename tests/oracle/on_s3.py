"""The object-store leg: tables on S3 (SeaweedFS on 127.0.0.1, tests/objectstore.py), read by
mor and by Iceberg's own reader, through s3a on Spark and pyiceberg's FileIO on the driver.

1. Random merge-on-read histories written by Iceberg's Java writer into a Hadoop catalog on
   `s3a://whs/wh` (position deletes, deletion vectors, equality deletes through RowDelta, as
   tests/oracle/histories.py writes them), every query of the local oracle through mor (the
   table by path: its `version-hint.text` read from the store) and Iceberg's reader; mor's
   driver reaches the store through the AWS SDK environment (`AWS_ENDPOINT_URL`, keys).
2. The real tables of tests/realdata copied to `s3://whs/realdata/...` and read by path,
   recorded paths mapped to `s3://` (which mor reads as `s3a://`), against expected results.
3. A table written by pyiceberg through SeaweedFS's Iceberg REST catalog (S3 Tables bucket
   `lake`: `s3://` paths, a name mapping), read by name with the catalog, against pyiceberg's
   own scan; the CLI (`run`, `explain`, `health`, `config`) against that catalog named in a
   `.pyiceberg.yaml`, in sessions it starts itself: given the store's s3a settings and no
   jar, it adds hadoop-aws of Spark's Hadoop (and says so); told not to, the error names the
   coordinates; `run --io` for a table by path with no AWS environment at all.
4. convert-equality-deletes of a v2 table through that REST catalog, on the session checked.

Spark reaches the store with hadoop-aws of the Hadoop its pyspark ships, in
`spark.jars.packages`. `--mode`:
- `classic`: one local session with Iceberg's runtime and s3a, for the writer, Iceberg's reader
  and mor.
- `connect`: the histories are written by such a session, which then stops; a Spark Connect
  server on 127.0.0.1 started with the s3a and Iceberg packages and the same catalog serves
  Iceberg's reader and mor (and the CLI, with `--remote`) for everything else.
- `both`: the histories written by a classic session, then everything checked through Spark
  Connect (the CI's Spark 4.1 run; `classic` checks them on a classic session, which `make
  soak` runs, and the 3.5 leg's `plain` run checks the other parts on a classic session).
- `plain`: for a pyspark Iceberg publishes no runtime for: no history can be written and there
  is no Iceberg reader, so parts 2 to 4 only, on a session with s3a alone (said so in the
  output).

Prints `on S3 (<mode>, pyspark X): ... N differences`; exit 1 on any difference, 2 when the
store or the Iceberg runtime cannot be set up (the reason printed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.objectstore import (  # noqa: E402
    KEY,
    NOGRANT_KEY,
    NOGRANT_SECRET,
    SECRET,
    SeaweedFS,
    StoreUnavailable,
)
from tests.oracle.histories import Writer  # noqa: E402
from tests.oracle.run import check_history  # noqa: E402
from tests.oracle.runtime import (  # noqa: E402
    RuntimeUnavailable,
    iceberg_aws_coordinates,
    iceberg_coordinates,
    iceberg_session,
    merged,
    packages_conf,
)

REALDATA = ROOT / "tests" / "realdata"


def _mor_cli(argv: Any, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """`mor <argv>` in a process of its own, as a user runs it; its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "mor.cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _bag(rows: list[Any]) -> Counter:
    return Counter(tuple(str(v) for v in r) for r in rows)


def write_histories(
    spark: Any, store: SeaweedFS, seeds: list[int], steps: int
) -> tuple[list, list]:
    """The Java writer's histories on s3a://whs/wh: (histories, differences)."""
    written, diffs = [], []
    for seed in seeds:
        try:
            written.append(Writer(spark, "s3a://whs/wh", seed, fs=store.arrow_fs()).run(steps))
        except Exception:  # noqa: BLE001 - a writer failure is the harness's bug: report it
            diffs.append(f"seed {seed}: the history could not be written\n{traceback.format_exc()}")
    return written, diffs


def histories(spark: Any, written: list[Any], seeds: list[int]) -> tuple[int, list[str]]:
    coverage: Counter = Counter()
    oracle_failed: Counter = Counter()
    diffs: list[str] = []
    n = 0
    for h in written:
        q, found = check_history(spark, h, random.Random(h.seed * 7919), coverage, oracle_failed)
        n += q
        diffs += found
    print("  coverage: " + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items())))
    for cause, k in oracle_failed.most_common():
        print(f"  Iceberg's reader could not answer {k} x: {cause}")
    # the leg exists to read every delete kind from the store: a seed range that writes none
    # of one kind is the harness's fault, not a pass
    need = {
        "row-level deletes": sum(coverage[f"sql {k}"] for k in ("DELETE", "UPDATE", "MERGE")),
        "deletion vectors": coverage["deletion vectors (live)"]
        + coverage["deletion vectors replaced"],
        "equality deletes": sum(v for k, v in coverage.items() if k.startswith("eq {")),
    }
    for kind, count in need.items():
        if not count:
            diffs.append(f"histories of seeds {seeds} wrote no {kind}: choose other seeds")
    print(f"  histories: {len(written)} (seeds {seeds}), {n} queries, {need}")
    return n, diffs


def realdata(spark: Any, store: SeaweedFS, every: bool = True) -> tuple[int, list[str]]:
    """Each real table uploaded under s3://whs/realdata/<folder>, every snapshot by path (its
    current one alone unless `every`)."""
    from mor import mor_sql
    from mor.planner.errors import MetadataError

    tables = json.loads((REALDATA / "tables.json").read_text())
    expected = json.loads((REALDATA / "expected_results.json").read_text())
    uploaded: set[str] = set()
    diffs, n = [], 0
    for name, t in tables.items():
        top = t["maps_to"].split("/")[0]
        if top not in uploaded:
            store.upload_tree(REALDATA / top, "whs", f"realdata/{top}")
            uploaded.add(top)
        where = f"s3://whs/realdata/{t['maps_to']}"
        pm = {t["prefix_in_files"]: where}
        at = f"iceberg_scan('s3://whs/realdata/{t['metadata']}')"
        for snap in expected[name]["snapshots"]:
            if not every and snap["snapshot_id"] != t["current_snapshot_id"]:
                continue
            n += 1
            sql = f"SELECT * FROM {at} VERSION AS OF {snap['snapshot_id']}"
            try:
                rows = mor_sql(sql, path_map=pm, spark=spark).collect()
            except MetadataError as e:
                if "unreadable" not in snap:
                    diffs.append(f"realdata {name} @ {snap['snapshot_id']}: {e}")
                continue
            if "unreadable" in snap:
                diffs.append(f"realdata {name} @ {snap['snapshot_id']}: read an unreadable one")
                continue
            if "sorted_keys_field_1" in snap:
                got = sorted(r[0] for r in rows)
                ok = got == snap["sorted_keys_field_1"]
            else:
                ok = _bag(rows) == Counter(tuple(r) for r in snap["rows_by_field_id"])
            if not ok or len(rows) != snap["row_count"]:
                diffs.append(f"realdata {name} @ {snap['snapshot_id']}: {len(rows)} rows differ")
    which = "snapshots" if every else "current snapshots"
    print(f"  real tables: {len(tables)} tables, {n} {which} by path on s3://")
    return n, diffs


def rest_catalog(
    spark: Any, store: SeaweedFS, tmp: Path, remote: str | None, every: bool = True
) -> tuple[int, list[str]]:
    """A pyiceberg table through the REST catalog, by name; the CLI against that catalog, in
    sessions it starts (given the store's s3a settings, no jar: it adds hadoop-aws itself) or
    on the Connect server at `remote`."""
    import pyarrow as pa

    from mor import explain, mor_sql

    cat = store.rest_catalog("sw", "s3://lake")
    if not cat.table_exists("ns.t"):  # made once a store (a second pass reads it again)
        cat.create_namespace("ns")
        schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.float64())])
        t = cat.create_table("ns.t", schema=schema)
        with t.update_spec() as spec:
            spec.add_identity("p")
        for k in range(3):
            ids = list(range(k * 100, k * 100 + 100))
            t.append(
                pa.table(
                    {"id": ids, "p": [f"p{i % 3}" for i in ids], "v": [i / 7 for i in ids]},
                    schema=schema,
                )
            )
        t.delete(f"id in ({', '.join(str(i) for i in range(0, 300, 5))})")  # copy-on-write
    t = cat.load_table("ns.t")
    theirs = t.scan().to_arrow()
    diffs, n = [], 0
    queries = {
        "SELECT id, p, v FROM ns.t": [tuple(r.values()) for r in theirs.to_pylist()],
        "SELECT count(*) FROM ns.t": [(theirs.num_rows,)],
        "SELECT p, count(*) FROM ns.t GROUP BY p": list(
            Counter(r["p"] for r in theirs.to_pylist()).items()
        ),
        "SELECT id FROM ns.t WHERE p = 'p1' AND id > 150": [
            (r["id"],) for r in theirs.to_pylist() if r["p"] == "p1" and r["id"] > 150
        ],
    }
    for sql, want in queries.items():
        n += 1
        got = mor_sql(sql, catalog=cat, spark=spark).collect()
        if _bag(got) != _bag(want):
            diffs.append(f"REST ns.t: {sql}: {len(got)} rows, pyiceberg {len(want)}")
    text = explain("SELECT count(*) FROM ns.t", catalog=cat, check=False)
    if "paths     s3://lake/... read as s3a://lake/..." not in text:
        diffs.append("REST ns.t: EXPLAIN does not show s3:// read as s3a://\n" + text)

    # the CLI, the catalog named in a .pyiceberg.yaml, Spark's s3a set in mor's config file
    home = tmp / "pyiceberg-home"
    home.mkdir(exist_ok=True)
    (home / ".pyiceberg.yaml").write_text(
        "catalog:\n  sw:\n    type: rest\n"
        f"    uri: {store.rest_uri}\n    warehouse: s3://lake\n    credential: {KEY}:{SECRET}\n"
        + "".join(f"    {k}: {v}\n" for k, v in store.io_properties().items())
    )
    conf = tmp / "mor.toml"
    conf.write_text(
        "[spark]\n"
        # the store's s3a settings, no jar: a session the CLI starts adds hadoop-aws itself,
        # resolved through Spark's own Ivy cache as any other
        + "".join(f'"{k}" = "{v}"\n' for k, v in store.s3a_conf().items())
        + '"spark.sql.shuffle.partitions" = "2"\n'
        # the same catalog under another name, from mor's own config file
        + "[catalogs.sw2]\n"
        + f'type = "rest"\nuri = "{store.rest_uri}"\nwarehouse = "s3://lake"\n'
        + f'credential = "{KEY}:{SECRET}"\n'
        + "".join(f'"{k}" = "{v}"\n' for k, v in store.io_properties().items())
    )
    bare = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env = {**bare, "PYICEBERG_HOME": str(home), "MOR_CONFIG": str(conf)}

    on = ["--remote", remote] if remote else []

    def cli(*args: str, env: dict = env) -> subprocess.CompletedProcess:
        if args[0] in ("run", "explain"):
            args = (args[0], *on, *args[1:])
        return _mor_cli(args, env, tmp)

    live = theirs.num_rows
    total = sum(theirs.column("id").to_pylist())
    checks = [
        (
            cli(
                "run",
                "--catalog",
                "sw",
                "-e",
                "SELECT count(*), sum(id) FROM ns.t",
                "--format",
                "csv",
            ),
            f"{live},{total}",
        ),
        (
            cli("explain", "--catalog", "sw", "--no-check", "-e", "SELECT * FROM ns.t"),
            "read as s3a://lake/",
        ),
        (cli("health", "ns.t", "--catalog", "sw", "--format", "json"), '"data_files"'),
    ]
    if every:  # the same catalog named in mor's config file: a JVM more
        checks.append(
            (
                cli(
                    "run", "--catalog", "sw2", "-e", "SELECT count(*) FROM ns.t", "--format", "csv"
                ),
                str(live),
            )
        )
    # how the session gets s3a: added by mor to a session it starts, and said so; the server's
    # own on Spark Connect
    from mor.physical.spark.s3a import hadoop_version, s3a_coordinates, spark_jars

    coords = s3a_coordinates(hadoop_version(spark_jars()) or "?")
    reads = ("--catalog", "sw", "-e", "SELECT sum(id) FROM ns.t")
    if remote:
        checks.append((cli("explain", *reads), "s3a       the Spark Connect server reads them"))
    else:
        starts = f"s3a       a session mor starts to run it gets {coords} in spark.jars.packages"
        checks += [
            (cli("explain", "--analyze", *reads), f"s3a       session mor started: {coords} in"),
            (cli("explain", "--no-check", *reads), starts),
            (cli("config"), f"starts for s3a:// paths gets {coords} in spark.jars.packages"),
        ]
        if every:  # Spark analyses the query alone: a session without s3a (a JVM more)
            checks.append((cli("explain", *reads), starts))
    # a table by path with no AWS environment: FileIO properties from --io only
    path = t.metadata_location
    io = [f"--io={k}={v}" for k, v in store.io_properties().items()]
    checks.append(
        (
            cli(
                "run", *io, "-e", f"SELECT count(*) FROM iceberg_scan('{path}')", "--format", "csv"
            ),
            str(live),
        )
    )
    # without them, one line naming what could not be read, within seconds
    started = time.monotonic()
    bad = cli(
        "run",
        "-e",
        f"SELECT count(*) FROM iceberg_scan('{path}')",
        "--io=s3.endpoint=http://127.0.0.1:9",
        "--io=s3.connect-timeout=2",
    )
    waited = time.monotonic() - started
    for proc, want in checks:
        n += 1
        if proc.returncode != 0 or want not in proc.stdout:
            diffs.append(
                f"CLI {proc.args[3:]}: exit {proc.returncode}, want {want!r} in\n"
                f"{proc.stdout[-800:]}{proc.stderr[-800:]}"
            )
    n += 1
    err = bad.stderr.strip().splitlines()
    if bad.returncode == 0 or len(err) != 1 or path not in err[0] or waited > 60:
        diffs.append(
            f"CLI with an unreachable endpoint: exit {bad.returncode} after {waited:.0f}s, "
            f"stderr {bad.stderr[-800:]!r}"
        )
    if not remote and every:  # told not to add it: one line naming the coordinates to add
        n += 1
        off = cli("run", "--set", "s3a_packages=false", *reads)
        err = off.stderr.strip().splitlines()
        want = f"spark.jars.packages={coords}"
        if off.returncode != 1 or len(err) != 1 or want not in err[0]:
            diffs.append(
                f"CLI with s3a_packages=false: exit {off.returncode}, want one line naming "
                f"{want!r}: {off.stderr[-800:]!r}"
            )
        else:
            print(f"  without hadoop-aws: {err[0][:200]}")
    print(
        f"  REST catalog: {n} checks (API, CLI run/explain/health/config, --io by path"
        + (f", CLI on Spark Connect {remote})" if remote else ", s3a added by mor)")
    )
    return n, diffs


def maintenance(spark: Any, store: SeaweedFS) -> tuple[int, list[str]]:
    """convert-equality-deletes through the REST catalog on S3: a v2 table whose equality
    deletes (written by mor's fixture writer through pyiceberg's FileIO) reach two data files
    is converted on this session; its rows read the same through mor and pyiceberg (which
    refuses equality deletes), and none is left. (SeaweedFS's table buckets refuse `.puffin`
    objects, so a v3 table's deletion vectors cannot be written there.)"""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from mor import mor_sql
    from mor.maintenance import convert_equality_deletes
    from mor.writer.tables import TableWriter

    cat = store.rest_catalog("sw", "s3://lake")
    if not cat.namespace_exists("ns"):
        cat.create_namespace("ns")
    name = f"ns.eq{random.randrange(1 << 30)}"  # a new table each pass
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "s", StringType(), required=False),
    )
    w = TableWriter(cat, name, schema)
    for lo in (0, 10):
        ids = list(range(lo, lo + 10))
        w.append(pa_table(ids))
    w.commit(deletes=[w.equality_delete_file([1], [{1: 3}, {1: 12}, {1: None}])])

    def rows() -> Counter:
        return _bag(mor_sql(f"SELECT id, s FROM {name}", catalog=cat, spark=spark).collect())

    before = rows()
    report = convert_equality_deletes(name, catalog=cat, spark=spark)
    diffs = []
    after = rows()
    py = _bag([tuple(r.values()) for r in cat.load_table(name).scan().to_arrow().to_pylist()])
    if report.snapshot is None or report.positions != 2 or len(report.removed) != 1:
        diffs.append(f"REST conversion of {name}: {report.line()}")
    if not (after == before == py) or len(before) != 18:
        diffs.append(f"REST conversion of {name}: {len(before)} rows before, {len(after)} after")
    print(f"  REST catalog, convert-equality-deletes on S3: {report.line()}")
    return 3, diffs


def _expire_token(catalog: Any) -> None:
    """The catalog's OAuth2 token as it is once expired: refused by the server (401)."""
    manager = catalog._session.auth.auth_manager
    assert manager._token, "pyiceberg keeps its OAuth2 token elsewhere now: follow it"
    manager._token = "expired-token"


def _no_keys(store: SeaweedFS) -> dict[str, str]:
    """The store's s3a settings for a session the CLI starts, with the keys of an identity
    that reaches nothing: what Spark reads, it reads with the table's vended credentials."""
    conf = dict(store.s3a_conf())
    conf["spark.hadoop.fs.s3a.access.key"] = NOGRANT_KEY
    conf["spark.hadoop.fs.s3a.secret.key"] = NOGRANT_SECRET
    return conf


@contextlib.contextmanager
def _no_grant_environment() -> Iterator[None]:
    """The AWS environment of a user whose own keys reach nothing in the store: only what
    the catalog vends can read a table's files."""
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ACCESS_KEY_ID=NOGRANT_KEY, AWS_SECRET_ACCESS_KEY=NOGRANT_SECRET)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def vended(
    spark: Any, store: SeaweedFS, tmp: Path, remote: str | None, iceberg: bool
) -> tuple[int, list[str]]:
    """Tables behind the REST catalog that only its vended credentials can read: the bucket
    `vault` refuses the user's own keys (the AWS environment and Spark's s3a settings for it
    hold an identity with no grant), and the catalog vends each table credentials for its own
    prefix (valid 15 minutes). Two tables of that bucket, each with its credentials, read in
    one query; position and equality deletes; `table_changes`; convert-equality-deletes and
    compact committing through the catalog, compaction's tasks writing with the table's
    credentials; every result against the rows the writes leave (and pyiceberg's own scan
    once no equality delete is left, and Iceberg's reader through its own REST catalog on the
    session when `iceberg`, before and after each commit). A user the catalog does not
    grant: one line, exit 1."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from mor import MorError, mor_sql, stream_changes
    from mor.maintenance import compact, convert_equality_deletes
    from mor.planner.settings import applied
    from mor.writer.tables import TableWriter

    diffs: list[str] = []
    n = 0
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "s", StringType(), required=False),
    )
    with _no_grant_environment():
        cat = store.vended_catalog("vault", "s3://vault")
        if not cat.namespace_exists("ns"):
            cat.create_namespace("ns")
        a, b = (f"ns.{x}{random.randrange(1 << 30)}" for x in "ab")
        wa = TableWriter(cat, a, schema)
        _, first = wa.append(pa_table(list(range(0, 10))))
        wa.append(pa_table(list(range(10, 20))))
        wa.commit(deletes=[wa.position_delete_file({first[0].file_path: [0, 5]}, first[0])])
        wa.commit(deletes=[wa.equality_delete_file([1], [{1: 3}, {1: 12}])])
        TableWriter(cat, b, schema).append(pa_table(list(range(5, 15))))
        live_a = [i for i in range(20) if i not in (0, 5, 3, 12)]
        expected = Counter((str(i), f"s{i}") for i in live_a if 5 <= i < 15)

        def joined() -> Counter:
            sql = f"SELECT x.id, x.s FROM {a} x JOIN {b} y ON x.id = y.id"
            return _bag(mor_sql(sql, catalog=cat, spark=spark).collect())

        def whole() -> Counter:
            return _bag(mor_sql(f"SELECT id, s FROM {a}", catalog=cat, spark=spark).collect())

        def by_iceberg(what: str) -> None:
            """Iceberg's reader (its REST catalog `vault`, its S3FileIO with the vended
            credentials) against mor's rows."""
            nonlocal n
            if not iceberg:
                return
            n += 1
            theirs = _bag(spark.sql(f"SELECT id, s FROM vault.{a}").collect())
            ours = whole()
            if theirs != ours:
                diffs.append(f"vended {a}: {what}: Iceberg's reader {sorted(theirs - ours)}, "
                             f"mor {sorted(ours - theirs)}")  # fmt: skip

        want = Counter((str(i), f"s{i}") for i in live_a)
        by_iceberg("written")
        steps: list[tuple[str, Any, Counter]] = [("two tables joined", joined, expected)]
        steps.append(("the table", whole, want))
        changes_sql = f"SELECT id, _change_type FROM table_changes('{a}')"
        inserted = Counter((str(i), "INSERT") for i in range(20))
        deleted = Counter((str(i), "DELETE") for i in (0, 5, 3, 12))
        steps.append(
            (
                "table_changes",
                lambda: _bag(mor_sql(changes_sql, catalog=cat, spark=spark).collect()),
                inserted + deleted,
            )
        )
        for what, got, expect in steps:
            n += 1
            rows = got()
            if rows != expect:
                diffs.append(f"vended {a}: {what}: {sorted(rows)} != {sorted(expect)}")
        if not remote:
            # the same read with Spark left to its own s3a settings is refused: the rows above
            # came through the table's credentials, not the session's
            n += 1
            try:
                mor_sql(
                    f"SELECT sum(id) FROM {a}",
                    catalog=cat,
                    spark=spark,
                    settings={"table_store_access": False},
                ).collect()
                diffs.append(f"vended {a}: read with the session's own keys was not refused")
            except Exception as e:  # noqa: BLE001 - the store's refusal, whatever Spark raises
                if "403" not in str(e) and "AccessDenied" not in str(e) and "denied" not in str(e):
                    diffs.append(f"vended {a}: refused for another reason: {str(e)[:200]}")
        # `mor changes` a commit a batch, the catalog's OAuth2 token expired before each load
        # and before the commit below (pyiceberg fetches a new one on the 401)
        n += 1
        consumed: Counter = Counter()
        batches = 0
        refreshed = []
        fetch = cat._refresh_token
        cat._refresh_token = lambda: (refreshed.append(1), fetch())[1]
        for batch in stream_changes(a, tmp / f"cp-{a}", catalog=cat, spark=spark, max_commits=1):
            consumed += _bag(batch.df.select("id", "_change_type").collect())
            batch.commit()
            batches += 1
            _expire_token(cat)
        if consumed != inserted + deleted or batches != 4:
            diffs.append(f"vended {a}: mor changes: {batches} batches, {sorted(consumed)}")
        _expire_token(cat)
        report = convert_equality_deletes(a, catalog=cat, spark=spark)
        if len(refreshed) < batches:  # the server refused each expired token: one fetch each
            diffs.append(f"vended {a}: {len(refreshed)} token fetches for {batches} expiries")
        print(f"  an expired OAuth2 token, {batches + 1} times: {len(refreshed)} new ones fetched")
        n += 1
        if report.snapshot is None or whole() != want:
            diffs.append(f"vended {a}: after conversion: {report.line()}")
        by_iceberg("converted")
        # compaction on an S3 Tables bucket, which refuses folder requests (SeaweedFS answers
        # a HEAD of a folder there with 403, whoever asks, as AWS's S3 Tables do): Spark's
        # file commit protocol cannot write there (one line, the table as it was); the tasks'
        # own pyarrow writer (compaction_writer auto picks it: the table's store settings are
        # known) writes the files straight to their paths with the vended credentials
        n += 2
        head = cat.load_table(a).metadata.current_snapshot_id
        try:
            with applied({"compaction_writer": "spark"}):
                compact(a, catalog=cat, spark=spark, delete_file_threshold=1, min_input_files=1)
            diffs.append(f"vended {a}: Spark's writer wrote to an S3 Tables bucket")
        except MorError as e:
            refusal = str(e)
            if "\n" in refusal or "compaction's Spark job cannot write" not in refusal:
                diffs.append(f"vended {a}: compaction's refusal: {refusal[:300]}")
        if cat.load_table(a).metadata.current_snapshot_id != head:
            diffs.append(f"vended {a}: a refused compaction changed the table")
        print(f"  Spark's writer on an S3 Tables bucket: {refusal[:160]}")
        _expire_token(cat)
        done = compact(a, catalog=cat, spark=spark, delete_file_threshold=1, min_input_files=1)
        table = cat.load_table(a)
        py = _bag([tuple(r.values()) for r in table.scan().to_arrow().to_pylist()])
        if done.snapshot is None or whole() != want or py != want:
            diffs.append(f"vended {a}: after compaction ({done.line()}): pyiceberg {len(py)}")
        left = [t for t in table.scan().plan_files() if t.delete_files]
        if left or len(done.written) != 1:
            diffs.append(f"vended {a}: compaction left {len(left)} files with deletes")
        by_iceberg("compacted")
        print(f"  vended credentials: {report.line()}")
        print(f"  compaction, vended credentials: {done.line()}")
        # DELETE through the vending catalog: its position delete file written with the
        # table's credentials, committed through the catalog, read by mor, pyiceberg and
        # Iceberg's reader
        n += 1
        _expire_token(cat)
        gone = mor_sql(f"DELETE FROM {a} WHERE id % 4 = 1", catalog=cat, spark=spark).collect()
        live_a = [i for i in live_a if i % 4 != 1]
        want = Counter((str(i), f"s{i}") for i in live_a)
        table = cat.load_table(a)
        py = _bag([tuple(r.values()) for r in table.scan().to_arrow().to_pylist()])
        if gone[0][0] != 4 or whole() != want or py != want:
            diffs.append(f"vended {a}: after DELETE ({gone}): pyiceberg {sorted(py)}")
        by_iceberg("deleted")
        print(f"  DELETE, vended credentials: {gone[0][0]} rows, snapshot {gone[0][1]}")
        if iceberg:  # v3 where Iceberg's reader reads it too (4.1 through Connect, soak)
            n, found = _vended_v3(spark, cat, schema, n, iceberg)
            diffs += found
        # a user the catalog grants nothing: one line, no data, from the API and the CLI
        n += 2
        denied = store.vended_catalog("nogrant", "s3://vault", NOGRANT_KEY, NOGRANT_SECRET)
        try:
            mor_sql(f"SELECT * FROM {a}", catalog=denied, spark=spark).collect()
            diffs.append(f"vended {a}: a user without the grant read the table")
        except MorError as e:
            if "\n" in str(e) or a.split(".")[1] not in str(e):
                diffs.append(f"vended {a}: the refusal is not one line naming the table: {e}")

        def cli_as(key: str, secret: str, sql: str) -> subprocess.CompletedProcess:
            """`mor run` as a new user runs it: the catalog in a .pyiceberg.yaml with OAuth2
            client credentials and the store's endpoint, no storage key; AWS_* keys that
            reach nothing; the session the CLI starts (or the Connect server)."""
            home = tmp / f"home-{key}"
            home.mkdir(exist_ok=True)
            (home / ".pyiceberg.yaml").write_text(
                "catalog:\n  vault:\n    type: rest\n"
                f"    uri: {store.rest_uri}\n    warehouse: s3://vault\n"
                f"    credential: {key}:{secret}\n"
                f"    s3.endpoint: {store.endpoint}\n"
            )
            (home / "mor.toml").write_text(
                "[spark]\n" + "".join(f'"{k}" = "{v}"\n' for k, v in _no_keys(store).items())
            )
            env = {**os.environ, "PYICEBERG_HOME": str(home), "MOR_CONFIG": str(home / "mor.toml")}
            on = ["--remote", remote] if remote else []
            argv = ["run", *on, "--catalog", "vault", "--format", "csv", "-e", sql]
            return _mor_cli(argv, env, tmp)

        n += 1
        # a DELETE and then a query, as a new user runs them
        ok = cli_as(
            KEY, SECRET, f"DELETE FROM {a} WHERE id = 19; SELECT count(*), sum(id) FROM {a}"
        )
        live_a = [i for i in live_a if i != 19]
        want_line = f"{len(live_a)},{sum(live_a)}"
        if "deleted 1 rows of 1 data files" not in ok.stdout:
            diffs.append(f"vended: mor run's DELETE: {ok.stdout[-300:]} {ok.stderr[-300:]}")
        if ok.returncode != 0 or want_line not in ok.stdout:
            diffs.append(
                f"vended: mor run: exit {ok.returncode}: {ok.stdout[-200:]} {ok.stderr[-400:]}"
            )
        print(f"  mor run through the vending catalog: {ok.stdout.strip().splitlines()[-1:]}")
        proc = cli_as(NOGRANT_KEY, NOGRANT_SECRET, f"SELECT * FROM {a}")
        lines = proc.stderr.strip().splitlines()
        if proc.returncode != 1 or len(lines) != 1 or proc.stdout.strip():
            diffs.append(f"vended: CLI without the grant: exit {proc.returncode}, {lines[-3:]}")
        print(f"  without the grant: {lines[-1] if lines else '(nothing on stderr)'}")
    return n, diffs


def _vended_v3(spark: Any, cat: Any, schema: Any, n: int, iceberg: bool) -> tuple[int, list[str]]:
    """A v3 table behind the vending catalog (its server writes the v3 metadata): two appends,
    a position and an equality delete, an upgrade to v3; its conversion refused in one line
    (the bucket refuses the Puffin file), then compacted (each row's lineage kept); mor's
    rows, and Iceberg's reader's when `iceberg`, after each step."""
    from mor import MorError, mor_sql
    from mor.maintenance import compact, convert_equality_deletes
    from mor.writer.tables import TableWriter

    diffs: list[str] = []
    c = f"ns.c{random.randrange(1 << 30)}"
    w = TableWriter(cat, c, schema)
    _, first = w.append(pa_table(list(range(0, 10))))
    w.append(pa_table(list(range(10, 20))))
    w.commit(deletes=[w.position_delete_file({first[0].file_path: [1]}, first[0])])
    w.commit(deletes=[w.equality_delete_file([1], [{1: 4}, {1: 15}])])
    # upgraded by the catalog, as most v3 tables are made, its v2 deletes kept (pyiceberg
    # 0.12's transaction refuses version 3; the REST server applies the update and writes
    # the metadata; mor's test writer writes v2 files only)
    from pyiceberg.table.update import AssertTableUUID, UpgradeFormatVersionUpdate

    t = cat.load_table(c)
    cat.commit_table(
        t,
        (AssertTableUUID(uuid=t.metadata.table_uuid),),
        (UpgradeFormatVersionUpdate(format_version=3),),
    )
    want = Counter((str(i), f"s{i}") for i in range(20) if i not in (1, 4, 15))
    lineage = f"SELECT id, _row_id, _last_updated_sequence_number FROM {c}"

    def check(what: str) -> None:
        nonlocal n
        n += 1
        ours = _bag(mor_sql(f"SELECT id, s FROM {c}", catalog=cat, spark=spark).collect())
        if ours != want:
            diffs.append(f"vended v3 {c}: {what}: {sorted(ours ^ want)}")
        if iceberg:
            n += 1
            theirs = _bag(spark.sql(f"SELECT id, s FROM vault.{c}").collect())
            if theirs != ours:
                diffs.append(f"vended v3 {c}: {what}: Iceberg's reader {sorted(theirs ^ ours)}")
        rows = mor_sql(lineage, catalog=cat, spark=spark).collect()
        got = {r[0]: (r[1], r[2]) for r in rows}
        if what == "written":
            lineages[what] = got
            return
        # each row keeps the id and sequence number it had; a row of the upgrade's files had
        # none (no commit assigned ids yet) and inherits one, each row its own
        was = lineages["written"]
        kept = all(got.get(i) == v for i, v in was.items() if v[0] is not None and i in got)
        ids = [v[0] for v in got.values()]
        if not kept or (what == "compacted" and (None in ids or len(set(ids)) != len(ids))):
            diffs.append(f"vended v3 {c}: {what}: row lineage {sorted(was.items())[:3]} -> "
                         f"{sorted(got.items())[:3]}")  # fmt: skip

    lineages: dict[str, dict] = {}
    check("written")
    # the conversion's deletion vectors go in a Puffin file, which an S3 Tables bucket
    # refuses (SeaweedFS's takes Parquet, Avro and JSON objects only, whoever asks): one
    # line, the table as it was (the JDBC part converts v3 on a plain bucket)
    n += 1
    head = cat.load_table(c).metadata.current_snapshot_id
    try:
        converted = convert_equality_deletes(c, catalog=cat, spark=spark)
        refusal = f"committed: {converted.line()}"
        diffs.append(f"vended v3 {c}: a Puffin file written to an S3 Tables bucket")
    except MorError as e:
        refusal = str(e)
        if "\n" in refusal or ".puffin" not in refusal or "refuses .puffin" not in refusal:
            diffs.append(f"vended v3 {c}: the Puffin refusal: {refusal[:300]}")
    if cat.load_table(c).metadata.current_snapshot_id != head:
        diffs.append(f"vended v3 {c}: a refused conversion changed the table")
    check("conversion refused")
    # compaction writes Parquet only: every delete applied, each row's lineage kept
    done = compact(c, catalog=cat, spark=spark, delete_file_threshold=1, min_input_files=1)
    if done.snapshot is None or [
        t for t in cat.load_table(c).scan().plan_files() if t.delete_files
    ]:
        diffs.append(f"vended v3 {c}: compaction: {done.line()}")
    check("compacted")
    print(f"  v3 behind the vending catalog, conversion: {refusal[:200]}")
    print(f"  v3 behind the vending catalog: {done.line()}")
    return n, diffs


def jdbc_maintenance(
    spark: Any, store: SeaweedFS, tmp: Path, iceberg: bool
) -> tuple[int, list[str]]:
    """convert-equality-deletes and compact of a v2 and a v3 table on S3 (a plain bucket: it
    takes Puffin files, and Spark's compaction job lists and renames there) through a SQL
    catalog (pyiceberg's, as the JDBC catalog shares it), the store given once in the AWS
    environment. v2: conversion writes position delete files (rebased over an append another
    writer commits right before it), compaction Spark's writer. v3
    (upgraded from v2, its position delete file and equality deletes kept; its metadata file
    written with pydantic, as mor's commits write it: pyiceberg 0.12 writes no v3 metadata):
    conversion writes deletion vectors in a Puffin file, compaction the tasks' pyarrow writer
    with each row's lineage. The rows after each step against the writes, pyiceberg's own
    scan (v2), and Iceberg's reader by the metadata file when `iceberg`."""
    import json

    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadataUtil
    from pyiceberg.typedef import IcebergBaseModel
    from pyiceberg.types import LongType, NestedField, StringType

    from mor import mor_sql
    from mor.maintenance import compact, convert_equality_deletes
    from mor.planner.settings import applied
    from mor.writer.tables import TableWriter
    from tests.helpers import landing

    cat = SqlCatalog(
        "jdbc",
        uri=f"sqlite:///{tmp / 'jdbc-catalog.db'}",
        warehouse="s3://whs/jdbc",
        **{"s3.endpoint": store.endpoint, "s3.region": "us-east-1"},
    )
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "s", StringType(), required=False),
    )
    diffs, n = [], 0
    for version in (2, 3) if iceberg else (2,):  # v3 where Iceberg's reader reads it
        name = f"ns.v{version}_{random.randrange(1 << 30)}"
        w = TableWriter(cat, name, schema)
        _, first = w.append(pa_table(list(range(0, 10))))
        w.append(pa_table(list(range(10, 20))))
        w.commit(deletes=[w.position_delete_file({first[0].file_path: [0, 5]}, first[0])])
        w.commit(deletes=[w.equality_delete_file([1], [{1: 3}, {1: 12}])])
        if version == 3:
            t = w.refresh()
            # as an upgrade leaves it: no row id assigned yet
            raw = {**json.loads(t.metadata.model_dump_json()), "format-version": 3}
            raw["next-row-id"] = 0
            path = f"{t.metadata.location}/metadata/00099-upgraded.metadata.json"
            with t.io.new_output(path).create() as out:
                out.write(
                    IcebergBaseModel.model_dump_json(TableMetadataUtil.parse_obj(raw)).encode()
                )
            name = f"{name}_v3"
            cat.register_table(name, path)
        want = Counter((str(i), f"s{i}") for i in range(20) if i not in (0, 5, 3, 12))

        def rows(name: str = name) -> Counter:
            return _bag(mor_sql(f"SELECT id, s FROM {name}", catalog=cat, spark=spark).collect())

        def by_iceberg(what: str, name: str = name, version: int = version) -> None:
            nonlocal n
            if not iceberg:
                return
            n += 1
            at = cat.load_table(name).metadata_location.replace("s3://", "s3a://", 1)
            theirs = _bag(spark.read.format("iceberg").load(at).select("id", "s").collect())
            if theirs != want:
                diffs.append(f"jdbc v{version}: {what}: Iceberg's reader {sorted(theirs ^ want)}")

        n += 3
        if rows() != want:
            diffs.append(f"jdbc v{version}: before maintenance: {sorted(rows())}")
        by_iceberg("written")
        landed: list[int] = []
        if version == 2:
            # another writer appends right before the conversion's commit: rebased over
            def append(attempt: int, w: TableWriter = w) -> None:
                if attempt == 1:
                    landed.append(w.append(pa_table(list(range(20, 25))))[0])

            with landing(append):
                converted = convert_equality_deletes(name, catalog=cat, spark=spark)
            if len(landed) != 1 or converted.snapshot is None:
                diffs.append(f"jdbc v2: no append landed beside the conversion: {landed}")
            elif (
                cat.load_table(name).snapshot_by_id(converted.snapshot).parent_snapshot_id
                != landed[0]
            ):
                diffs.append("jdbc v2: the conversion was not rebased over the append")
            want += Counter((str(i), f"s{i}") for i in range(20, 25))
        else:
            converted = convert_equality_deletes(name, catalog=cat, spark=spark)
        puffin = [f for f in converted.written if f.path.endswith(".puffin")]
        if converted.snapshot is None or rows() != want or bool(puffin) != (version == 3):
            diffs.append(f"jdbc v{version}: after conversion ({converted.line()})")
        by_iceberg("converted")
        # v2: Spark's writer and its file commit protocol; v3: the tasks' pyarrow writer,
        # which compaction_writer=auto takes for a table on S3 whose store settings are known
        writer = "spark" if version == 2 else "auto"
        with applied({"compaction_writer": writer}):
            done = compact(
                name, catalog=cat, spark=spark, delete_file_threshold=1, min_input_files=1
            )
        if done.snapshot is None or rows() != want:
            diffs.append(f"jdbc v{version}: after compaction ({done.line()})")
        by_iceberg("compacted")
        if version == 2:
            n += 1
            scan = cat.load_table(name).scan().to_arrow().to_pylist()
            if _bag([tuple(r.values()) for r in scan]) != want:
                diffs.append(f"jdbc v{version}: pyiceberg after compaction: {len(scan)} rows")
        print(f"  SQL catalog, v{version} on S3: {converted.line()}")
        print(f"  SQL catalog, v{version} on S3 ({writer} writer): {done.line()}")
    return n, diffs


def kills(
    spark: Any, store: SeaweedFS, tmp: Path, iceberg: bool, killing: bool = True
) -> tuple[int, list[str]]:
    """`mor compact` of a v2 table on S3 through the SQL catalog as a user runs it (a
    .pyiceberg.yaml, the store in the AWS environment, a session the CLI starts, which gets
    the s3a connector from mor): a whole run, then (`killing`) runs killed (SIGKILL) at
    moments spread over one, each on a table of its own: the table is either unchanged or
    compacted (one `replace` on the head read), and reads the same rows through mor and,
    when `iceberg`, Iceberg's reader."""
    import signal

    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from mor import mor_sql
    from mor.writer.tables import TableWriter

    props = {"uri": f"sqlite:///{tmp / 'kills.db'}", "warehouse": "s3://whs/kills"}
    props |= {"s3.endpoint": store.endpoint, "s3.region": "us-east-1"}
    cat = SqlCatalog("kills", **props)
    home = tmp / "home-kills"
    home.mkdir(exist_ok=True)
    (home / ".pyiceberg.yaml").write_text(
        "catalog:\n  kills:\n    type: sql\n" + "".join(f"    {k}: {v}\n" for k, v in props.items())
    )
    (home / "mor.toml").write_text("")
    env = {**os.environ, "PYICEBERG_HOME": str(home), "MOR_CONFIG": str(home / "mor.toml")}
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "s", StringType(), required=False),
    )
    want = Counter((str(i), f"s{i}") for i in range(20) if i not in (0, 5, 3, 12))

    def table(name: str) -> int:
        w = TableWriter(cat, name, schema)
        _, first = w.append(pa_table(list(range(0, 10))))
        w.append(pa_table(list(range(10, 20))))
        w.commit(deletes=[w.position_delete_file({first[0].file_path: [0, 5]}, first[0])])
        return w.commit(deletes=[w.equality_delete_file([1], [{1: 3}, {1: 12}])])

    def run(name: str) -> subprocess.Popen:
        argv = ["compact", "--catalog", "kills", name, "--delete-file-threshold", "1"]
        return subprocess.Popen(
            [sys.executable, "-m", "mor.cli", *argv, "--min-input-files", "1"],
            cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    diffs: list[str] = []
    table("ns.whole")
    started = time.monotonic()
    out, err = run("ns.whole").communicate(timeout=600)
    whole = time.monotonic() - started
    if "committed on main" not in out:
        diffs.append(f"kills: a whole mor compact: {out[-300:]} {err[-300:]}")
    ours = _bag(mor_sql("SELECT id, s FROM ns.whole", catalog=cat, spark=spark).collect())
    if ours != want:
        diffs.append(f"kills: after a whole mor compact: {sorted(ours)}")
    n = 1
    for frac in (0.4, 0.8, 0.97) if killing else ():
        name = f"ns.k{int(frac * 100)}"
        head = table(name)
        p = run(name)
        time.sleep(whole * frac)
        p.send_signal(signal.SIGKILL)
        p.wait()
        t = cat.load_table(name)
        snap = t.current_snapshot()
        n += 1
        kept = snap.snapshot_id == head or (
            snap.parent_snapshot_id == head and snap.summary.operation.value == "replace"
        )
        ours = _bag(mor_sql(f"SELECT id, s FROM {name}", catalog=cat, spark=spark).collect())
        if not kept or ours != want:
            diffs.append(f"kills: killed at {frac:.0%}: head {snap.snapshot_id}, {sorted(ours)}")
        if iceberg:
            n += 1
            at = t.metadata_location.replace("s3://", "s3a://", 1)
            theirs = _bag(spark.read.format("iceberg").load(at).select("id", "s").collect())
            if theirs != want:
                diffs.append(f"kills: killed at {frac:.0%}: Iceberg's reader {sorted(theirs)}")
        state = "unchanged" if snap.snapshot_id == head else "compacted"
        print(f"  mor compact on S3 killed at {frac:.0%} of {whole:.0f} s: {state}, rows right")
    return n, diffs


def pa_table(ids: list[int]) -> Any:
    import pyarrow as pa

    return pa.table({"id": pa.array(ids, pa.int64()), "s": [f"s{i}" for i in ids]})


def sizes(store: SeaweedFS) -> tuple[int, list[str]]:
    """The size check's requests: a folder holding many of the files is listed once, the
    others are asked one by one; a missing file is None either way."""
    from pyiceberg.io import load_file_io

    from mor.physical.scan.files import LIST_FROM, file_sizes
    from mor.planner.requests import REQUESTS, CountingFileIO, since

    fs = store.arrow_fs()
    many = [f"whs/sizes/many/f{i:03d}" for i in range(LIST_FROM + 4)]
    few = [f"whs/sizes/few/g{i}" for i in range(3)]
    for i, key in enumerate(many + few):
        with fs.open_output_stream(key) as out:
            out.write(b"x" * (i + 1))
    paths = [f"s3a://{k}" for k in many + few] + ["s3a://whs/sizes/many/gone", "s3a://whs/no/x"]
    want = {p: i + 1 for i, p in enumerate(paths[: len(many) + len(few)])}
    want.update({paths[-2]: None, paths[-1]: None})
    io = CountingFileIO(load_file_io(store.io_properties(), paths[0]))
    before = REQUESTS.snapshot()
    got = file_sizes(io, paths)
    used = since(before)
    diffs = []
    if got != want:
        diffs.append(f"sizes: {got} != {want}")
    if used != {"GET": 0, "HEAD": 3 + 1, "LIST": 1}:  # few/ and no/ one by one, many/ listed
        diffs.append(f"sizes: requests {used}, want HEAD 4 and LIST 1")
    # the data files and delete files of one folder are sized together: one LIST, where
    # checking each kind apart would HEAD the delete files (too few to list) one by one
    from types import SimpleNamespace

    from mor.physical.scan.guards import check_all
    from mor.planner.errors import DataFileError

    mixed = [f"whs/sizes/mixed/d{i:03d}" for i in range(LIST_FROM + 1)]
    for i, key in enumerate(mixed):
        with fs.open_output_stream(key) as out:
            out.write(b"y" * (i + 1))
    objs = [SimpleNamespace(read_path=f"s3a://{k}", size_bytes=i + 1) for i, k in enumerate(mixed)]
    data, deletes = objs[:-3], objs[-3:]
    groups = [(data, io, "data", "t"), (deletes, io, "delete", "t")]
    before = REQUESTS.snapshot()
    check_all(groups)
    together = since(before)
    if together != {"GET": 0, "HEAD": 0, "LIST": 1}:
        diffs.append(f"data and delete files of one folder: requests {together}, want LIST 1")
    deletes[-1].size_bytes += 1
    try:
        check_all(groups)
        diffs.append("a delete file of the wrong size was not refused")
    except DataFileError as e:
        if f"delete file {deletes[-1].read_path} of t is" not in str(e):
            diffs.append(f"wrong size refused with: {e}")
    print(
        f"  size check: {len(paths)} files, requests {used}; {len(mixed)} data and delete"
        f" files of one folder, {together}"
    )
    return 4, diffs


def errors(spark: Any, store: SeaweedFS) -> tuple[int, list[str]]:
    """Every store failure is one line naming the bucket or object, within seconds: on the
    driver (a wrong key, a missing bucket, a missing metadata file) and in Spark (a bucket its
    session has a wrong key for, one whose endpoint it cannot reach)."""
    from mor import explain, mor_errors, mor_sql

    tables = json.loads((REALDATA / "tables.json").read_text())
    t = next(iter(tables.values()))
    top = t["maps_to"].split("/")[0]
    for bucket in ("denied", "far"):
        store.upload_tree(REALDATA / top, bucket, top)
    at = f"s3://{{b}}/{t['metadata']}"
    pm = {t["prefix_in_files"]: f"s3://{{b}}/{t['maps_to']}"}

    def pmap(b: str) -> dict[str, str]:
        return {k: v.format(b=b) for k, v in pm.items()}

    wrong = {"s3.secret-access-key": "wrong"}
    driver = [
        (
            "a wrong key",
            lambda: explain(
                f"SELECT * FROM iceberg_scan('{at.format(b='whs')}')",
                check=False,
                path_map=pmap("whs"),
                io_properties=wrong,
            ),
            "ACCESS_DENIED",
        ),
        (
            "a missing bucket",
            lambda: explain("SELECT * FROM iceberg_scan('s3://nobucket/t')", check=False),
            "bucket 'nobucket' does not exist",
        ),
        (
            "a missing metadata file",
            lambda: explain(
                "SELECT * FROM iceberg_scan('s3://whs/none/v1.metadata.json')", check=False
            ),
            "s3://whs/none/v1.metadata.json",
        ),
    ]

    def spark_read(b: str) -> None:
        # the session's own s3a settings (the driver's reach the store: the AWS environment
        # would otherwise reach Spark too, through the table's store settings)
        df = mor_sql(
            f"SELECT * FROM iceberg_scan('{at.format(b=b)}')",
            path_map=pmap(b),
            spark=spark,
            settings={"table_store_access": False},
        )
        with mor_errors(df):
            df.collect()

    in_spark = [
        (
            "Spark's wrong key for a bucket",
            lambda: spark_read("denied"),
            "Spark has no access to s3a://denied/",
        ),
        (
            "an endpoint Spark cannot reach",
            lambda: spark_read("far"),
            "Spark cannot reach the object store for s3a://far/",
        ),
    ]
    diffs = []
    for what, call, want in driver + in_spark:
        started = time.monotonic()
        try:
            call()
            diffs.append(f"errors: {what}: no error")
            continue
        except Exception as e:  # noqa: BLE001 - what is raised is what is checked
            text, kind = str(e), type(e).__name__
        took = time.monotonic() - started
        ok = want in text and "\n" not in text and took < 10 and kind.endswith("Error")
        print(f"  error, {what}: {kind} in {took:.1f}s: {text[:160]}")
        if not ok:
            diffs.append(f"errors: {what}: {kind} after {took:.1f}s, want {want!r}: {text[:600]}")
    return len(driver) + len(in_spark), diffs


# Iceberg's reader and a Hadoop catalog `local` on the histories' warehouse, for the Connect
# server (tests/oracle/runtime.iceberg_session sets the same on a local session)
ICEBERG_CONF = {
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    "spark.sql.catalog.local": "org.apache.iceberg.spark.SparkCatalog",
    "spark.sql.catalog.local.type": "hadoop",
    "spark.sql.catalog.local.warehouse": "s3a://whs/wh",
    "spark.sql.catalog.local.cache-enabled": "false",
}


def vault_conf(store: SeaweedFS) -> dict[str, str]:
    """Iceberg's REST catalog `vault` on a session with Iceberg's runtime and AWS bundle, as
    a user of a vending catalog configures it: OAuth2 client credentials, the store's
    endpoint, no storage key (its S3FileIO reads with what the catalog vends); and s3://
    paths read through s3a."""
    at = "spark.sql.catalog.vault"
    return {
        at: "org.apache.iceberg.spark.SparkCatalog",
        f"{at}.type": "rest",
        f"{at}.uri": store.rest_uri,
        f"{at}.warehouse": "s3://vault",
        f"{at}.credential": f"{KEY}:{SECRET}",
        f"{at}.header.X-Iceberg-Access-Delegation": "vended-credentials",
        f"{at}.s3.endpoint": store.endpoint,
        f"{at}.s3.path-style-access": "true",
        f"{at}.client.region": "us-east-1",
        f"{at}.cache-enabled": "false",
        "spark.jars.packages": iceberg_aws_coordinates(),
        # Iceberg's reader of a table by its metadata file (the JDBC part): its HadoopFileIO
        # opens the s3:// paths pyiceberg records through s3a
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }


def checks(
    spark: Any,
    store: SeaweedFS,
    tmp: Path,
    written: list,
    seeds: list[int],
    remote: str | None,
    only: str | None = None,
    every_snapshot: bool = True,
) -> tuple[int, list[str]]:
    """Everything but writing histories, on `spark` (Spark Connect at `remote`): the
    histories (when some were written), the real tables, the REST catalog and the CLI, a
    conversion through the REST catalog, Spark's errors, vended credentials (`only`: that
    part alone, on a session without Iceberg's reader; `reads`: the real tables, the REST
    catalog with the CLI's own sessions, and the errors); the real tables' current snapshots
    alone unless `every_snapshot`."""
    if only == "vended":
        return vended(spark, store, tmp, remote, False)
    if only == "maintenance":
        return jdbc_maintenance(spark, store, tmp, False)
    if only == "kills":
        return kills(spark, store, tmp, False)
    if only == "reads":
        n2, d2 = realdata(spark, store, every_snapshot)
        n3, d3 = rest_catalog(spark, store, tmp, remote, every=False)
        n5, d5 = errors(spark, store)
        return n2 + n3 + n5, d2 + d3 + d5
    n1, d1 = histories(spark, written, seeds) if written else (0, [])
    n2, d2 = realdata(spark, store, every_snapshot)
    # the CLI's sessions that add nothing to what the others check (another catalog name,
    # analysis without s3a, s3a_packages off) with histories only: a JVM each, left to
    # `make soak`'s classic mode on 3.5's plain run in CI
    n3, d3 = rest_catalog(spark, store, tmp, remote, every=bool(written))
    n4, d4 = maintenance(spark, store)
    n5, d5 = errors(spark, store)
    n6, d6 = vended(spark, store, tmp, remote, bool(written))
    n7, d7 = jdbc_maintenance(spark, store, tmp, bool(written))
    # `mor compact` from the CLI, whole and killed, on a classic session with histories only
    # (`make soak`; the same commit path is killed on local tables in tests/test_compact.py,
    # and the CLI's s3a connector for maintenance is tests/test_cli.py's)
    n8, d8 = kills(spark, store, tmp, True) if written and not remote else (0, [])
    return n1 + n2 + n3 + n4 + n5 + n6 + n7 + n8, d1 + d2 + d3 + d4 + d5 + d6 + d7 + d8


def main(argv: list[str] | None = None) -> int:
    import pyspark

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("classic", "connect", "both", "plain"), default="classic")
    ap.add_argument("--seeds", type=int, nargs="*", default=[3, 4, 6])
    ap.add_argument("--steps", type=int, default=10, help="operations per history")
    ap.add_argument(
        "--only",
        choices=("vended", "maintenance", "kills", "reads"),
        help="one part alone, on a session with s3a only (no histories, no Iceberg reader)",
    )
    ap.add_argument(
        "--current",
        action="store_true",
        help="the real tables' current snapshots only (every snapshot is read locally on 3.5)",
    )
    args = ap.parse_args(argv)
    started = time.monotonic()
    # Spark's Python tasks (compaction's writer) run this environment, as they do for a user
    # whose environment is activated (a Connect server is given it by tests/spark_modes.py)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    tmp = Path(tempfile.mkdtemp(prefix="mor-on-s3-"))
    label = f"on S3 ({args.mode}, pyspark {pyspark.__version__})"
    server = None
    n, diffs = 0, []
    try:
        with SeaweedFS(buckets=("whs", "denied", "far"), table_buckets=("lake", "vault")) as store:
            print(f"SeaweedFS up: S3 {store.endpoint}, REST {store.rest_uri}")
            # mor's driver side reaches the store as any AWS SDK would: from the environment
            os.environ.update(
                AWS_ENDPOINT_URL=store.endpoint,
                AWS_ACCESS_KEY_ID=KEY,
                AWS_SECRET_ACCESS_KEY=SECRET,
            )
            conf = {
                **store.spark_conf(),
                # buckets Spark cannot read (the errors part): a wrong key, no endpoint
                "spark.hadoop.fs.s3a.bucket.denied.secret.key": "wrong",
                "spark.hadoop.fs.s3a.bucket.far.endpoint": "http://127.0.0.1:9",
                # the bucket only vended credentials reach (the vended part)
                "spark.hadoop.fs.s3a.bucket.vault.access.key": NOGRANT_KEY,
                "spark.hadoop.fs.s3a.bucket.vault.secret.key": NOGRANT_SECRET,
            }
            print(f"  Spark's s3a: {conf['spark.jars.packages']}")
            n, diffs = sizes(store)
            written: list[Any] = []
            if args.mode == "plain" or args.only:
                from pyspark.sql import SparkSession

                builder = SparkSession.builder.master("local[2]").appName("mor-on-s3")
                for k, v in {**conf, "spark.sql.shuffle.partitions": "2"}.items():
                    builder = builder.config(k, v)
                spark = builder.getOrCreate()
                if not args.only:
                    print(
                        f"  histories: none (Iceberg publishes no runtime for pyspark "
                        f"{pyspark.__version__}: no writer, no reader; the Spark 4 leg with "
                        "Iceberg's reader runs them)"
                    )
            else:
                spark = iceberg_session("s3a://whs/wh", True, merged(conf, vault_conf(store)))
                written, found = write_histories(spark, store, args.seeds, args.steps)
                diffs += found
            if args.mode in ("classic", "plain"):
                # both: the classic session only writes the histories; everything is checked
                # through Connect below (classic sessions on S3 are checked on the 3.5 leg,
                # and by `make soak` on the newest pyspark and here with --mode classic)
                print(f"  -- a classic session (pyspark {pyspark.__version__}):")
                got = checks(
                    spark, store, tmp, written, args.seeds, None, args.only, not args.current
                )
                n, diffs = n + got[0], diffs + got[1]
            if args.mode in ("connect", "both"):
                spark.stop()  # a process holds a classic session or a Connect one, not both
                from pyspark.sql import SparkSession

                from tests.spark_modes import ConnectServer

                server = ConnectServer(
                    merged(
                        merged(conf, {**packages_conf(iceberg_coordinates()), **ICEBERG_CONF}),
                        vault_conf(store),
                    )
                )
                spark = SparkSession.builder.remote(server.url).getOrCreate()
                print(f"  -- Spark Connect ({server.url}; Iceberg's reader and s3a on the server):")
                got = checks(
                    spark, store, tmp, written, args.seeds, server.url, args.only, not args.current
                )
                n, diffs = n + got[0], diffs + got[1]
            spark.stop()
    except (StoreUnavailable, RuntimeUnavailable) as e:
        print(f"{label}: cannot be set up here: {e}")
        return 2
    finally:
        import shutil

        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    took = time.monotonic() - started
    print(f"{label}: {n} queries and checks, {len(diffs)} differences, {took:.0f}s")
    for d in diffs:
        print("DIFFERENCE " + d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
