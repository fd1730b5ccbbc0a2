"""The Flink side of the pipelines leg: runs in the PyFlink environment (.venv/flink), never
imports mor or pyspark.

    .venv/flink/bin/python tests/oracle/flink_job.py SPEC.json OUT.json

For each pipeline of the spec: create its table in the Iceberg catalog the spec names (a JDBC
catalog on the tests' PostgreSQL), with a primary key and `write.upsert.enabled`, then one
bounded streaming job per checkpoint of the changelog: the events (+I, -U, +U, -D, each with its
row) go through `from_changelog_stream` into Iceberg's Flink sink, whose final checkpoint
commits them as one snapshot, data and delete files together (equality deletes for every
upserted or deleted key, position deletes for a key written twice inside the checkpoint). The
sink's writers run at parallelism 2, keyed by the equality fields as Flink's sink distributes
them. A step may instead alter the table (`ALTER TABLE ... ADD ...`) between jobs.

Then Flink's own batch read of every snapshot (`/*+ OPTIONS('snapshot-id'=...) */`), one of
the truths the orchestrator (tests/oracle/flink.py) holds mor to. Writes OUT.json: per
pipeline, the snapshot ids in commit order and Flink's rows at each.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from typing import Any


def _types(columns: list[list[str]]) -> Any:
    from pyflink.common import Types

    kinds = {
        "BIGINT": Types.LONG(),
        "INT": Types.INT(),
        "STRING": Types.STRING(),
        "DOUBLE": Types.DOUBLE(),
    }
    return Types.ROW_NAMED([c for c, _ in columns], [kinds[t] for _, t in columns])


def _kind(k: str) -> Any:
    from pyflink.common.types import RowKind

    return {
        "+I": RowKind.INSERT,
        "-U": RowKind.UPDATE_BEFORE,
        "+U": RowKind.UPDATE_AFTER,
        "-D": RowKind.DELETE,
    }[k]


def _lit(options: dict[str, str]) -> str:
    return ", ".join(f"'{k}'='{v}'" for k, v in options.items())


def open_catalog(spec: dict, checkpoint_ms: int = 60_000) -> tuple[Any, Any, list[str]] | None:
    """A local Flink environment and table environment with the spec's Iceberg catalog and
    database (bench/flink_cdc_job.py too): (env, tenv, jars), or None when the jars are
    missing (said on stderr)."""
    # the catalog's classes on the JVM's class path, as a Flink installation has them in lib/
    # (Iceberg's Flink runtime, the PostgreSQL driver) and HADOOP_CLASSPATH (Hadoop's client)
    jars = sorted(glob.glob(os.path.join(spec["jars"], "*.jar")))
    if not jars:
        print(f"no jars in {spec['jars']}: run `make dev`", file=sys.stderr)
        return None
    os.environ["HADOOP_CLASSPATH"] = os.pathsep.join(jars)

    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    conf = Configuration()
    conf.set_string("rest.bind-address", "127.0.0.1")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.enable_checkpointing(checkpoint_ms)
    tenv = StreamTableEnvironment.create(env)
    # the changelog's events reach the sink as they are (no materializer keeping rows between
    # them, whose state would not outlive one job): what a CDC source with its key declares
    tenv.get_config().set("table.exec.sink.upsert-materialize", "NONE")
    cat, db = spec["catalog_name"], spec["database"]
    tenv.execute_sql(f"CREATE CATALOG {cat} WITH ({_lit(spec['catalog'])})")
    tenv.execute_sql(f"CREATE DATABASE IF NOT EXISTS {cat}.{db}")
    return env, tenv, jars


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(open(spec_path).read())
    opened = open_catalog(spec)
    if opened is None:
        return 2
    env, tenv, jars = opened
    from pyflink.common import Row

    cat, db = spec["catalog_name"], spec["database"]
    from pyflink.version import __version__ as flink_version

    runtime = [os.path.basename(j) for j in jars if "iceberg-flink-runtime" in j]
    out: dict[str, Any] = {
        "pipelines": [],
        "seconds": {},
        "flink": flink_version,
        "iceberg": runtime[0].rsplit("-", 1)[-1].removesuffix(".jar") if runtime else "?",
    }
    started = time.monotonic()
    for p in spec["pipelines"]:
        name = f"{cat}.{db}.{p['table']}"
        cols = ", ".join(f"`{c}` {t}" for c, t in p["columns"])
        key = ", ".join(f"`{c}`" for c in p["key"])
        part = f" PARTITIONED BY ({', '.join(p['partition'])})" if p["partition"] else ""
        props = {
            "format-version": str(p["version"]),
            "write.upsert.enabled": "true",
            **p.get("properties", {}),
        }
        tenv.execute_sql(
            f"CREATE TABLE {name} ({cols}, PRIMARY KEY ({key}) NOT ENFORCED){part} "
            f"WITH ({_lit(props)})"
        )
        columns = list(p["columns"])
        for step in p["steps"]:
            if "alter" in step:
                tenv.execute_sql(step["alter"].format(t=name))
                columns = step["columns"]
                continue
            rows = []
            for kind, values in step["events"]:
                r = Row(*values)
                r.set_row_kind(_kind(kind))
                rows.append(r)
            ds = env.from_collection(rows, type_info=_types(columns))
            tenv.from_changelog_stream(ds).execute_insert(name).wait()
        chain = _chain(tenv, name)
        reads = {}
        for sid in chain:
            with tenv.execute_sql(
                f"SELECT * FROM {name} /*+ OPTIONS('snapshot-id'='{sid}') */"
            ).collect() as it:
                reads[str(sid)] = [list(r) for r in it]
        out["pipelines"].append({"table": p["table"], "snapshots": chain, "flink_rows": reads})
    out["seconds"]["all"] = round(time.monotonic() - started, 1)
    with open(out_path, "w") as f:
        json.dump(out, f)
    return 0


def _chain(tenv: Any, name: str) -> list[int]:
    """The table's snapshot ids from the first commit to the current one (parent links)."""
    meta = name.rsplit(".", 1)
    sql = f"SELECT snapshot_id, parent_id FROM {meta[0]}.`{meta[1]}$snapshots`"
    with tenv.execute_sql(sql).collect() as it:
        parent = {r[0]: r[1] for r in it}
    children = {v: k for k, v in parent.items()}
    chain, sid = [], children.get(None)
    while sid is not None:
        chain.append(sid)
        sid = children.get(sid)
    return chain


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
