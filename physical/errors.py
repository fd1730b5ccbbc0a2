"""Spark's parse and analysis errors as one line in the user's terms: the reason Spark gives,
the line and column in the user's input, the user's table names instead of mor's views."""

from __future__ import annotations

import re

from mor.planner.errors import QueryError
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
    for name, ref in zip(names, plan.refs):
        message = message.replace(name, ref)
    message = re.sub(r"\bmor_scan_\d+_[0-9a-f]{12}\b", "<scan>", message)
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
