"""The table's store settings as Spark gets them (physical/spark/store_access.py): a scheme per
set of settings, the settings as options of each read, never a secret in what is shown, and the
session's own settings untouched. Spark-free; the reads themselves run against SeaweedFS with
vended credentials in tests/oracle/on_s3.py (the object-store leg)."""

from __future__ import annotations

import pytest

from mor.physical.spark import store_access
from mor.physical.spark.spark_errors import recognised
from mor.physical.spark.store_access import KEEP_FOR_S, SIMPLE, TEMPORARY, access_of, scoped

pytestmark = [pytest.mark.check]

VENDED = {
    "s3.endpoint": "http://127.0.0.1:8333",
    "s3.region": "us-east-1",
    "s3.access-key-id": "ASIA-VENDED-1",
    "s3.secret-access-key": "SECRET-sentinel-1",
    "s3.session-token": "TOKEN-sentinel-1",
    "s3.path-style-access": "true",
    "credential": "client:CLIENT-SECRET-sentinel",
    "uri": "http://catalog",
}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    store_access._clear_kept()


def test_no_store_setting_means_the_sessions_own() -> None:
    assert access_of({}) is None
    assert access_of({"uri": "http://catalog", "credential": "a:b"}) is None


def test_vended_credentials_become_a_scheme_and_per_bucket_options() -> None:
    a = access_of(VENDED)
    assert a is not None and a.scheme.startswith("s3a-mor-")
    opts = a.options(["s3a-mor-x://lake/db/t/data/f.parquet"])
    assert opts[f"fs.{a.scheme}.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    for prefix in ("fs.s3a.", "fs.s3a.bucket.lake."):
        assert opts[prefix + "access.key"] == "ASIA-VENDED-1"
        assert opts[prefix + "secret.key"] == "SECRET-sentinel-1"
        assert opts[prefix + "session.token"] == "TOKEN-sentinel-1"
        assert opts[prefix + "aws.credentials.provider"] == TEMPORARY
        assert opts[prefix + "endpoint"] == "http://127.0.0.1:8333"
        assert opts[prefix + "path.style.access"] == "true"
        assert opts[prefix + "connection.ssl.enabled"] == "false"
    # what is not a store setting (the catalog's OAuth secret) never becomes an option
    assert not any("CLIENT-SECRET" in v for v in opts.values())
    static = access_of({"s3.access-key-id": "K", "s3.secret-access-key": "S"})
    assert static is not None and dict(static.settings)["aws.credentials.provider"] == SIMPLE


def test_paths_change_scheme_only_for_s3a() -> None:
    a = access_of(VENDED)
    assert a is not None
    assert a.path("s3a://lake/db/t/f.parquet") == f"{a.scheme}://lake/db/t/f.parquet"
    assert a.path("file:/tmp/x.parquet") == "file:/tmp/x.parquet"
    assert a.path("s3://lake/x") == "s3://lake/x"  # recorded s3:// is mapped to s3a:// first


def test_two_credentials_two_schemes_and_the_same_one_name() -> None:
    a = access_of(VENDED)
    b = access_of({**VENDED, "s3.session-token": "TOKEN-sentinel-2"})
    c = access_of(dict(reversed(list(VENDED.items()))))
    assert a is not None and b is not None and c is not None
    # another token (another table's, or a refreshed one) is another file system
    assert a.scheme != b.scheme
    # the same settings are the same name in every process (a Connect server outlives them)
    assert a.scheme == c.scheme
    # the endpoint is part of it: the same keys for another store are not the same file system
    d = access_of({**VENDED, "s3.endpoint": "http://other:9000"})
    assert d is not None and d.scheme != a.scheme


def test_what_explain_shows_has_no_secret() -> None:
    a = access_of({**VENDED, "s3.session-token-expires-at-ms": "1800000000000"})
    assert a is not None
    line = a.describe()
    for secret in ("ASIA-VENDED-1", "SECRET-sentinel-1", "TOKEN-sentinel-1"):
        assert secret not in line and secret not in repr(a.scheme)
    assert "keys + session token" in line and "expiring 2027-01-15" in line
    assert a.scheme in line


def test_a_tables_earlier_credentials_are_kept_while_valid() -> None:
    now = 1_800_000_000_000
    first = {**VENDED, "s3.session-token-expires-at-ms": str(now + 3600_000)}
    second = {
        **VENDED,
        "s3.session-token": "TOKEN-sentinel-2",
        "s3.session-token-expires-at-ms": str(now + 7200_000),
    }
    a = scoped("s3://lake/db/t", first, now)
    # a second load vends new credentials: the first, valid an hour more, are used again
    assert scoped("s3://lake/db/t", second, now) == a
    # another table never gets them
    other = scoped("s3://lake/db/u", second, now)
    assert other is not None and a is not None and other.scheme != a.scheme
    # less than KEEP_FOR_S left: the new ones
    late = now + 3600_000 - (KEEP_FOR_S - 1) * 1000
    b = scoped("s3://lake/db/t", second, late)
    assert b is not None and b.scheme != a.scheme
    # credentials without an expiry are always used as given
    assert scoped("s3://lake/db/t", VENDED, now) == access_of(VENDED)


def test_refusals_of_the_tables_own_credentials_are_named_as_such() -> None:
    a = access_of(VENDED)
    assert a is not None
    text = (
        f"java.nio.file.AccessDeniedException: {a.scheme}://lake/db/t/data/f.parquet: "
        "getFileStatus: Status Code: 403; Error Code: AccessDenied"
    )
    e = recognised(Exception(text))
    assert e is not None
    msg = str(e)
    assert "s3a://lake/db/t/data/f.parquet" in msg and a.scheme not in msg
    assert "table's own credentials" in msg and "\n" not in msg
    plain = recognised(Exception(text.replace(a.scheme, "s3a")))
    assert plain is not None and "give the session credentials" in str(plain)
    compact = recognised(
        Exception(text.replace("data/f.parquet", "data/mor-compact-1/mor_group=0/.spark-x"))
    )
    assert compact is not None and "compaction's Spark job cannot write" in str(compact)


def test_a_write_uses_the_credentials_of_its_own_load() -> None:
    """Compaction writes with what the catalog vended at this load, never with earlier
    credentials kept for reads (a grant narrowed since decides what is written)."""
    from types import SimpleNamespace

    from mor.physical.spark.store_access import access_for

    far = "9999999999999"
    first = SimpleNamespace(properties={**VENDED, "s3.session-token-expires-at-ms": far})
    second = SimpleNamespace(
        properties={
            **VENDED,
            "s3.session-token": "TOKEN-sentinel-2",
            "s3.session-token-expires-at-ms": far,
        }
    )
    kept = access_for("s3://lake/db/t", first)
    assert access_for("s3://lake/db/t", second) == kept
    written = access_for("s3://lake/db/t", second, writing=True)
    assert written is not None and kept is not None and written.scheme != kept.scheme


def test_compactions_pyarrow_tasks_get_the_same_settings() -> None:
    """What compaction's pyarrow writer is given (physical/rewrite_jobs.write_arrow): the same
    keys, token, endpoint and addressing as Spark's reads, as S3FileSystem's arguments, kept
    out of the store's repr; and pyarrow takes them."""
    import pyarrow.fs as pafs

    from mor.physical.rewrite_jobs import ArrowStore

    a = access_of(VENDED)
    assert a is not None
    got = dict(a.arrow_options())
    assert got == {
        "access_key": "ASIA-VENDED-1",
        "secret_key": "SECRET-sentinel-1",
        "session_token": "TOKEN-sentinel-1",
        "region": "us-east-1",
        "endpoint_override": "127.0.0.1:8333",
        "scheme": "http",
        "force_virtual_addressing": False,
    }
    pafs.S3FileSystem(**got)  # every argument one pyarrow knows
    virtual = access_of(
        {"s3.endpoint": "https://s3.example.com", "s3.force-virtual-addressing": "true"}
    )
    assert virtual is not None
    assert dict(virtual.arrow_options()) == {
        "endpoint_override": "s3.example.com",
        "scheme": "https",
        "force_virtual_addressing": True,
    }
    store = ArrowStore("s3", "lake/db/t/data/x", a.arrow_options())
    assert "SECRET" not in repr(store) and "TOKEN" not in repr(store)


def test_a_python_tasks_failure_is_its_exception_in_one_line() -> None:
    from mor.physical.spark.spark_errors import spark_failure

    text = (
        "  An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "Traceback (most recent call last):\n"
        '  File "worker.py", line 1, in main\n'
        "    import pyarrow as pa\n"
        "OSError: When initiating multiple part upload for key 'k': AWS Error ACCESS_DENIED\n"
        "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException\n"
    )
    line = str(spark_failure(RuntimeError(text)))
    assert line == (
        "query failed: a Python task failed: OSError: When initiating multiple part upload for "
        "key 'k': AWS Error ACCESS_DENIED"
    )
