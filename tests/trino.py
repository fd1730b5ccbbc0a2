"""A Trino server on 127.0.0.1 with its Iceberg connector on the tests' JDBC catalog.

Trino comes as its users get it: the `io.trino:trino-server` tarball from Maven Central
(`make dev` unpacks it into .venv/trino, keeping the Iceberg plugin alone), run by its own
launcher on the Java 25 JDK installed beside Java 17 (Trino needs 24 or newer; Spark stays on
17). One coordinator that also schedules work, in a temporary folder, on a free port; the
catalog `lake` is Iceberg's JDBC catalog on the tests' PostgreSQL (tests/pgcatalog.py) with
Hadoop's file system for the local `file:` warehouse the other engines write. Queries go
through Trino's HTTP protocol (`POST /v1/statement`, then `nextUri`), standard library only.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.servers import free_ports, log_tail, stop

ROOT = Path(__file__).resolve().parent.parent
TRINO_VERSION = "476"  # the newest trino-server Maven Central serves here
HOME = ROOT / ".venv" / "trino" / f"trino-server-{TRINO_VERSION}"


NO_NODES = "No nodes available to run query"


class TrinoUnavailable(Exception):
    """Trino cannot be started here: the reason is the message."""


class TrinoError(Exception):
    """A query Trino refused or failed: its message."""


def java_home() -> str:
    """A JDK Trino runs on: $TRINO_JAVA_HOME, else the newest /usr/lib/jvm/*25* or later."""
    if os.environ.get("TRINO_JAVA_HOME"):
        return os.environ["TRINO_JAVA_HOME"]
    for home in sorted(glob.glob("/usr/lib/jvm/*"), reverse=True):
        release = Path(home) / "release"
        if release.exists():
            text = release.read_text(errors="replace")
            for line in text.splitlines():
                if line.startswith("JAVA_VERSION="):
                    major = line.split("=", 1)[1].strip('"').split(".")[0]
                    if major.isdigit() and int(major) >= 24:
                        return home
    raise TrinoUnavailable(
        "Trino needs Java 24 or newer and none is under /usr/lib/jvm: install a JDK 25 "
        "(e.g. Temurin) or set TRINO_JAVA_HOME"
    )


class Trino:
    """`with Trino(pg, warehouse) as trino: trino.query("SELECT ...")` -> rows as lists."""

    def __init__(self, pg: Any, warehouse: str) -> None:
        self.pg = pg
        self.warehouse = warehouse
        self.dir = ""
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.started_in = 0.0

    def __enter__(self) -> Trino:
        launcher = HOME / "bin" / "launcher"
        if not launcher.exists():
            raise TrinoUnavailable(
                f"Trino {TRINO_VERSION} is not unpacked in {HOME}: run `make dev`"
            )
        jdk = java_home()
        self.dir = tempfile.mkdtemp(prefix="mor-trino-")
        etc = Path(self.dir) / "etc"
        (etc / "catalog").mkdir(parents=True)
        (self.port,) = free_ports(1)
        (etc / "node.properties").write_text(
            f"node.environment=mortest\nnode.id=mor-test\nnode.data-dir={self.dir}/data\n"
            "node.internal-address=127.0.0.1\n"
        )
        (etc / "jvm.config").write_text(
            "-server\n-Xmx2G\n-XX:+UseG1GC\n-XX:+ExitOnOutOfMemoryError\n"
            "-Djdk.attach.allowAttachSelf=true\n"
        )
        (etc / "config.properties").write_text(
            "coordinator=true\nnode-scheduler.include-coordinator=true\n"
            f"http-server.http.port={self.port}\n"
            f"discovery.uri=http://127.0.0.1:{self.port}\n"
            "query.max-memory=1GB\nquery.max-memory-per-node=1GB\n"
        )
        (etc / "log.properties").write_text("io.trino=WARN\n")
        (etc / "catalog" / "lake.properties").write_text(self.catalog_properties())
        env = {**os.environ, "JAVA_HOME": jdk, "PATH": f"{jdk}/bin:{os.environ['PATH']}"}
        self._log = open(os.path.join(self.dir, "server.log"), "wb")  # noqa: SIM115
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [str(launcher), "run", f"--etc-dir={etc}", f"--data-dir={self.dir}/data"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            self._wait()
        except BaseException:
            self.__exit__()
            raise
        self.started_in = time.monotonic() - started
        return self

    def catalog_properties(self) -> str:
        from tests.pgcatalog import CATALOG, USER

        return (
            "connector.name=iceberg\n"
            "iceberg.catalog.type=jdbc\n"
            "iceberg.jdbc-catalog.driver-class=org.postgresql.Driver\n"
            f"iceberg.jdbc-catalog.connection-url={self.pg.jdbc_uri}\n"
            f"iceberg.jdbc-catalog.connection-user={USER}\n"
            f"iceberg.jdbc-catalog.catalog-name={CATALOG}\n"
            f"iceberg.jdbc-catalog.default-warehouse-dir={self.warehouse}\n"
            "iceberg.register-table-procedure.enabled=true\n"
            "fs.hadoop.enabled=true\n"
        )

    def _wait(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise TrinoUnavailable(f"Trino exited ({self.proc.returncode}): {self._tail()}")
            try:
                with urllib.request.urlopen(  # noqa: S310 - 127.0.0.1
                    f"http://127.0.0.1:{self.port}/v1/info", timeout=2
                ) as r:
                    if not json.load(r).get("starting", True) and self._schedules():
                        return
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        raise TrinoUnavailable(f"Trino not up in {timeout:.0f}s: {self._tail()}")

    def _schedules(self) -> bool:
        """True once a query finds a node: `/v1/info` says started before the coordinator's own
        worker has announced itself, and a query in between fails "No nodes available"."""
        try:
            self._query("SELECT 1")
        except TrinoError as e:
            if NO_NODES in str(e):
                return False
            raise
        return True

    def query(self, sql: str, patience: float = 60.0) -> list[list]:
        """Rows of `sql`. A query refused with "No nodes available" was never scheduled, so it
        is asked again for up to `patience` seconds: on a loaded 2-core machine the node's
        announcement can lapse for a moment (Trino's failure detector drops it until the next
        one), which says nothing about the query."""
        deadline = time.monotonic() + patience
        while True:
            try:
                return self._query(sql)
            except TrinoError as e:
                if NO_NODES not in str(e) or time.monotonic() > deadline:
                    raise
            time.sleep(1.0)

    def _query(self, sql: str) -> list[list]:
        req = urllib.request.Request(  # noqa: S310 - 127.0.0.1
            f"http://127.0.0.1:{self.port}/v1/statement",
            data=sql.encode(),
            headers={"X-Trino-User": "mor", "X-Trino-Time-Zone": "UTC"},
        )
        with urllib.request.urlopen(req, timeout=600) as r:  # noqa: S310
            page = json.load(r)
        rows: list[list] = []
        while True:
            if "error" in page:
                raise TrinoError(page["error"].get("message", str(page["error"]))[:300])
            rows += page.get("data", [])
            if "nextUri" not in page:
                return rows
            with urllib.request.urlopen(page["nextUri"], timeout=600) as r:  # noqa: S310
                page = json.load(r)

    def _tail(self) -> str:
        return log_tail(os.path.join(self.dir, "server.log"), 800)

    def __exit__(self, *exc: object) -> None:
        stop(self.proc, getattr(self, "_log", None), self.dir, timeout=30)
