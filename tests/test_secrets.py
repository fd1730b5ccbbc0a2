"""No secret ever appears in what mor prints or writes. Sentinel secrets are put in every place
a credential can come from (the AWS environment, pyiceberg's properties, mor's config file's
[file-io], [spark] and catalogs, `--io`, a catalog URI with a password, an OAuth client
secret), then every command and error path reachable here runs with them: results, EXPLAIN,
`mor config`, health JSON, the changes checkpoint and batches, errors with and without
`--debug` tracebacks, and the log records mor's and pyiceberg's loggers emit. Any appearance
fails. (Tables on S3 with vended credentials: tests/oracle/on_s3.py checks EXPLAIN's access
lines there; tests/test_store_access.py the options Spark gets.)"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from mor.cli import main

pytestmark = [pytest.mark.check]

SENTINELS = {
    "aws secret": "SENTINEL-aws-secret-7f3a",
    "aws token": "SENTINEL-aws-token-7f3a",
    "file-io secret": "SENTINEL-fileio-secret-7f3a",
    "spark secret": "SENTINEL-spark-secret-7f3a",
    "spark token": "SENTINEL-spark-token-7f3a",
    "pg password": "SENTINEL-pg-password-7f3a",
    "oauth secret": "SENTINEL-oauth-secret-7f3a",
    "io secret": "SENTINEL-io-secret-7f3a",
    "yaml secret": "SENTINEL-yaml-secret-7f3a",
}
S = SENTINELS


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mor.demo import build_demo_table

    d = tmp_path_factory.mktemp("secrets") / "wh"
    build_demo_table(str(d))
    return d


@pytest.fixture
def sentinels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every source of credentials set, with a sentinel each; returns the config file."""
    import pyiceberg.catalog
    from pyiceberg.utils.config import Config

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "sentinel-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S["aws secret"])
    monkeypatch.setenv("AWS_SESSION_TOKEN", S["aws token"])
    home = tmp_path / "pyiceberg-home"
    home.mkdir()
    (home / ".pyiceberg.yaml").write_text(
        "catalog:\n"
        "  yamlcat:\n"
        "    type: rest\n"
        "    uri: http://127.0.0.1:9/catalog\n"
        f"    credential: client:{S['yaml secret']}\n"
        f"    s3.secret-access-key: {S['yaml secret']}\n"
    )
    monkeypatch.setenv("PYICEBERG_HOME", str(home))
    # pyiceberg reads its configuration once, at import: read it again with these
    monkeypatch.setattr(pyiceberg.catalog, "_ENV_CONFIG", Config())
    conf = tmp_path / "mor.toml"
    conf.write_text(
        "[file-io]\n"
        '"s3.access-key-id" = "sentinel-fileio-key"\n'
        f'"s3.secret-access-key" = "{S["file-io secret"]}"\n'
        "[spark]\n"
        f'"spark.hadoop.fs.s3a.secret.key" = "{S["spark secret"]}"\n'
        f'"spark.hadoop.fs.s3a.session.token" = "{S["spark token"]}"\n'
        "[catalogs.pg]\n"
        'type = "sql"\n'
        f'uri = "postgresql+psycopg://mor:{S["pg password"]}@127.0.0.1:9/lake"\n'
        "[catalogs.oauth]\n"
        'type = "rest"\n'
        'uri = "http://127.0.0.1:9/api"\n'
        f'credential = "client:{S["oauth secret"]}"\n'
    )
    monkeypatch.setenv("MOR_CONFIG", str(conf))
    return conf


def _leaks(text: str) -> list[str]:
    return [name for name, value in SENTINELS.items() if value in text]


def _run(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, *argv: str
) -> tuple[int, str]:
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        code = main(list(argv))
    out = capsys.readouterr()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    return code, out.out + "\n" + out.err + "\n" + logged


def test_no_command_shows_a_secret(
    wh: Path,
    sentinels: Path,
    tmp_path: Path,
    spark: Any,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = ["--warehouse", str(wh)]
    io = ["--io", f"s3.secret-access-key={S['io secret']}"]
    cp = tmp_path / "cp.json"
    out_dir = tmp_path / "batches"
    commands: list[tuple[str, list[str], int | None]] = [
        ("config", ["config", *w], 0),
        (
            "run",
            ["run", *w, *io, "-e", "SELECT region, count(*) FROM demo.orders GROUP BY region"],
            0,
        ),
        ("explain", ["explain", *w, *io, "--physical", "-e", "SELECT * FROM demo.orders"], 0),
        (
            "explain analyze",
            ["explain", *w, "--analyze", "-e", "SELECT count(*) FROM demo.orders"],
            0,
        ),
        ("health json", ["health", "demo.orders", *w, *io, "--format", "json"], 0),
        ("tables", ["tables", *w], 0),
        ("describe", ["describe", "demo.orders", *w], 0),
        (
            "changes",
            [
                "changes",
                "demo.orders",
                *w,
                "--checkpoint",
                str(cp),
                "--output",
                str(out_dir),
                "--format",
                "json",
            ],
            0,
        ),
        ("a bad query", ["run", *w, *io, "-e", "SELECT nope FROM demo.orders"], 1),
        (
            "a bad query, --debug",
            ["run", "--debug", *w, *io, "-e", "SELECT nope FROM demo.orders"],
            1,
        ),
    ]
    for catalog in ("pg", "oauth", "yamlcat"):
        sql = ["-e", "SELECT * FROM ns.t"]
        commands.append((f"catalog {catalog} unreachable", ["run", "--catalog", catalog, *sql], 1))
        commands.append(
            (
                f"catalog {catalog} unreachable, --debug",
                ["run", "--debug", "--catalog", catalog, *sql],
                1,
            )
        )
        commands.append((f"health via {catalog}", ["health", "ns.t", "--catalog", catalog], 1))
    found = []
    for what, argv, want in commands:
        code, text = _run(capsys, caplog, *argv)
        if want is not None:
            assert code == want, f"{what}: exit {code}\n{text[-2000:]}"
        leaked = _leaks(text)
        if leaked:
            found.append(f"{what}: {leaked}")
    # what mor wrote: the checkpoint and the batches of `changes`
    written = [p for p in [cp, *out_dir.rglob("*")] if p.is_file()]
    assert cp.exists() and written
    for p in written:
        leaked = _leaks(p.read_text(errors="replace"))
        if leaked:
            found.append(f"file {p.name}: {leaked}")
    assert not found, found
