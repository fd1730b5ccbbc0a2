"""The statements sqlglot does not model (or models only in part), read from their tokens:
`ALTER TABLE` in all its forms (Spark's, and Iceberg's SQL extensions: partition fields,
write order and distribution, identifier fields, branches and tags), `SHOW ...`, and Spark's
column types, partition transforms and sort fields as the other statements need them.

Every function takes a statement's text and returns plain values; errors are SqlSyntaxErrors
at the user's line and column (planner/sql.py's `Statement` carries where the text starts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.tokens import Token, TokenType

from mor.planner.errors import SqlSyntaxError, UnsupportedError
from mor.planner.nodes import line_col

DIALECT = "spark"


def _tokenizer() -> Any:
    """Spark's tokenizer, with no statement read as one raw string (sqlglot's Spark dialect
    takes everything after SHOW, DESCRIBE or CALL as a single token)."""
    global _TOKENIZER
    if _TOKENIZER is None:
        base = sqlglot.Dialect.get_or_raise(DIALECT).tokenizer_class

        class Plain(base):  # type: ignore[misc, valid-type]
            COMMANDS: set[Any] = set()

        _TOKENIZER = Plain(dialect=DIALECT)
    return _TOKENIZER


_TOKENIZER: Any = None


class Words:
    """The tokens of one statement, read left to right (keywords compared without case)."""

    def __init__(self, text: str, offset: int = 0, source: str | None = None) -> None:
        self.text = text
        self.offset = offset
        self.source = source if source is not None else text
        self.tokens: list[Token] = list(_tokenizer().tokenize(text))
        self.i = 0

    # --- looking ---------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def word(self, ahead: int = 0) -> str:
        """The token's text in upper case ("" past the end)."""
        t = self.peek(ahead)
        return t.text.upper() if t is not None else ""

    def at(self, *words: str) -> bool:
        """Whether the next tokens are `words` (a word "IDENT" matches any identifier)."""
        return all(self.word(k) == w.upper() for k, w in enumerate(words))

    def done(self) -> bool:
        return self.i >= len(self.tokens)

    # --- taking ----------------------------------------------------------------------------

    def take(self, *words: str) -> bool:
        """Take `words` when they come next; whether they did."""
        if self.at(*words):
            self.i += len(words)
            return True
        return False

    def expect(self, *words: str, what: str | None = None) -> None:
        if not self.take(*words):
            self.fail(f"expected {what or ' '.join(words)}")

    def fail(self, message: str) -> None:
        t = self.peek()
        if t is None:
            where = self.offset + len(self.text.rstrip())
            message += ", at the end of the statement"
        else:
            where = self.offset + t.start
            message += f" at '{t.text}'"
        raise SqlSyntaxError(message, *line_col(self.source, where))

    def name(self, what: str = "a name") -> str:
        """One identifier (quoted or not), or a keyword used as one."""
        t = self.peek()
        if t is None or t.token_type in _PUNCTUATION:
            self.fail(f"expected {what}")
        assert t is not None
        self.i += 1
        return t.text

    def dotted(self, what: str = "a name") -> tuple[str, ...]:
        """`a.b.c`: its parts."""
        parts = [self.name(what)]
        while self.peek() is not None and self.peek().token_type == TokenType.DOT:  # type: ignore[union-attr]
            self.i += 1
            parts.append(self.name(what))
        return tuple(parts)

    def string(self, what: str = "a string") -> str:
        t = self.peek()
        if t is None or t.token_type != TokenType.STRING:
            self.fail(f"expected {what}")
        assert t is not None
        self.i += 1
        return t.text

    def number(self, what: str = "a number") -> int:
        t = self.peek()
        negative = False
        if t is not None and t.token_type == TokenType.DASH:
            negative = True
            self.i += 1
            t = self.peek()
        if t is None or t.token_type != TokenType.NUMBER:
            self.fail(f"expected {what}")
        assert t is not None
        self.i += 1
        try:
            value = int(t.text.rstrip("Ll"))
        except ValueError:
            self.fail(f"expected {what} (a whole number)")
            raise
        return -value if negative else value

    def punct(self, kind: TokenType) -> bool:
        t = self.peek()
        if t is not None and t.token_type == kind:
            self.i += 1
            return True
        return False

    def until(self, *stops: str) -> str:
        """The text up to (not including) the first top-level comma or closing parenthesis,
        or one of the `stops` keywords at the top level; the tokens taken."""
        depth = 0
        start = self.peek()
        if start is None:
            self.fail("expected more")
        assert start is not None
        end = start.start
        while not self.done():
            t = self.peek()
            assert t is not None
            if t.token_type in (TokenType.L_PAREN, TokenType.LT) and depth >= 0:
                depth += 1
            elif t.token_type in (TokenType.R_PAREN, TokenType.GT):
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and (t.token_type == TokenType.COMMA or t.text.upper() in stops):
                break
            end = t.end + 1
            self.i += 1
        return self.text[start.start : end]

    def rest(self) -> str:
        t = self.peek()
        return "" if t is None else self.text[t.start :]

    def end(self) -> None:
        if not self.done():
            self.fail("unexpected words")


