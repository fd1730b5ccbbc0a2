"""Tables on object storage: S3 (SeaweedFS on 127.0.0.1) behind files and a REST catalog.

The differential leg runs in its own process (tests/oracle/on_s3.py: Iceberg's runtime and
Hadoop's s3a connector must be on the JVM's class path from start-up). The rest checks, with
no store and no Spark, where FileIO properties come from and how recorded `s3://` paths reach
Spark and EXPLAIN.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from legs import soak_in
from mor.planner.errors import MorError
from mor.planner.settings import applied
from mor.planner.sources import PathMap, Resolver, io_defaults, prefix_rewrite, with_region
from tests.oracle import run_harness

# the legs beyond pyspark 3.5 classic that run this file (markers: pyproject.toml)
pytestmark = [pytest.mark.spark4, pytest.mark.spark41]

ROOT = Path(__file__).resolve().parent.parent


def _modes() -> list[Any]:
    """The leg's mode on this pyspark (tests/oracle/on_s3.py): on 4.1 histories written by a
    classic session and everything checked through Spark Connect (`both`); `plain` (no
    histories, no Iceberg reader) where Iceberg publishes no runtime, and on 3.5 in `make
    soak`, where CI runs its part `reads`."""
    import pyspark

    from tests.oracle.runtime import RUNTIMES, spark_line

    if pyspark.__version__.startswith("3."):
        # on 3.5 in `make soak` only (since 2026-12-06, for CI's time: 88 s): its s3a (AWS
        # SDK v1) reading the real tables, the REST catalog's table and the CLI's sessions
        # (`reads`, a part of `plain`) with the whole plain run; S3 is held in CI on 4.1
        # (`both`: the same reads through s3a on AWS SDK v2, a Java-written history, Connect)
        return [pytest.param("plain", marks=pytest.mark.soak)]
    if spark_line() not in RUNTIMES:
        return ["plain"]
    # on 4.x a classic session writes, a Connect server on the same store checks (vended
    # credentials and maintenance on a 4.1 classic session, against Iceberg's reader: `make
    # soak`'s `on_s3 --mode classic`; on 3.5's classic session here, `plain`)
    return ["both"]


# on the newest pyspark (no Iceberg runtime, no histories) in `make soak`
@soak_in("4.3")
@pytest.mark.parametrize("mode", _modes())
def test_merge_on_read_tables_on_s3_match_iceberg_reader(mode: str) -> None:
    """Java-written histories (position deletes, deletion vectors, equality deletes) on s3a,
    the real tables by path on s3://, a pyiceberg table through the REST catalog, the CLI;
    through a Spark Connect server started with the s3a and Iceberg packages too."""
    # one history on 4.1 (v3, bucketed: position deletes from the v3 writer's deletion vectors,
    # equality deletes, rewritten vectors), for the suite's time (three until 2026-11-28: 780 s)
    seeds = ["--seeds", "6"] if mode == "both" else []
    # `reads` (3.5 in CI): the plain run's checks that only a 3.5 classic session and AWS SDK
    # v1 show: the real tables' current snapshots by path, the REST catalog with the CLI's own
    # sessions, the errors; conversion, vended credentials and the JDBC catalog's maintenance
    # run through Connect on 4.1 in CI, and the whole plain run on 3.5 in `make soak`
    args = ["--mode", "plain", "--only", "reads"] if mode == "reads" else ["--mode", mode]
    # the real tables' current snapshots on S3 in CI (every snapshot: locally on 3.5, and on
    # S3 in `make soak`)
    current = [] if mode == "plain" else ["--current"]
    summary = run_harness("on_s3", *args, *seeds, *current, timeout=1500)
    assert " 0 differences" in summary
    print(summary)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in (
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MOR_CONFIG", str(tmp_path / "mor.toml"))
    (tmp_path / "mor.toml").write_text("")
    return monkeypatch


def test_aws_environment_becomes_file_io_properties(aws_env: pytest.MonkeyPatch) -> None:
    assert io_defaults() == {}
    aws_env.setenv("AWS_ENDPOINT_URL", "http://generic:1")
    aws_env.setenv("AWS_ENDPOINT_URL_S3", "http://s3-only:2")  # the service's own wins
    aws_env.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AK")
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "SK")
    aws_env.setenv("AWS_PROFILE", "prof")
    assert io_defaults() == {
        "s3.endpoint": "http://s3-only:2",
        "s3.region": "eu-west-1",
        "s3.access-key-id": "AK",
        "s3.secret-access-key": "SK",
        "s3.profile-name": "prof",
    }
    aws_env.setenv("AWS_REGION", "us-west-2")  # AWS_REGION before AWS_DEFAULT_REGION
    assert io_defaults()["s3.region"] == "us-west-2"


def test_config_file_io_over_environment(aws_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    aws_env.setenv("AWS_ENDPOINT_URL", "http://env:1")
    (tmp_path / "mor.toml").write_text(
        '[file-io]\n"s3.endpoint" = "http://config:2"\n"s3.connect-timeout" = 5\n'
    )
    assert io_defaults() == {"s3.endpoint": "http://config:2", "s3.connect-timeout": "5"}


def test_an_endpoint_without_a_region_never_asks_aws() -> None:
    """pyiceberg resolves a bucket's region by asking AWS when none is given: off AWS that is
    a failed request per bucket (and a warning), so an endpoint gets the SDK's default."""
    assert with_region({"s3.endpoint": "http://x"})["s3.region"] == "us-east-1"
    assert with_region({"s3.endpoint": "http://x", "s3.region": "r"})["s3.region"] == "r"
    assert with_region({"s3.endpoint": "http://x", "client.region": "r"}) == {
        "s3.endpoint": "http://x",
        "client.region": "r",
    }
    assert with_region({}) == {}


