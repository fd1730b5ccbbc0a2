"""Spark's errors in the user's terms, one line each.

- `query_error`: a parse or analysis error: the reason Spark gives, the line and column in the
  user's input, the user's table names instead of mor's views.
- `recognised`: a failure while a query runs that mor can name: one of its own guards (raised
  inside Spark tasks with `raise_error`), a data or delete file missing, unreadable, changed
  or of another column type. As a MorError subclass; None for anything else.
"""

from __future__ import annotations

import re
from typing import Any

from mor.physical.spark.s3a import HADOOP_AWS
from mor.planner.errors import (
    ConfigError,
    DataFileError,
    InternalError,
    MorError,
    QueryError,
)
from mor.planner.nodes import SparkQuery

_WHERE = re.compile(r"\s*[;.]?\s*\(?line (\d+),? pos (\d+)\)?;?")


STACK = (
    "Spark ran out of stack on this statement (java.lang.StackOverflowError): it nests too "
    "deeply for the JVM's thread stack (raise it with -Xss in spark.driver.extraJavaOptions)"
)


def query_error(e: BaseException, plan: SparkQuery, names: tuple[str, ...]) -> QueryError:
    text = str(e).strip()
    if "java.lang.StackOverflowError" in text:
        return QueryError(STACK)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else type(e).__name__
    m = _WHERE.search(text)
    message = _WHERE.sub("", first).strip().rstrip(";").strip()
    for name, ref in zip(names, plan.refs + plan.relations):
        message = message.replace(name, ref)
    message = re.sub(r"\bmor_(?:scan|view)_\d+_[0-9a-f]{12}\b", "<scan>", message)
    if m is not None:
        line, col = plan.position(names, int(m.group(1)), int(m.group(2)))
        message += f" (line {line}, column {col})"
    if "input_file_name" in message:
        message += (
            "; a mor scan reads several sources: the _file metadata column names each row's file"
        )
    if "UNRESOLVED_COLUMN" in message and plan.columns:
        seen = dict.fromkeys(zip(plan.refs, plan.columns))
        message += "; " + "; ".join(f"columns of {r}: {', '.join(c)}" for r, c in seen)
    return QueryError(message)


# mor's guards inside Spark tasks (physical/scan/guards.py, bitmaps.py, reads.py): "mor: <message>"
_GUARDS: tuple[tuple[str, type[MorError]], ...] = (
    ("has more rows than its metadata records", DataFileError),
    ("came from a file the plan does not list", InternalError),
)


def recognised(e: BaseException, plan: Any = None) -> MorError | None:
    """The MorError a failed Spark action stands for, if mor can tell; else None. With the
    query's `plan`, a failure that names no file is checked against the plan's files for a
    column stored with another type (the one fault Spark's Parquet reader reports unnamed)."""
    if isinstance(e, MorError):
        return e
    text = str(e)
    if "java.lang.StackOverflowError" in text:
        return QueryError(STACK)
    m = re.search(r"mor: ([^\n]*)", text)
    if m:
        message = m.group(1).strip()
        for needle, kind in _GUARDS:
            if needle in message:
                return kind(message)
        return MorError(message)
    found = _object_store(text)
    if found is not None:
        return found
    m = re.search(r"ChecksumException: Checksum error: (\S+)", text)
    if m:
        return DataFileError(
            f"file {m.group(1)} fails its Hadoop checksum (the .crc file beside it): it was "
            "changed after it was written; refusing to read it"
        )
    m = re.search(r"(\S+) is not a Parquet file", text)
    if m:
        return DataFileError(
            f"unreadable file {m.group(1)}: not a Parquet file (truncated or another format)"
        )
    m = re.search(r"(?:FileNotFoundException|PATH_NOT_FOUND\]?)[:\s]*(?:File )?(\S+)", text)
    if m:
        return DataFileError(f"file missing: {m.group(1).rstrip('.')}")
    m = re.search(r"(?:Could not read footer for file|Error while reading file)[:\s]*(\S+)", text)
    if m:
        return DataFileError(f"unreadable file {m.group(1).rstrip('.')}")
    if plan is not None:
        from mor.planner.layouts import column_type_mismatch

        mismatch = column_type_mismatch(plan)
        if mismatch:
            return DataFileError(mismatch)
    return None


_S3A_HINT = "docs/configuration.md, Object storage"


def _session_hadoop() -> str | None:
    """The Hadoop version of this process's active session (classic or Spark Connect), asked
    of Spark itself; None when it cannot tell."""
    try:
        from mor.physical.spark.session import active_session

        session = active_session()
        if session is None:
            return None
        row = session.sql(
            "SELECT reflect('org.apache.hadoop.util.VersionInfo', 'getVersion')"
        ).first()
        version = str(row[0]) if row is not None and row[0] else ""
        return version if re.fullmatch(r"\d+\.\d+\.\d+", version) else None
    except Exception:  # noqa: BLE001 - only a hint: the error is reported without it
        return None