_PUNCTUATION = {
    TokenType.COMMA,
    TokenType.L_PAREN,
    TokenType.R_PAREN,
    TokenType.DOT,
    TokenType.EQ,
    TokenType.STRING,
    TokenType.NUMBER,
    TokenType.SEMICOLON,
}


# --- column types -------------------------------------------------------------------------


def spark_type(text: str, where: Words) -> exp.DataType:
    """A Spark SQL type as sqlglot models it."""
    try:
        return exp.DataType.build(text, dialect=DIALECT)
    except (ParseError, ValueError):
        where.fail(f"expected a column type, not {text!r}")
        raise


# --- partition transforms and sort fields --------------------------------------------------

# Spark's names of Iceberg's transforms (Iceberg's Spark3Util and its SQL extensions)
_TIME = {
    "years": "year",
    "year": "year",
    "months": "month",
    "month": "month",
    "days": "day",
    "day": "day",
    "date": "day",
    "hours": "hour",
    "hour": "hour",
    "date_hour": "hour",
}
_SUFFIX = {"year": "year", "month": "month", "day": "day", "hour": "hour", "void": "null"}


@dataclass(frozen=True)
class Transform:
    """A transform as written: its source column (a path) and Iceberg's name for it."""

    source: tuple[str, ...]
    transform: str

    def default_name(self) -> str:
        """The partition field's name Iceberg gives it (PartitionSpec.Builder): the column
        for identity, `<column>_bucket`, `_trunc`, `_year`, `_month`, `_day`, `_hour`."""
        src = "_".join(self.source) if len(self.source) > 1 else self.source[0]
        kind = self.transform.split("[")[0]
        if kind == "identity":
            return ".".join(self.source)
        if kind == "bucket":
            return f"{src}_bucket"
        if kind == "truncate":
            return f"{src}_trunc"
        return f"{src}_{_SUFFIX.get(kind, kind)}"