def test_catalog_file_io_layers(aws_env: pytest.MonkeyPatch) -> None:
    """The environment fills what a catalog's FileIO lacks, the catalog's (vended) properties
    win over it, the caller's win over everything; nothing added: the catalog's own FileIO."""
    from pyiceberg.io import load_file_io

    io = load_file_io({"s3.endpoint": "http://catalog:1", "s3.region": "r"}, "s3://b/t")
    table = SimpleNamespace(io=io, metadata_location="s3://b/t/metadata/v1.metadata.json")
    assert Resolver(None, PathMap.of({}))._catalog_io(table) is io
    aws_env.setenv("AWS_ENDPOINT_URL", "http://env:2")
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AK")
    got = Resolver(None, PathMap.of({}))._catalog_io(table).properties
    assert got["s3.endpoint"] == "http://catalog:1" and got["s3.access-key-id"] == "AK"
    mine = Resolver(None, PathMap.of({}), {"s3.endpoint": "http://mine:3"})
    assert mine._catalog_io(table).properties["s3.endpoint"] == "http://mine:3"


def test_s3_paths_are_read_through_s3a() -> None:
    pm = PathMap.of({}, s3a=True)
    assert pm("s3://b/k/x.parquet") == "s3a://b/k/x.parquet"
    assert pm("s3n://b/k") == "s3a://b/k"
    assert pm("s3a://b/k") == "s3a://b/k"
    assert pm("/tmp/s3://x") == "/tmp/s3://x"
    # the user's map first, then the scheme
    moved = PathMap.of({"s3://old/wh": "s3://new/wh"}, s3a=True)
    assert moved("s3://old/wh/t/x") == "s3a://new/wh/t/x"
    assert PathMap.of({}, s3a=False)("s3://b/k") == "s3://b/k"
    with applied({"s3a_paths": False}):
        assert PathMap.of({})("s3://b/k") == "s3://b/k"
    assert PathMap.of({})("s3://b/k") == "s3a://b/k"


def test_explain_names_the_prefix_a_table_is_read_from() -> None:
    assert prefix_rewrite("s3://b/wh/t/d/x.parquet", "s3a://b/wh/t/d/x.parquet") == (
        "s3://b",
        "s3a://b",
    )
    assert prefix_rewrite("/old/wh/t/x", "/new/wh/t/x") == ("/old/wh", "/new/wh")
    assert prefix_rewrite("/same", "/same") is None


def test_a_session_mor_starts_takes_s3a_from_the_environment(
    aws_env: pytest.MonkeyPatch,
) -> None:
    from mor.physical.spark.s3a import s3a_from_environment

    assert s3a_from_environment() == {}
    aws_env.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:8333")
    assert s3a_from_environment() == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:8333",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }


