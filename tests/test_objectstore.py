"""Tables on object storage: S3 (SeaweedFS on 127.0.0.1) behind files and a REST catalog.

The differential leg runs in its own process (tests/oracle/on_s3.py: Iceberg's runtime and
Hadoop's s3a connector must be on the JVM's class path from start-up). The rest checks, with
no store and no Spark, where FileIO properties come from and how recorded `s3://` paths reach
Spark and EXPLAIN.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from mor.planner.settings import applied
from mor.planner.sources import PathMap, Resolver, io_defaults, prefix_rewrite, with_region

ROOT = Path(__file__).resolve().parent.parent


def test_merge_on_read_tables_on_s3_match_iceberg_reader() -> None:
    """Java-written histories (position deletes, deletion vectors, equality deletes) on s3a,
    the real tables by path on s3://, a pyiceberg table through the REST catalog, the CLI."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.oracle.on_s3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " 0 differences" in proc.stdout
    print(proc.stdout)


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
    from mor.physical.session import s3a_from_environment

    assert s3a_from_environment() == {}
    aws_env.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:8333")
    assert s3a_from_environment() == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:8333",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }


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