def transform(w: Words) -> Transform:
    """`col`, `identity(col)`, `bucket(N, col)`, `truncate(W, col)` (or `truncate(col, W)`),
    `years(col)`, `months(col)`, `days(col)` (`date`), `hours(col)` (`date_hour`),
    `void(col)`."""
    first = w.dotted("a column or a transform")
    if not w.punct(TokenType.L_PAREN):
        return Transform(first, "identity")
    if len(first) != 1:
        w.fail(f"expected a transform, not {'.'.join(first)}")
    fn = first[0].lower()
    args: list[Any] = []
    while True:
        t = w.peek()
        if t is not None and t.token_type == TokenType.NUMBER:
            args.append(w.number())
        else:
            args.append(w.dotted("a column"))
        if w.punct(TokenType.COMMA):
            continue
        if not w.punct(TokenType.R_PAREN):
            w.fail("expected ')' after the transform's arguments")
        break
    cols = [a for a in args if isinstance(a, tuple)]
    nums = [a for a in args if isinstance(a, int)]
    if len(cols) != 1:
        w.fail(f"{fn}(...) takes one column")
    if fn in ("bucket", "truncate"):
        if len(nums) != 1 or len(args) != 2 or nums[0] <= 0:
            w.fail(f"{fn} takes a positive number and a column: {fn}(16, col)")
        return Transform(cols[0], f"{fn}[{nums[0]}]")
    if nums:
        w.fail(f"{fn}(...) takes a column only")
    if fn in _TIME:
        return Transform(cols[0], _TIME[fn])
    if fn in ("identity", "void"):
        return Transform(cols[0], fn)
    raise UnsupportedError(
        f"unknown partition transform {fn}(...): Iceberg's are identity, bucket, truncate, "
        "years, months, days, hours and void"
    )


def transforms_of(expressions: list[exp.Expression], w: Words) -> list[Transform]:
    """PARTITIONED BY's expressions as sqlglot parsed them, read as transforms."""
    out = []
    for e in expressions:
        inner = Words(e.sql(dialect=DIALECT), w.offset, w.source)
        out.append(transform(inner))
        inner.end()
    return out


@dataclass(frozen=True)
class OrderField:
    source: tuple[str, ...]
    transform: str
    descending: bool
    nulls_first: bool


def order_fields(w: Words) -> list[OrderField]:
    """`<transform> [ASC|DESC] [NULLS FIRST|LAST], ...` (optionally in parentheses); nulls
    first for ascending and last for descending unless written (Iceberg's and Spark's
    default)."""
    wrapped = w.punct(TokenType.L_PAREN)
    out = []
    while True:
        t = transform(w)
        descending = False
        if w.take("ASC"):
            descending = False
        elif w.take("DESC"):
            descending = True
        nulls_first = not descending
        if w.take("NULLS"):
            if w.take("FIRST"):
                nulls_first = True
            elif w.take("LAST"):
                nulls_first = False
            else:
                w.fail("expected FIRST or LAST after NULLS")
        out.append(OrderField(t.source, t.transform, descending, nulls_first))
        if not w.punct(TokenType.COMMA):
            break
    if wrapped and not w.punct(TokenType.R_PAREN):
        w.fail("expected ')'")
    return out


# --- property lists ------------------------------------------------------------------------


def properties(w: Words) -> list[tuple[str, str]]:
    """`('k' = 'v', k2 = 3, ...)`: keys and values as text."""
    if not w.punct(TokenType.L_PAREN):
        w.fail("expected '(' and properties")
    out = []
    while True:
        key = _key(w)
        w.punct(TokenType.EQ)
        t = w.peek()
        if t is None:
            w.fail("expected a value")
        assert t is not None
        if t.token_type == TokenType.STRING:
            value = w.string()
        else:
            w.i += 1
            value = t.text
        out.append((key, value))
        if not w.punct(TokenType.COMMA):
            break
    if not w.punct(TokenType.R_PAREN):
        w.fail("expected ')' after the properties")
    return out


def _key(w: Words) -> str:
    t = w.peek()
    if t is not None and t.token_type == TokenType.STRING:
        return w.string()
    return ".".join(w.dotted("a property key"))


def keys(w: Words) -> list[str]:
    """`('k', 'k2')`: keys."""
    if not w.punct(TokenType.L_PAREN):
        w.fail("expected '(' and property keys")
    out = []
    while True:
        out.append(_key(w))
        if not w.punct(TokenType.COMMA):
            break
    if not w.punct(TokenType.R_PAREN):
        w.fail("expected ')' after the keys")
    return out