def test_a_named_catalog_reads_its_metadata_through_the_same_store(
    aws_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A catalog by name gets the environment's store settings (AWS_*, and the config file's
    [file-io]) under its own, so that it reads the metadata file from the store mor's later
    reads use (an endpoint without a region gets the SDK's default, never a question to AWS);
    what the catalog configures itself wins."""
    from pyiceberg.catalog.sql import SqlCatalog

    from mor.api import resolve_catalog

    SqlCatalog("mine", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    (tmp_path / "mor.toml").write_text(
        f'[catalogs.mine]\ntype = "sql"\nuri = "sqlite:///{tmp_path}/c.db"\n'
        f'warehouse = "file://{tmp_path}"\n"s3.access-key-id" = "CATALOG"\n'
    )
    aws_env.setenv("AWS_ENDPOINT_URL", "http://store:9000")
    aws_env.setenv("AWS_ACCESS_KEY_ID", "ENVIRONMENT")
    props = resolve_catalog("mine").properties
    assert props["s3.endpoint"] == "http://store:9000" and props["s3.region"] == "us-east-1"
    assert props["s3.access-key-id"] == "CATALOG"


def test_catalogs_from_the_config_file(aws_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """[catalogs.NAME] in mor's config file: a catalog by name without ~/.pyiceberg.yaml."""
    from pyiceberg.catalog.sql import SqlCatalog

    from mor.api import resolve_catalog

    SqlCatalog("mine", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    (tmp_path / "mor.toml").write_text(
        f'[catalogs.mine]\ntype = "sql"\nuri = "sqlite:///{tmp_path}/c.db"\n'
        f'warehouse = "file://{tmp_path}"\n'
    )
    aws_env.setenv("PYICEBERG_HOME", str(tmp_path))  # no .pyiceberg.yaml there
    cat = resolve_catalog("mine")
    assert cat.name == "mine" and cat.properties["uri"].endswith("/c.db")
    (tmp_path / "mor.toml").write_text("[catalogs]\nmine = 3\n")
    from mor.planner.errors import ConfigError

    with pytest.raises(ConfigError, match="catalogs.mine"):
        resolve_catalog("mine")


# --- Hadoop's s3a connector for sessions mor starts (physical/spark/s3a.py) ---------------------

# the Hadoop each pinned pyspark ships (Spark's own pom: hadoop.version), by Spark line
SPARK_HADOOP = {"3.5": "3.3.4", "4.1": "3.4.2", "4.3": "3.5.0"}


def _jars(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "jars"
    folder.mkdir()
    for n in names:
        (folder / n).write_bytes(b"")
    return folder


def test_hadoop_aws_of_the_hadoop_spark_ships(tmp_path: Path) -> None:
    from mor.physical.spark.s3a import hadoop_version, s3a_connector, spark_jars
    from tests.oracle.runtime import spark_line

    # this environment's pyspark, against the Hadoop its release ships
    jars = spark_jars()
    assert jars is not None and hadoop_version(jars) == SPARK_HADOOP[spark_line()]
    api = _jars(tmp_path, "hadoop-client-api-3.4.2.jar", "hadoop-client-runtime-3.4.2.jar")
    got = s3a_connector({}, True, api)
    assert got.coordinates == "org.apache.hadoop:hadoop-aws:3.4.2"
    assert "Spark's Hadoop 3.4.2" in got.why and "AWS SDK bundle" in got.why
    common = tmp_path / "common"
    common.mkdir()
    (common / "hadoop-common-3.3.6.jar").write_bytes(b"")
    assert s3a_connector({}, True, common).coordinates == "org.apache.hadoop:hadoop-aws:3.3.6"


@pytest.mark.parametrize(
    "conf,enabled,jar,why",
    [
        ({}, False, None, "s3a_packages setting is off (add org.apache.hadoop:hadoop-aws:3.4.2"),
        (
            {"spark.jars.packages": "x:y:1,org.apache.hadoop:hadoop-aws:3.4.1"},
            True,
            None,
            "given in spark.jars.packages: org.apache.hadoop:hadoop-aws:3.4.1",
        ),
        ({"spark.jars": "/opt/hadoop-aws-3.4.2.jar"}, True, None, "given in spark.jars"),
        ({}, True, "hadoop-aws-3.4.2.jar", "Spark's own jars hold hadoop-aws-3.4.2.jar"),
    ],
)
def test_nothing_is_added_where_the_connector_is_given_or_refused(
    tmp_path: Path, conf: dict, enabled: bool, jar: str | None, why: str
) -> None:
    from mor.physical.spark.s3a import s3a_connector

    folder = _jars(tmp_path, "hadoop-client-api-3.4.2.jar", *([jar] if jar else []))
    got = s3a_connector(conf, enabled, folder)
    assert got.coordinates is None and why in got.why


def test_without_a_hadoop_jar_nothing_is_guessed(tmp_path: Path) -> None:
    from mor.physical.spark.s3a import s3a_connector, with_packages

    got = s3a_connector({}, True, _jars(tmp_path, "spark-core_2.13-4.1.4.jar"))
    assert got.coordinates is None and "no Hadoop jar" in got.why
    assert with_packages({"spark.jars.packages": "a:b:1"}, "c:d:2") == {
        "spark.jars.packages": "a:b:1,c:d:2"
    }
    assert with_packages({}, "c:d:2") == {"spark.jars.packages": "c:d:2"}


def test_only_plans_whose_files_spark_reads_on_s3_need_the_connector() -> None:
    from dataclasses import replace

    from helpers import data_file, scan
    from mor.physical.spark.s3a import reads_s3a

    remote = replace(data_file(1), read_path="s3a://b/t/d1.parquet")
    assert reads_s3a(scan(data=(remote,)))
    assert not reads_s3a(scan(data=(data_file(1),)))
    # count(*) with no deletes is answered from metadata: Spark reads no file of it ...
    assert not reads_s3a(scan(data=(remote,), fields=()))
    # ... but a session kept for later queries (the shell's) will
    assert reads_s3a(scan(data=(remote,), fields=()), counts=True)
    assert not reads_s3a(scan(data=(), fields=(2,)))


def test_explain_says_how_spark_gets_s3a(tmp_path: Path) -> None:
    from mor.execution import QueryExecution

    text = QueryExecution("SELECT 1")._s3a_section(started=False)
    assert text.startswith("== Object storage ==\ns3a       a session mor starts to run it")
    assert "org.apache.hadoop:hadoop-aws:" in text


def test_a_launch_that_cannot_resolve_its_packages_is_one_line(tmp_path: Path) -> None:
    from mor.physical.spark.session import _start_failure
    from mor.planner.errors import ConfigError

    log = tmp_path / "spark.log"
    log.write_text(
        ":: problems summary ::\n"
        'Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: '
        "org.apache.hadoop#hadoop-aws;9.9.9: not found]\n\tat org.apache.spark.deploy...\n"
    )
    e = _start_failure(RuntimeError("[JAVA_GATEWAY_EXITED] ..."), "x:hadoop-aws:9.9.9", str(log))
    assert isinstance(e, ConfigError) and "\n" not in str(e)
    assert "could not resolve org.apache.hadoop#hadoop-aws;9.9.9: not found" in str(e)
    log.write_text("Error: A JNI error has occurred\n\tat x\n")
    e = _start_failure(RuntimeError("[JAVA_GATEWAY_EXITED] ..."), "", str(log))
    assert "A JNI error has occurred" in str(e) and str(log) in str(e)


def test_a_session_without_s3a_names_the_coordinates_for_its_hadoop(spark: object) -> None:
    """The one-line error for a session with no s3a connector names hadoop-aws of the
    session's own Hadoop, asked of Spark (classic or Spark Connect)."""
    from mor.physical.spark.spark_errors import recognised
    from mor.planner.errors import ConfigError
    from tests.oracle.runtime import spark_line

    hadoop = SPARK_HADOOP[spark_line()]
    for text in (
        "java.lang.ClassNotFoundException: Class org.apache.hadoop.fs.s3a.S3AFileSystem not found",
        'org.apache.hadoop.fs.UnsupportedFileSystemException: No FileSystem for scheme "s3a"',
    ):
        e = recognised(RuntimeError("An error occurred while calling o79.collect.\n" + text))
        assert isinstance(e, ConfigError), text
        assert f"spark.jars.packages=org.apache.hadoop:hadoop-aws:{hadoop}" in str(e)
        assert f"this session's Hadoop {hadoop} has no s3a connector" in str(e)


def test_a_session_mor_started_without_s3a_refuses_a_query_that_needs_it(spark: object) -> None:
    """Packages join a session only when its JVM starts: a later query reading s3a:// paths
    gets one line naming what to add; a user's session (Spark Connect here) is used as is."""
    from mor.physical.spark.session import is_connect, local_session
    from mor.planner.errors import ConfigError
    from tests.oracle.runtime import spark_line

    if is_connect(spark):
        assert local_session(s3a=True) is spark
        return
    with pytest.raises(ConfigError) as e:
        local_session(s3a=True)
    assert f"spark.jars.packages=org.apache.hadoop:hadoop-aws:{SPARK_HADOOP[spark_line()]}" in str(
        e.value
    )
    assert local_session() is spark  # nothing changed for queries that need no s3a


@pytest.mark.parametrize(
    ("command", "function"),
    [("compact", "compact"), ("convert-equality-deletes", "convert_equality_deletes")],
)
def test_maintenance_from_the_cli_starts_spark_with_s3a_for_a_table_on_s3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str, function: str
) -> None:
    """The session `mor compact` and `mor convert-equality-deletes` start for a table on S3
    gets the s3a connector, as `mor run`'s does (they started one without it, and failed on
    every S3 table; `make soak` runs them on S3 in tests/oracle/on_s3.py's `kills`)."""
    import mor.cli as cli
    import mor.maintenance as maintenance

    asked: list[bool] = []
    monkeypatch.setattr(cli, "_table_on_s3", lambda args, table, catalog=None: table == "ns.s3")
    monkeypatch.setattr(cli, "spark_session", lambda args, s3a=False: asked.append(s3a) or "s")

    def started(table: str, *, spark: Any, **kw: Any) -> None:
        assert spark() == "s"  # the command's session, made when its Spark work starts
        raise MorError("stopped here")

    monkeypatch.setattr(maintenance, function, started)
    for table in ("ns.s3", "ns.local"):
        assert cli.main([command, table]) == 1
        assert capsys.readouterr().err.strip() == "mor: stopped here"
    assert asked == [True, False]
