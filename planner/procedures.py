"""Iceberg's Spark procedures as mor runs them: `CALL [catalog.]system.<name>(<arguments>)`.

Each procedure mor runs keeps the name, parameters, defaults and output columns Iceberg
1.12's Spark procedure declares, so that a script written for Iceberg's SQL runs unchanged:
arguments are given by position (in the declared order, optional ones left off at the end)
or all by name (`name => value`, in any order), never mixed. A procedure of Iceberg's that mor
does not run yet is refused by name. Binding is here (no Spark, no catalog); running is
writer/procedures.py, through the one statement execution (mor/statements.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlglot.tokens import TokenType

from mor.planner.ddl_parse import Words
from mor.planner.errors import SqlSyntaxError, UnsupportedError
from mor.planner.nodes import line_col


@dataclass(frozen=True)
class Param:
    """A procedure's parameter: its name, its type (`string`, `long`, `timestamp`, `boolean`,
    `longs`: an array of longs, or `map`: a map of strings, as Iceberg's procedure declares it)
    and whether it is required."""

    name: str
    kind: str
    required: bool = True


@dataclass(frozen=True)
class Procedure:
    name: str
    params: tuple[Param, ...]
    output: str  # the rows' Spark schema (DDL), Iceberg's output columns

    @property
    def columns(self) -> list[str]:
        return [c.split()[0] for c in self.output.split(", ")]


_TABLE = Param("table", "string")
PROCEDURES = {
    p.name: p
    for p in (
        Procedure(
            "rollback_to_snapshot",
            (_TABLE, Param("snapshot_id", "long")),
            "previous_snapshot_id bigint, current_snapshot_id bigint",
        ),
        Procedure(
            "rollback_to_timestamp",
            (_TABLE, Param("timestamp", "timestamp")),
            "previous_snapshot_id bigint, current_snapshot_id bigint",
        ),
        Procedure(
            "set_current_snapshot",
            (_TABLE, Param("snapshot_id", "long", False), Param("ref", "string", False)),
            "previous_snapshot_id bigint, current_snapshot_id bigint",
        ),
        Procedure(
            "expire_snapshots",
            (
                _TABLE,
                Param("older_than", "timestamp", False),
                Param("retain_last", "long", False),
                Param("max_concurrent_deletes", "long", False),
                Param("stream_results", "boolean", False),
                Param("snapshot_ids", "longs", False),
                Param("clean_expired_metadata", "boolean", False),
            ),
            "deleted_data_files_count bigint, deleted_position_delete_files_count bigint, "
            "deleted_equality_delete_files_count bigint, deleted_manifest_files_count bigint, "
            "deleted_manifest_lists_count bigint, deleted_statistics_files_count bigint",
        ),
        Procedure(
            "remove_orphan_files",
            (
                _TABLE,
                Param("older_than", "timestamp", False),
                Param("location", "string", False),
                Param("dry_run", "boolean", False),
                Param("max_concurrent_deletes", "long", False),
                Param("file_list_view", "string", False),
                Param("equal_schemes", "map", False),
                Param("equal_authorities", "map", False),
                Param("prefix_mismatch_mode", "string", False),
                Param("prefix_listing", "boolean", False),
                Param("stream_results", "boolean", False),
            ),
            "orphan_file_location string",
        ),
        Procedure(
            "cherrypick_snapshot",
            (_TABLE, Param("snapshot_id", "long")),
            "source_snapshot_id bigint, current_snapshot_id bigint",
        ),
        Procedure(
            "rewrite_data_files",
            (
                _TABLE,
                Param("strategy", "string", False),
                Param("sort_order", "string", False),
                Param("options", "map", False),
                Param("where", "string", False),
                Param("branch", "string", False),
            ),
            "rewritten_data_files_count int, added_data_files_count int, "
            "rewritten_bytes_count bigint, failed_data_files_count int, "
            "removed_delete_files_count int",
        ),
        Procedure(
            "rewrite_manifests",
            (_TABLE, Param("use_caching", "boolean", False), Param("spec_id", "long", False)),
            "rewritten_manifests_count int, added_manifests_count int",
        ),
        Procedure(
            "fast_forward",
            (_TABLE, Param("branch", "string"), Param("to", "string")),
            "branch_updated string, previous_ref bigint, updated_ref bigint",
        ),
    )
}
# Iceberg's other Spark procedures: named in the refusal, so that a user knows it is not a typo
NOT_YET = (
    "rewrite_position_delete_files",
    "publish_changes",
    "migrate",
    "snapshot",
    "add_files",
    "register_table",
    "ancestors_of",
    "create_changelog_view",
    "compute_table_stats",
    "compute_partition_stats",
    "rewrite_table_path",
)


@dataclass(frozen=True)
class Call:
    """A CALL read from its tokens: the catalog it names (None: the current one), the
    procedure, and its arguments bound to the procedure's parameters (absent: not given)."""

    catalog: str | None
    procedure: Procedure
    args: dict[str, Any]
    table_start: int  # where the table argument starts in the statement's text