def _object_store(text: str) -> MorError | None:
    """Spark's s3a failures, in one line naming the bucket and what to set in the session:
    no connector, access refused, no such bucket, an endpoint it cannot reach."""
    # Hadoop's core-default.xml names the s3a class: without hadoop-aws it is not found
    no_s3a = re.search(
        r'No FileSystem for scheme "?s3a\b|Class org\.apache\.hadoop\.fs\.s3a\.S3AFileSystem '
        r"not found",
        text,
    )
    m = re.search(r'No FileSystem for scheme "?(s3|s3n|gs|abfss?|wasbs?)"?', text)
    if no_s3a:
        hadoop = _session_hadoop()
        coords = f"{HADOOP_AWS}:{hadoop or '<its Hadoop version>'}"
        return ConfigError(
            f"Spark cannot read s3a:// paths: this session's Hadoop {hadoop or ''}"
            f"{' ' if hadoop else ''}has no s3a connector: start the session with "
            f"spark.jars.packages={coords} (Spark's Ivy fetches it and the AWS SDK bundle it "
            f"was built with; a Spark Connect server: --packages {coords}; {_S3A_HINT})"
        )
    if m:
        return ConfigError(
            f"Spark cannot read {m.group(1)}:// paths: its Hadoop has no connector for them "
            f"(for s3:// paths mor reads s3a://, unless the s3a_paths setting is off; "
            f"{_S3A_HINT})"
        )
    path = re.search(r"s3a(-mor-[0-9a-f]+)?(://[^\s:]+)", text)
    where = "s3a" + path.group(2) if path else "s3a://"
    scoped = bool(path and path.group(1))  # read with the table's own store settings
    bucket = where.split("/")[2] if where.count("/") >= 2 and len(where) > 6 else "?"
    refused = path and re.search(
        r"AccessDenied|403 Forbidden|Status Code: 403|InvalidAccessKeyId|"
        r"SignatureDoesNotMatch|ExpiredToken|has no credentials",
        text,
    )
    if refused and "/mor-compact-" in where:
        folder = where.split("/mor-compact-")[0]
        return DataFileError(
            f"compaction's Spark job cannot write under {folder}: the store refused a "
            f"directory request (403) on {where} (Spark's file commit protocol lists and "
            "renames directories; S3 Tables buckets serve object requests only)"
        )
    if refused and scoped:
        return DataFileError(
            f"the store refused {where} (403) to the table's own credentials (those its "
            "catalog vended, or its FileIO's s3.* / [file-io] / AWS_* keys): expired, or not "
            "granted for this path; load the table again, or check the grant "
            f"(the table_store_access setting off reads with the session's own; {_S3A_HINT})"
        )
    if refused:
        return DataFileError(
            f"Spark has no access to {where} (403): give the session credentials for bucket "
            f"{bucket} (spark.hadoop.fs.s3a.access.key / secret.key, or "
            f"fs.s3a.bucket.{bucket}.* / a credentials provider; {_S3A_HINT})"
        )
    if path and re.search(r"UnknownStoreException|NoSuchBucket|bucket does not exist", text):
        return DataFileError(
            f"bucket {bucket} does not exist where Spark looks for it ({where}): check the "
            f"session's spark.hadoop.fs.s3a.endpoint (or fs.s3a.bucket.{bucket}.endpoint)"
        )
    if path and re.search(
        r"Unable to execute HTTP request|Connection refused|UnknownHostException|"
        r"ConnectTimeoutException|connect timed out",
        text,
    ):
        return DataFileError(
            f"Spark cannot reach the object store for {where}: set the session's "
            f"spark.hadoop.fs.s3a.endpoint (or fs.s3a.bucket.{bucket}.endpoint) to a store it "
            f"can reach ({_S3A_HINT})"
        )
    return None


def spark_failure(e: BaseException, plan: Any = None) -> MorError:
    """A failed Spark action as one MorError line: what `recognised` names, else Spark's first
    line of the reason."""
    found = recognised(e, plan)
    if found is not None:
        return found
    text = str(e)
    first = next((ln for ln in text.splitlines() if ln.strip()), type(e).__name__)
    if "exception was thrown from the Python worker" in first:
        # a Python task's failure: its exception, the traceback's last line
        named = re.compile(r"\s*\w+(Error|Exception)(:|$)")
        raised = [ln.strip() for ln in text.splitlines() if named.match(ln)]
        first = f"a Python task failed: {raised[-1]}" if raised else first.strip()
    return QueryError(f"query failed: {first[:300]}")
