"""What DELETE, UPDATE and MERGE share before anything runs: the statement's target and
branch, its isolation level, the rows query's pin to the snapshot read, the rule a value
written must meet, and errors about the generated rows query told in the user's statement.

No Spark and no I/O (a catalog is asked only whether a table exists, through a callable):
tests/test_write_statements.py holds these rules without a session.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from mor.planner.errors import MorError, UnsupportedError
from mor.planner.sql import Statement

KINDS: dict[type, str] = {exp.Delete: "DELETE", exp.Update: "UPDATE", exp.Merge: "MERGE"}
ISOLATION_KEYS = {
    "DELETE": "write.delete.isolation-level",
    "UPDATE": "write.update.isolation-level",
    "MERGE": "write.merge.isolation-level",
}
ISOLATION_LEVELS = ("serializable", "snapshot")


def is_row_write(tree: exp.Expression) -> bool:
    """Whether a parsed statement is one of the row-level writes mor commits."""
    return type(tree) in KINDS


def kind_of(tree: exp.Expression) -> str:
    return KINDS[type(tree)]


def table_name(t: exp.Table) -> str:
    """`ns.t` (or `cat.ns.t`) as the statement names the table."""
    return ".".join(p.name for p in t.parts)


def pinned_at(target: exp.Table, version: int | str | None) -> exp.Table:
    """The table without its alias, `VERSION AS OF <version>` (a snapshot id, or a branch's
    name) when one is given."""
    pinned = target.copy()
    pinned.set("alias", None)
    if version is not None:
        value = (
            exp.Literal.number(version) if isinstance(version, int) else exp.Literal.string(version)
        )
        pinned.set("version", exp.Version(this="VERSION", kind="AS OF", expression=value))
    return pinned


def isolation_level(properties: dict[str, str], kind: str, name: str) -> str:
    """The table's isolation level for a statement of `kind` (Iceberg's
    `write.<delete|update|merge>.isolation-level`; serializable by default)."""
    key = ISOLATION_KEYS[kind]
    level = properties.get(key, "serializable").strip().lower()
    if level not in ISOLATION_LEVELS:
        raise MorError(
            f"{name}: {key}={properties[key]!r}; Iceberg knows serializable and snapshot"
        )
    return level


def branch_of(
    target: exp.Table, branch: str, table_exists: Callable[[str], bool], verb: str
) -> tuple[exp.Table, str]:
    """Spark's name of a table's branch, `ns.t.branch_<name>` (when no table has that name):
    the table and the branch; else `target` and `branch` as given. A branch named both ways
    must be the same."""
    parts = target.parts
    last = parts[-1].name
    if len(parts) < 3 or not last.startswith("branch_") or table_exists(table_name(target)):
        return target, branch
    named = last.removeprefix("branch_")
    if branch not in ("main", named):
        raise MorError(
            f"{verb} {table_name(target)}: branch {named!r} in the name, "
            f"{branch!r} given as --branch"
        )
    table = exp.Table(
        this=parts[-2].copy(),
        db=parts[-3].copy(),
        catalog=parts[-4].copy() if len(parts) > 3 else None,
        alias=target.args.get("alias"),
    )
    return table, named


def refuse_version(target: exp.Table, verb: str) -> None:
    if target.args.get("version") is not None:
        raise UnsupportedError(
            f"{verb} {table_name(target)} VERSION AS OF: a snapshot cannot be changed; use --branch"
        )


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# --- the rule a written value meets ---------------------------------------------------------

# Spark's atomic types (as its JSON names them) a value may have besides the column's own:
# what widens without loss or surprise (an int literal for a bigint column, NULL for any);
# anything else must be CAST in the statement (a cast mor added could turn 'abc' into NULL or
# wrap an overflow silently)
_WIDENS = {
    "long": ("byte", "short", "integer"),
    "integer": ("byte", "short"),
    "short": ("byte",),
    "double": ("float", "byte", "short", "integer"),
    "float": ("byte", "short"),
}
_INTEGRAL = ("byte", "short", "integer", "long")
_SIMPLE = {"byte": "tinyint", "short": "smallint", "integer": "int", "long": "bigint"}


def value_fits(got: Any, want: Any) -> bool:
    """Whether a value of Spark type `got` may be written into a column of type `want`
    (both as Spark's `DataType.jsonValue()`): the same type, NULL, a widening of an atomic
    type, and the same rule inside arrays, maps and structs (fields by name, in order)."""
    if got == want or got in ("void", "null"):
        return True
    if isinstance(got, str) and isinstance(want, str):
        if got in _WIDENS.get(want, ()):
            return True
        if want.startswith("decimal") and got.startswith("decimal"):
            return _decimal_widens(got, want)
        return want.startswith("decimal") and got in _INTEGRAL
    if not (isinstance(got, dict) and isinstance(want, dict)) or got["type"] != want["type"]:
        return False
    if want["type"] == "array":
        return value_fits(got["elementType"], want["elementType"])
    if want["type"] == "map":
        return value_fits(got["keyType"], want["keyType"]) and value_fits(
            got["valueType"], want["valueType"]
        )
    if want["type"] == "struct":
        a, b = got["fields"], want["fields"]
        return len(a) == len(b) and all(
            x["name"].lower() == y["name"].lower() and value_fits(x["type"], y["type"])
            for x, y in zip(a, b)
        )
    return False


def _decimal_widens(got: str, want: str) -> bool:
    """decimal(p, s) into decimal(P, S) holds every value: S >= s and P - S >= p - s (a
    literal 25.50 is decimal(4,2), written into a decimal(10,2) column)."""

    def ps(t: str) -> tuple[int, int]:
        p, _, s = t[len("decimal(") : -1].partition(",")
        return int(p), int(s)

    try:
        (p, s), (pw, sw) = ps(got), ps(want)
    except ValueError:
        return False
    return sw >= s and pw - sw >= p - s


def simple_string(t: Any) -> str:
    """A type as Spark's JSON gives it, as Spark prints it (`bigint`, `array<int>`)."""
    if isinstance(t, str):
        return _SIMPLE.get(t, t)
    if t["type"] == "array":
        return f"array<{simple_string(t['elementType'])}>"
    if t["type"] == "map":
        return f"map<{simple_string(t['keyType'])},{simple_string(t['valueType'])}>"
    if t["type"] == "struct":
        return "struct<" + ",".join(
            f"{f['name']}:{simple_string(f['type'])}" for f in t["fields"]
        ) + ">"  # fmt: skip
    return str(t.get("type"))


@dataclass(frozen=True)
class ValueCheck:
    """A value the statement writes: `what` it is (in the error), the rows query's columns of
    its value as the statement computes it and of the column it goes to."""

    what: str
    value: str
    column: str


def check_values(checks: tuple[ValueCheck, ...], types: dict[str, Any]) -> None:
    """Each value's type fits its column's (`types`: the analysed rows query's columns, as
    Spark's JSON); else one line asking for a CAST in the statement."""
    for c in checks:
        got, want = types.get(c.value), types.get(c.column)
        if got is None or want is None or value_fits(got, want):
            continue
        shown = simple_string(want)
        raise UnsupportedError(
            f"{c.what}: the value is {simple_string(got)}, the column {shown}; "
            f"write CAST(... AS {shown}) in the statement"
        )


# --- errors in the user's words -------------------------------------------------------------


@contextmanager
def told_in(
    stmt: Statement, moved: Callable[[int, int], tuple[int, int]] | None, kind: str
) -> Iterator[None]:
    """MorErrors about the generated rows query of a statement of `kind` name lines and
    columns of the user's statement: `moved(line, column)` of the generated text -> the
    statement's (None: the statement's start), the generated pin `VERSION AS OF <id>` and
    mor's marker column left out."""
    try:
        yield
    except MorError as error:
        before = stmt.source[: stmt.offset]
        line0 = before.count("\n") + 1
        col0 = stmt.offset - (before.rfind("\n") + 1) + 1

        def place(m: re.Match[str]) -> str:
            line, col = int(m.group(1)), int(m.group(2))
            if moved is None:
                return f"in the {kind} at line {line0}, column {col0}"
            line, col = moved(line, col)
            return f"line {line}, column {col}"

        message = re.sub(r"line (\d+), column (\d+)", place, str(error))
        message = re.sub(r" VERSION AS OF \d+", "", message)
        message = re.sub(r",? `[^`]*`\.`_mor_present`", "", message)  # MERGE's marker column
        if message != str(error):
            error.args = (message, *error.args[1:])
        raise


def where_mover(stmt: Statement, where_at: int, where_col: int) -> Callable[[int, int], tuple]:
    """For a rows query of `<prefix> <the statement's text from its WHERE>`: a position in
    it (the WHERE at column `where_col` of its line 1) -> the position in the user's input."""
    start = stmt.offset + where_at
    before = stmt.source[:start]
    line0 = before.count("\n") + 1
    col0 = start - (before.rfind("\n") + 1) + 1

    def moved(line: int, col: int) -> tuple[int, int]:
        if line == 1:
            return line0, max(col0, col0 + col - where_col)
        return line0 + line - 1, col

    return moved