def read_call(w: Words) -> Call:
    """`CALL [catalog.]system.<name>(<arguments>)` from `w` (at CALL)."""
    w.expect("CALL")
    parts = w.dotted("a procedure name")
    if len(parts) not in (2, 3) or parts[-2].lower() != "system":
        w.i -= 1
        w.fail("a procedure is named system.<name> or <catalog>.system.<name>")
    name = parts[-1].lower()
    proc = PROCEDURES.get(name)
    if proc is None:
        runs = ", ".join(PROCEDURES)
        if name in NOT_YET:
            raise UnsupportedError(
                f"CALL {name}: mor does not run Iceberg's {name} procedure yet (it runs {runs}; "
                "equality deletes are written as positions by mor convert-equality-deletes: "
                "docs/maintenance.md)"
            )
        w.i -= 1
        w.fail(f"no procedure {name}: mor runs {runs}")
    if not w.punct(TokenType.L_PAREN):
        w.fail("expected ( after the procedure's name")
    positional: list[tuple[Any, int]] = []
    named: dict[str, tuple[Any, int]] = {}
    while not w.punct(TokenType.R_PAREN):
        if positional or named:
            if not w.punct(TokenType.COMMA):
                w.fail("expected , or )")
        token = w.peek()
        if token is None:
            w.fail("expected an argument or )")
        assert token is not None
        if w.peek(1) is not None and w.peek(1).token_type == TokenType.FARROW:  # type: ignore[union-attr]
            key = w.name("an argument's name").lower()
            w.i += 1  # =>
            if key in named:
                w.i -= 2
                w.fail(f"argument {key} given twice")
            named[key] = (_value(w), w.offset + token.start)
        else:
            positional.append((_value(w), w.offset + token.start))
    w.end()
    if positional and named:
        raise SqlSyntaxError(
            f"CALL {name}: arguments are given all by position or all by name (name => value), "
            "not both",
            *line_col(w.source, w.offset + w.tokens[0].start),
        )
    params = proc.params
    if len(positional) > len(params):
        raise SqlSyntaxError(
            f"CALL {name}: {len(positional)} arguments given, it takes at most {len(params)} "
            f"({', '.join(p.name for p in params)})",
            *line_col(w.source, positional[len(params)][1]),
        )
    given = dict(zip((p.name for p in params), positional)) if positional else named
    unknown = [k for k in given if k not in {p.name for p in params}]
    if unknown:
        raise SqlSyntaxError(
            f"CALL {name}: no argument {unknown[0]} (it takes {', '.join(p.name for p in params)})",
            *line_col(w.source, given[unknown[0]][1]),
        )
    missing = [p.name for p in params if p.required and p.name not in given]
    if missing:
        raise SqlSyntaxError(
            f"CALL {name}: missing argument {missing[0]}",
            *line_col(w.source, w.offset + w.tokens[0].start),
        )
    args: dict[str, Any] = {}
    for p in params:
        if p.name in given:
            value, at = given[p.name]
            args[p.name] = _typed(name, p, value, w.source, at)
    return Call(parts[0] if len(parts) == 3 else None, proc, args, given["table"][1])


def _value(w: Words) -> Any:
    """A literal: a string, a whole number (a sign allowed), `TIMESTAMP '...'` (kept as
    ("timestamp", text)), TRUE or FALSE, `ARRAY(n, ...)` of whole numbers, or NULL."""
    t = w.peek()
    if t is None:
        w.fail("expected a value")
    assert t is not None
    if t.token_type == TokenType.STRING:
        return w.string()
    if t.token_type in (TokenType.NUMBER, TokenType.DASH):
        return w.number("a whole number")
    if t.text.upper() == "TIMESTAMP" and w.peek(1) is not None:
        w.i += 1
        return ("timestamp", w.string("the timestamp's text"))
    if t.text.upper() == "NULL":
        w.i += 1
        return None
    if t.text.upper() in ("TRUE", "FALSE"):
        w.i += 1
        return t.text.upper() == "TRUE"
    if t.text.upper() == "MAP" and w.peek(1) is not None:
        w.i += 1
        if not w.punct(TokenType.L_PAREN):
            w.fail("expected ( after MAP")
        pairs: list[str] = []
        while not w.punct(TokenType.R_PAREN):
            if pairs and not w.punct(TokenType.COMMA):
                w.fail("expected , or )")
            pairs.append(w.string("a string (map keys and values are strings)"))
        if len(pairs) % 2:
            w.i -= 1
            w.fail("map(...) takes keys and values in pairs")
        return {"map": dict(zip(pairs[::2], pairs[1::2]))}
    if t.text.upper() == "ARRAY" and w.peek(1) is not None:
        w.i += 1
        if not w.punct(TokenType.L_PAREN):
            w.fail("expected ( after ARRAY")
        items: list[Any] = []
        while not w.punct(TokenType.R_PAREN):
            if items and not w.punct(TokenType.COMMA):
                w.fail("expected , or )")
            items.append(w.number("a whole number"))
        return items
    w.fail("expected a string, a whole number, TIMESTAMP '...', ARRAY(...) or MAP(...)")
    return None


