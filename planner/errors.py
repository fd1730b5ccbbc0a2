"""Errors the user sees: one line each, naming what is wrong and where."""

from __future__ import annotations


class MorError(Exception):
    """Base class: a problem with the user's query, table or data (exit code 1)."""

    exit_code = 1


class SqlSyntaxError(MorError):
    def __init__(self, message: str, line: int | None = None, col: int | None = None) -> None:
        where = f" at line {line}, column {col}" if line is not None else ""
        super().__init__(f"SQL syntax error{where}: {message}")
        self.line = line
        self.col = col


class NotAQueryError(MorError):
    """The statement is neither a query nor a row-level write mor commits (DELETE)."""


class TableNotFoundError(MorError):
    pass


class ColumnNotFoundError(MorError):
    pass


class AmbiguousNameError(TableNotFoundError):
    """A name both mor's catalog and Spark's session hold: mor never takes it from one of
    them silently (planner/names.py)."""


class UnsupportedError(MorError):
    """A SQL construct or a table feature that mor refuses rather than reading around it."""


class DataFileError(MorError):
    """A data or delete file is missing or unreadable."""


class MetadataError(MorError):
    """Table metadata is missing, unreadable or inconsistent."""


class ConfigError(MorError):
    """A setting (an environment variable) has a value mor cannot use."""


class CatalogUnreachableError(MorError):
    """A catalog that is configured could not be reached or refused the connection (a REST
    server down, a database refusing it): the server is at fault, not the name."""


class CatalogAccessError(MorError):
    """A catalog refused this user: credentials it does not accept (401, an expired token) or
    a table it does not grant (403)."""


class ArgumentError(MorError, TypeError):
    """A public function was called with an argument of the wrong kind: names the function,
    the argument and what it must be (a TypeError too, as Python's own would be)."""


class QueryError(MorError):
    """Spark refused the query around the scans (an unknown function or column, a type
    mismatch): Spark's reason, at the line and column of the user's text."""


class InternalError(MorError):
    """An invariant of mor's own plan failed: a bug in mor, never a problem with the user's
    query or table. Raised instead of returning rows from a plan that may be wrong."""

    exit_code = 3

    def __init__(self, message: str) -> None:
        super().__init__(f"internal error (a bug in mor; please report it): {message}")


class ConsumeError(MorError):
    """The table's history moved under a changes checkpoint, or the checkpoint itself is
    wrong: its changes cannot be delivered exactly (mor/consume.py)."""


# words that make a setting's value a secret wherever mor shows settings (`mor config`): keys,
# tokens, passwords and credentials of object stores, catalogs and JDBC connections
_SECRET_WORDS = ("secret", "token", "password", "passwd", "credential", "private")


def is_secret(key: str) -> bool:
    """Whether the setting `key` (a Spark, Hadoop, pyiceberg FileIO or catalog property)
    holds a secret, shown as `***`: `fs.s3a.secret.key`, `s3.session-token`, `oauth2`
    `credential`, a JDBC `password`, ..."""
    k = key.lower()
    return any(w in k for w in _SECRET_WORDS)


def shown(key: str, value: object) -> str:
    """A setting's value as mor prints it: `***` for a secret (is_secret)."""
    return "***" if is_secret(key) else str(value)


def clipped(text: str, limit: int = 400) -> str:
    """One line of a reason at most `limit` characters long, cut at a word (a store's or
    library's reason names what failed near its end: cutting it mid-word loses that)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > limit // 2 else limit] + " ..."
