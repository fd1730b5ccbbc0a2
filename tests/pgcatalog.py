"""A PostgreSQL server on 127.0.0.1 holding an Iceberg JDBC catalog, for the pipelines leg.

Iceberg's `JdbcCatalog` (Spark's and Flink's runtimes), Trino's `iceberg.catalog.type=jdbc` and
pyiceberg's `SqlCatalog` keep the same two tables (`iceberg_tables`,
`iceberg_namespace_properties`), keyed by a catalog name: every engine that names the catalog
the same (`lake` here) sees the same tables, committed through the same row lock. That is the
shared catalog writers and readers meet in, not files copied between catalogs.

The server is Debian's PostgreSQL (package postgresql-15, or whichever major is installed under
/usr/lib/postgresql), started from its own binaries in a temporary folder on a free port and
stopped (the folder removed) on exit. PostgreSQL refuses to run as root: when the tests are
root, the cluster belongs to the `postgres` user the package creates. Nothing here is optional:
a missing server fails with what to install.

One server serves a whole test run: the pytest session starts it (`postgres` in
tests/conftest.py) and names its port in `MOR_TEST_POSTGRES`; each harness process that opens
`Postgres()` then gets a database of its own on that server instead of a server of its own.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from tests.servers import free_ports, log_tail, stop

USER = "mor"
DATABASE = "lake"
SHARED = "MOR_TEST_POSTGRES"  # the port of the test run's server, when one runs
CATALOG = "lake"  # the name every engine gives the catalog (JdbcCatalog keys rows by it)


class PostgresUnavailable(Exception):
    """The server cannot be started here: the reason is the message."""


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=_major)
    if not found:
        raise PostgresUnavailable(
            "no PostgreSQL server under /usr/lib/postgresql: install Debian's package "
            "(apt-get install postgresql)"
        )
    return Path(found[-1]).parent


def _major(path: str) -> int:
    try:
        return int(Path(path).parts[-3])
    except ValueError:
        return 0


class Postgres:
    """`with Postgres() as pg:` a server at `pg.port` with database `pg.database` (`lake` on a
    server of its own), user `mor` (trust authentication on 127.0.0.1 only)."""

    def __init__(self, keep: str | None = None, share: bool = True) -> None:
        """`keep`: a folder whose cluster outlives the server (made on the first start, reused
        after: the benchmarks' cached tables); by default a temporary one, removed on exit.
        `share`: a new database on the test run's server where `MOR_TEST_POSTGRES` names one
        (never with `keep`)."""
        self.keep = keep
        self.dir = ""
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.version = ""
        self.database = DATABASE
        self.shared = None if keep or not share else os.environ.get(SHARED)

    @classmethod
    def running(cls, port: int, database: str) -> Postgres:
        """The server another process runs (its port and database), to name the catalog on
        it from this one: nothing is started or stopped."""
        pg = cls(share=False)
        pg.port, pg.database = port, database
        return pg

    @property
    def jdbc_uri(self) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{self.database}"

    @property
    def sqlalchemy_uri(self) -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{self.database}"

    def _as_owner(self, args: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return args
        return ["runuser", "-u", "postgres", "--", *args]

    def __enter__(self) -> Postgres:
        bindir = _bin_dir()
        self.version = Path(bindir).parts[-2]
        if self.shared:  # a database of this process's own on the run's server
            self.port = int(self.shared)
            self.database = f"lake_{uuid.uuid4().hex[:12]}"
            self._createdb(bindir)
            return self
        if self.keep:
            self.dir = self.keep
            os.makedirs(self.dir, exist_ok=True)
        else:
            self.dir = tempfile.mkdtemp(prefix="mor-pg-")
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        data = os.path.join(self.dir, "data")
        self._fresh = not os.path.exists(os.path.join(data, "PG_VERSION"))
        if self._fresh:
            init = subprocess.run(
                self._as_owner(
                    [str(bindir / "initdb"), "-D", data, "-A", "trust", "-U", USER, "-E", "UTF8"]
                ),
                capture_output=True,
                text=True,
            )
            if init.returncode != 0:
                self.__exit__()
                raise PostgresUnavailable(f"initdb failed: {init.stderr.strip()[-300:]}")
        (self.port,) = free_ports(1)
        self._log = open(os.path.join(self.dir, "server.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self._as_owner(
                [
                    str(bindir / "postgres"),
                    "-D",
                    data,
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-k",
                    self.dir,
                    "-c",
                    "fsync=off",
                    "-c",
                    "max_connections=200",
                ]
            ),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            self._wait(bindir)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait(self, bindir: Path, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise PostgresUnavailable(f"postgres exited: {self._tail()}")
            ready = subprocess.run(
                [str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True,
            )
            if ready.returncode == 0:
                if self._fresh:
                    self._createdb(bindir)
                return
            time.sleep(0.2)
        raise PostgresUnavailable(f"postgres not ready in {timeout:.0f}s: {self._tail()}")

    def _createdb(self, bindir: Path) -> None:
        made = subprocess.run(
            [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER]
            + [self.database],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            raise PostgresUnavailable(
                f"createdb {self.database} on 127.0.0.1:{self.port}: {made.stderr.strip()[-300:]}"
            )

    def _tail(self) -> str:
        return log_tail(os.path.join(self.dir, "server.log"))

    def __exit__(self, *exc: object) -> None:
        # a smart shutdown: the connections' sessions end; a kept cluster stays on disk; a
        # database of the run's server goes with that server
        if self.shared:
            return
        stop(self.proc, getattr(self, "_log", None), self.dir, remove=not self.keep)

    # how each engine names this catalog

    def spark_conf(self, warehouse: str) -> dict[str, str]:
        """Iceberg's SparkCatalog `lake` on this server (with the driver, as users add it)."""
        from tests.oracle.runtime import packages_conf

        c = f"spark.sql.catalog.{CATALOG}"
        return {
            **packages_conf(f"org.postgresql:postgresql:{PG_JDBC}"),
            c: "org.apache.iceberg.spark.SparkCatalog",
            f"{c}.type": "jdbc",
            f"{c}.uri": self.jdbc_uri,
            f"{c}.jdbc.user": USER,
            f"{c}.jdbc.schema-version": "V1",
            f"{c}.warehouse": warehouse,
            f"{c}.cache-enabled": "false",
        }

    def flink_options(self, warehouse: str) -> dict[str, str]:
        """`CREATE CATALOG lake WITH (...)` for Iceberg's Flink runtime."""
        return {
            "type": "iceberg",
            "catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            "uri": self.jdbc_uri,
            "jdbc.user": USER,
            "jdbc.schema-version": "V1",
            "warehouse": warehouse,
        }

    def pyiceberg_properties(self, warehouse: str) -> dict[str, str]:
        """pyiceberg's SqlCatalog on this server (as `type: sql` in .pyiceberg.yaml)."""
        return {"type": "sql", "uri": self.sqlalchemy_uri, "warehouse": warehouse}

    def environment(self, warehouse: str) -> dict[str, str]:
        """PYICEBERG_CATALOG__LAKE__* variables: how a user names the catalog to mor."""
        return {
            f"PYICEBERG_CATALOG__{CATALOG.upper()}__{k.upper().replace('-', '_')}": v
            for k, v in self.pyiceberg_properties(warehouse).items()
        }


# the PostgreSQL JDBC driver Spark's JdbcCatalog loads (Maven Central)
PG_JDBC = "42.7.8"