def _typed(proc: str, p: Param, value: Any, source: str, at: int) -> Any:
    def bad(what: str) -> SqlSyntaxError:
        return SqlSyntaxError(
            f"CALL {proc}: argument {p.name} must be {what}", *line_col(source, at)
        )

    if value is None:
        if p.required:
            raise bad("given (not NULL)")
        return None
    if p.kind == "string":
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if p.kind == "boolean":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if p.kind == "map":
        if not isinstance(value, dict) or "map" not in value:
            raise bad("a map of strings (map('s3a,s3n', 's3'))")
        return tuple(sorted(value["map"].items()))
    if isinstance(value, dict):
        raise bad("not a map")
    if p.kind == "longs":
        if not isinstance(value, list):
            raise bad("an array of snapshot ids (ARRAY(1, 2))")
        return tuple(value)
    if p.kind == "long":
        if isinstance(value, bool):
            raise bad("a whole number")
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)  # as Spark casts a string argument to the parameter's type
        if not isinstance(value, int):
            raise bad("a whole number")
        return value
    # timestamp: TIMESTAMP '...' or a string Spark casts (a zone-less one in UTC, as mor's
    # time travel reads it: planner/sql.py); a number is refused (Spark would cast it as
    # seconds, Iceberg's Java API takes milliseconds: neither reading is safe to guess)
    if isinstance(value, int):
        raise bad("a timestamp (TIMESTAMP '2024-01-31 12:00:00'), not a number")
    text = value[1] if isinstance(value, tuple) else value
    try:
        t = dt.datetime.fromisoformat(str(text).strip())
    except ValueError:
        raise bad(f"a timestamp like '2024-01-31 12:00:00', not {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp() * 1000)


# rewrite_data_files' options (Iceberg's `options => map(...)`) as mor's compaction takes them
_COMPACT_OPTIONS = {
    "min-input-files": ("min_input_files", int),
    "delete-file-threshold": ("delete_file_threshold", int),
    "target-file-size-bytes": ("target_file_size", int),
    "delete-ratio-threshold": ("delete_ratio_threshold", float),
}
# options that tune how Iceberg's action runs, not which files it rewrites nor what it writes:
# mor's compaction is one Spark job and one commit, so they change nothing
_TUNING = (
    "max-concurrent-file-group-rewrites",
    "partial-progress.enabled",
    "partial-progress.max-commits",
    "partial-progress.max-failed-commits",
    "max-file-group-size-bytes",
    "rewrite-job-order",
    "use-starting-sequence-number",
    "remove-dangling-deletes",
)


def compaction_options(
    strategy: str | None, sort_order: str | None, options: Iterable[tuple[str, str]]
) -> dict[str, Any]:
    """mor compact's keyword arguments for a CALL rewrite_data_files' `strategy`, `sort_order`
    and `options`; UnsupportedError naming what mor's compaction does not do."""
    if strategy is not None and strategy.strip().lower() != "binpack":
        raise UnsupportedError(
            f"CALL rewrite_data_files: strategy {strategy!r}: mor's compaction bin-packs "
            "(strategy => 'binpack'); sort and zorder are not done yet; nothing was committed"
        )
    if sort_order is not None:
        raise UnsupportedError(
            "CALL rewrite_data_files: sort_order: mor's compaction bin-packs, it does not sort "
            "yet; nothing was committed"
        )
    out: dict[str, Any] = {}
    for key, text in options:
        k = key.strip().lower()
        if k in _TUNING:
            continue
        if k not in _COMPACT_OPTIONS:
            known = ", ".join([*_COMPACT_OPTIONS, *_TUNING])
            raise UnsupportedError(
                f"CALL rewrite_data_files: option {key!r} is not one mor's compaction takes "
                f"({known}); nothing was committed"
            )
        name, kind = _COMPACT_OPTIONS[k]
        try:
            out[name] = kind(text.strip())
        except ValueError:
            raise UnsupportedError(
                f"CALL rewrite_data_files: option {key!r} = {text!r} is not a "
                f"{'whole number' if kind is int else 'number'}; nothing was committed"
            ) from None
    return out
