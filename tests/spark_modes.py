"""The Spark a test session runs on: `MOR_TEST_SPARK` = classic (default), local-cluster or
connect. The Makefile's test matrix runs the suite (or a part of it) in each; a mode that cannot
start fails the run, it is never skipped."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("classic", "local-cluster", "standalone", "connect")


def mode() -> str:
    m = os.environ.get("MOR_TEST_SPARK", "classic")
    if m not in MODES:
        raise RuntimeError(f"MOR_TEST_SPARK must be one of {', '.join(MODES)}, not {m!r}")
    return m


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ConnectServer:
    """A Spark Connect server on 127.0.0.1, started from pyspark's own jars and scripts;
    `conf`: more settings for it (`spark.jars.packages` among them: resolved at start-up, as
    `spark-submit --packages` does)."""

    def __init__(self, conf: dict[str, str] | None = None) -> None:
        import pyspark

        if int(pyspark.__version__.split(".")[0]) < 4:
            raise RuntimeError(
                f"MOR_TEST_SPARK=connect needs pyspark 4.x (its jars hold the Connect server); "
                f"this environment has pyspark {pyspark.__version__}"
            )
        home = Path(pyspark.__file__).parent
        self.port = _free_port()
        self.log = Path(tempfile.mkdtemp(prefix="mor-connect-")) / "server.log"
        # its Python tasks run this environment, as an operator installs one
        env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
        env.pop("SPARK_REMOTE", None)
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        cmd = [
            str(home / "bin" / "spark-submit"),
            "--master",
            os.environ.get("MOR_SPARK_MASTER", "local[2]"),
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            f"spark.connect.grpc.binding.port={self.port}",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.session.timeZone=UTC",
            "--conf",
            "spark.sql.shuffle.partitions=8",
            "--conf",
            f"spark.driver.extraJavaOptions=-Dlog4j.configurationFile=file:{_log_conf()}",
            *(a for k, v in (conf or {}).items() for a in ("--conf", f"{k}={v}")),
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "spark-internal",
        ]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 300  # the first start may download its packages
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-1500:]
                raise RuntimeError(f"the Spark Connect server exited; {self.log}:\n{tail}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the Spark Connect server did not listen within 300 s; see {self.log}")

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.log.parent, ignore_errors=True)


class Standalone:
    """A standalone master and one worker (two cores) on 127.0.0.1, started with pyspark's own
    `spark-class`, as a real cluster is: executors in JVMs the driver does not own."""

    def __init__(self) -> None:
        import json
        import urllib.request

        import pyspark

        home = Path(pyspark.__file__).parent
        self.dir = Path(tempfile.mkdtemp(prefix="mor-standalone-"))
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOG_DIR": str(self.dir)}
        port, ui = _free_port(), _free_port()
        self.url = f"spark://127.0.0.1:{port}"
        spark_class = str(home / "bin" / "spark-class")
        self.procs: list[subprocess.Popen[bytes]] = []
        for name, args in (
            (
                "master",
                ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
                + ["--port", str(port), "--webui-port", str(ui)],
            ),
            (
                "worker",
                ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1"]
                + ["--cores", "2", "--memory", "2g", "--webui-port", str(_free_port())]
                + ["--work-dir", str(self.dir / "work")],
            ),
        ):
            with open(self.dir / f"{name}.log", "wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        [spark_class, *args], stdout=out, stderr=subprocess.STDOUT, env=env
                    )
                )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"the standalone master or worker exited; see {self.dir}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                    if json.load(r).get("aliveworkers", 0) >= 1:
                        return
            except OSError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"no standalone worker registered within 120 s; see {self.dir}")

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _log_conf() -> str:
    import mor.physical.spark

    return str(Path(mor.physical.spark.__file__).parent / "log4j2.properties")


def start() -> tuple[Any, Any]:
    """(session, what to stop) for this test run's mode."""
    m = mode()
    if m == "connect":
        from pyspark.sql import SparkSession

        server = ConnectServer()
        os.environ["MOR_TEST_CONNECT_URL"] = server.url  # for tests that run `mor --remote`
        try:
            return SparkSession.builder.remote(server.url).getOrCreate(), server
        except BaseException:  # no session (a classic one runs already): no server left behind
            server.stop()
            raise
    from mor.physical import local_session

    if m == "standalone":
        cluster = Standalone()
        os.environ["MOR_SPARK_MASTER"] = cluster.url
        # the workers' Python: this environment, as a cluster's operator sets PYSPARK_PYTHON
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        return local_session(), cluster
    if m == "local-cluster":
        # two executors in their own JVMs: nothing may rely on the driver's memory or files
        os.environ["MOR_SPARK_MASTER"] = "local-cluster[2,1,1024]"
    else:
        os.environ.setdefault("MOR_SPARK_MASTER", "local[2]")
    return local_session(), None
