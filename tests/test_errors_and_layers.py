"""Clear one-line errors for bad input, CLI exit codes, and the one-way import rule."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from mor import explain
from mor.cli import main
from mor.planner.errors import (
    QueryError,
    SqlSyntaxError,
    TableNotFoundError,
    UnsupportedError,
)

# the fast tier too (`make check`: tests/legs.py)
pytestmark = [pytest.mark.check]

ROOT = Path(__file__).resolve().parent.parent


def test_not_a_query_is_refused(catalog: object) -> None:
    # a statement with no rows of its own explains as its bound plan, nothing run
    assert explain("DROP TABLE ns.t", catalog=catalog, check=False).startswith(
        "== Statement ==\nDropTable ns.t"
    )
    with pytest.raises(UnsupportedError, match="rewrite_position_delete_files procedure yet"):
        explain("CALL mor.system.rewrite_position_delete_files(table => 'ns.t')", catalog=catalog)
    # a procedure mor runs explains as its bound plan (the table's absence: at run time)
    assert explain(
        "CALL mor.system.rollback_to_snapshot('ns.t', 5)", catalog=catalog, check=False
    ).startswith(
        "== Statement ==\nCallProcedure rollback_to_snapshot on mor.ns.t: snapshot_id => 5"
    )
    # a write command's EXPLAIN names a table the catalog lacks in one line
    for sql in (
        "MERGE INTO ns.t USING ns.s ON ns.t.id = ns.s.id WHEN MATCHED THEN DELETE",
        "UPDATE ns.t SET v = 1",
    ):
        with pytest.raises(TableNotFoundError, match="ns.t"):
            explain(sql, catalog=catalog)


def test_syntax_error_has_line_and_column(catalog: object) -> None:
    with pytest.raises(SqlSyntaxError, match="line 2, column 6"):
        explain("SELECT a,\nFROM WHERE", catalog=catalog)


def test_unknown_table_and_column(catalog: object, tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError, match="nope.t"):
        explain("SELECT * FROM nope.t", catalog=catalog)
    from helpers import small_table

    small_table(catalog)
    # Spark's analyser finds it, before any job runs: explain reports it too
    with pytest.raises(QueryError, match=r"`zz`.*\(line 2, column 3\).*columns of s.t: id, p, v"):
        explain("SELECT id,\n  zz FROM s.t", catalog=catalog)
    with pytest.raises(TableNotFoundError, match=r"nope.t .*\(line 1, column 24\)"):
        explain("SELECT * FROM s.t JOIN nope.t", catalog=catalog)


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = str(tmp_path / "wh")
    assert main(["explain", "-e", "DROP TABLE x.y", "--warehouse", wh]) == 1
    assert main(["explain", str(tmp_path / "missing.sql"), "--warehouse", wh]) == 2
    assert main(["explain", "-e", "  ", "--warehouse", wh]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.strip().splitlines()
    assert len(lines) == 3 and all(ln.startswith("mor: ") for ln in lines)


# what each layer may import: the read path planner <- rules <- physical <- mor, and the
# writer beside it (planner <- writer <- mor): nothing on the read path imports the writer
LAYERS = {
    "planner": {"planner"},
    "rules": {"planner", "rules"},
    "physical": {"planner", "rules", "physical"},
    "writer": {"planner", "writer"},
    "mor": {"planner", "rules", "physical", "writer", "mor"},
}


def _layer(module: str) -> str | None:
    """The layer an imported module belongs to: `mor.planner.x` -> planner, `mor.api` -> mor."""
    parts = module.split(".")
    if parts[0] in ("planner", "rules", "physical", "writer"):
        raise AssertionError(f"{module}: the layers are imported as mor.{parts[0]}")
    if parts[0] != "mor":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "mor"


@pytest.mark.parametrize("pkg", list(LAYERS))
def test_imports_flow_one_way(pkg: str) -> None:
    """Every module of a layer, in its sub-packages too (rules/physical/ is the rules layer),
    imports only its own layer and those below it, and only physical/ and mor/ import pyspark."""
    paths = sorted((ROOT / pkg).rglob("*.py"))
    if pkg == "rules":  # the sub-package must be among them: a glob that misses it proves nothing
        assert ROOT / "rules" / "physical" / "positions.py" in paths
    for path in paths:
        where = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{where}: relative import of {node.module}")
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            for name in names:
                layer = _layer(name)
                if layer is not None:
                    assert layer in LAYERS[pkg], f"{where} imports {name}"
                if name.split(".")[0] == "pyspark":
                    assert pkg in ("physical", "mor"), f"{where} imports pyspark"


def _imported(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names taken from it) of every import of a file, those inside functions too."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


def test_mor_modules_import_no_circle_and_no_private_name() -> None:
    """The modules of mor/ import each other without a circle, counting imports inside
    functions (a module's room is the modules below it), and no module of the package takes
    a private name (`_x`) from another module."""
    own = {p.stem for p in (ROOT / "mor").glob("*.py")}
    arrows: dict[str, set[str]] = {m: set() for m in own}
    for path in sorted((ROOT / "mor").glob("*.py")):
        for module, names in _imported(path):
            parts = module.split(".")
            if parts[0] != "mor":
                continue
            if len(parts) == 2 and parts[1] in own:
                arrows[path.stem].add(parts[1])
            elif len(parts) == 1:  # from mor import progress
                arrows[path.stem] |= {n for n in names if n in own}
    arrows["__init__"] = set()  # the package's lazy names, resolved on first use
    done: set[str] = set()

    def visit(m: str, trail: tuple[str, ...]) -> None:
        if m in trail:
            raise AssertionError(f"an import circle: {' -> '.join(trail[trail.index(m) :] + (m,))}")
        if m in done:
            return
        for n in sorted(arrows.get(m, ())):
            visit(n, trail + (m,))
        done.add(m)

    for m in sorted(arrows):
        visit(m, ())
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            for module, names in _imported(path):
                private = [n for n in names if n.startswith("_") and n != "__version__"]
                assert not (module.startswith("mor") and private), (
                    f"{path.relative_to(ROOT)} imports {', '.join(private)} from {module}"
                )


def test_wheel_installs_layers_under_mor(tmp_path: Path) -> None:
    """The wheel holds mor.planner/rules/physical/writer (no top-level planner, rules, physical
    or writer that could collide with other distributions) and the examples `mor demo` runs."""
    import subprocess
    import sys
    import zipfile

    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("mor-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"mor", next(t for t in tops if t.endswith(".dist-info"))}, tops
    for layer in ("planner", "rules", "physical", "writer"):
        # every module, in sub-packages too (rules/physical/)
        expected = {
            f"mor/{layer}/{p.relative_to(ROOT / layer).as_posix()}"
            for p in (ROOT / layer).rglob("*.py")
        }
        assert expected <= set(names), expected - set(names)
    examples = {f"mor/examples/{p.name}" for p in (ROOT / "examples").glob("*.sql")}
    assert examples and examples <= set(names)
    assert "mor/physical/spark/log4j2.properties" in names


def test_deep_statements_plan_without_recursion_errors(catalog: object) -> None:
    """2,000 AND terms and 150 nested subqueries (Spark's parser takes both) plan, filters
    reaching the scan; the interpreter's recursion limit is left as it was."""
    import sys

    from helpers import small_table

    small_table(catalog)
    limit = sys.getrecursionlimit()
    wide = "SELECT count(*) FROM s.t WHERE " + " AND ".join(f"id <> {i}" for i in range(2000))
    assert "pushed    id <> 0 AND id <> 1 AND" in explain(wide, catalog=catalog, check=False)
    deep = "SELECT count(*) FROM " + "(SELECT * FROM " * 150 + "s.t" + " WHERE id = 5)" * 150
    assert "pushed    id = 5" in explain(deep, catalog=catalog, check=False)
    assert sys.getrecursionlimit() == limit


def test_broken_metadata_behind_a_catalog_is_one_line(catalog: object, tmp_path: Path) -> None:
    """A truncated or missing metadata JSON and a truncated manifest list are MetadataErrors
    naming what is wrong, never a pydantic, FileNotFoundError or UnicodeDecodeError trace."""
    from helpers import small_table
    from mor.planner.errors import MetadataError

    table = small_table(catalog).refresh()
    loc = table.metadata_location.removeprefix("file://")
    saved = Path(loc).read_text()
    try:
        Path(loc).write_text(saved[:200])
        with pytest.raises(MetadataError, match=r"s\.t in catalog .*metadata JSON is invalid"):
            explain("SELECT * FROM s.t", catalog=catalog, check=False)
        Path(loc).unlink()
        with pytest.raises(MetadataError, match=rf"metadata file .*{Path(loc).name} is missing"):
            explain("SELECT * FROM s.t", catalog=catalog, check=False)
    finally:
        Path(loc).write_text(saved)
    snap = table.current_snapshot()
    assert snap is not None
    ml = Path(snap.manifest_list.removeprefix("file://"))
    data = ml.read_bytes()
    ml.write_bytes(data[: len(data) // 2])
    with pytest.raises(MetadataError, match=rf"manifest list .*{ml.name} of snapshot"):
        explain("SELECT * FROM s.t", catalog=catalog, check=False)


def test_table_directory_that_cannot_be_decided_is_refused(tmp_path: Path) -> None:
    """Two metadata files no version orders, neither older than the other: refused, with the
    candidates named, never a guess."""
    import shutil

    src = ROOT / "tests" / "realdata" / "dremio" / "orders" / "metadata" / "v3.metadata.json"
    meta = tmp_path / "t" / "metadata"
    meta.mkdir(parents=True)
    shutil.copy(src, meta / "a.metadata.json")
    shutil.copy(src, meta / "b.metadata.json")
    with pytest.raises(TableNotFoundError, match=r"cannot tell .*a\.metadata\.json, b\.metadata"):
        explain(f"SELECT * FROM iceberg_scan('{tmp_path / 't'}')", check=False)


def test_path_map_matches_whole_segments_whatever_the_slashes() -> None:
    from mor.planner.sources import PathMap

    for old, new in [("/a/b", "/c"), ("/a/b/", "/c"), ("/a/b", "/c/"), ("/a/b/", "/c/")]:
        m = PathMap.of({old: new})
        assert m("/a/b/x.parquet") == "/c/x.parquet", (old, new)
        assert m("file:///a/b/x.parquet") == "/c/x.parquet"
        assert m("/a/bc/x.parquet") == "/a/bc/x.parquet"  # another folder, not under /a/b
    # the longest prefix wins, and a prefix of a sibling's name is not a match
    m = PathMap.of({"s3://w/t": "/x", "s3://w/t_part": "/y"})
    assert m("s3://w/t_part/d.parquet") == "/y/d.parquet"
    assert m("s3://w/t/d.parquet") == "/x/d.parquet"


def test_columns_differing_only_in_case_are_refused_by_name(catalog: object) -> None:
    """Spark resolves names without case: a table with `a` and `A` cannot be told apart (the
    old binder answered `SELECT A` with a's values)."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from mor.planner.errors import UnsupportedError
    from mor.writer.tables import TableWriter

    w = TableWriter(
        catalog, "c.t", Schema(NestedField(1, "a", LongType()), NestedField(2, "A", LongType()))
    )
    w.append(pa.table({"a": pa.array([1], pa.int64()), "A": pa.array([2], pa.int64())}))
    with pytest.raises(UnsupportedError, match="columns 'a' and 'A'.*differ only in case"):
        explain("SELECT A FROM c.t", catalog=catalog, check=False)


@pytest.mark.parametrize(
    "call, says",
    [
        (
            lambda m: m.explain(None),
            "explain(): sql must be a SQL text (one statement), not NoneType",
        ),
        (lambda m: m.mor_sql("  "), "mor_sql(): sql must be a SQL text"),
        (lambda m: m.mor_sql("SELECT 1", spark="local"), "mor_sql(): spark must be a SparkSession"),
        (lambda m: m.mor_sql("SELECT 1", path_map=["/a"]), "mor_sql(): path_map must be a dict"),
        (lambda m: m.explain("SELECT 1", io_properties={"k": None}), "io_properties must be"),
        (lambda m: m.table(3), "table(): name must be a table name or path, not int 3"),
        (lambda m: m.table("ns.t", columns="a"), "table(): columns must be a list"),
        (lambda m: m.health("ns.t", snapshot_id="1"), "health(): snapshot_id must be"),
        (lambda m: m.changes("ns.t", catalog=1), "changes(): catalog must be a pyiceberg Catalog"),
        (lambda m: m.metrics("SELECT 1", bogus=1), "metrics(): got an unexpected keyword"),
    ],
)
def test_public_functions_name_a_wrong_argument(call: Any, says: str) -> None:
    """One line naming the function and the argument, before anything is planned or started
    (explain(None) was an AttributeError from inside the planner); a TypeError as well."""
    import mor

    with pytest.raises(mor.ArgumentError) as e:
        call(mor)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, TypeError)


def test_the_layer_folders_are_the_mor_packages_in_the_tree() -> None:
    """`mor/planner`, `mor/rules`, `mor/physical` and `mor/writer` are links to the top-level
    folders (what the wheel maps them to), so a tool resolving `import mor.planner` from a
    checkout finds `planner/`; and pyproject.toml maps each package to the folder."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for layer in ("planner", "rules", "physical", "writer"):
        link = ROOT / "mor" / layer
        assert link.is_symlink() and link.resolve() == (ROOT / layer).resolve(), link
        assert dirs[f"mor.{layer}"] == layer


def test_physical_groups_build_on_each_other_one_way() -> None:
    """Inside physical/, tasks/ (what Spark's tasks run: pyarrow alone) and spark/ build on
    nothing else of the layer, scan/ on spark/, deletes/ on scan/, spark/ and tasks/, and the
    modules at the top (the compiler, EXPLAIN, the merge-on-read scan, the jobs) on all four:
    no group imports one above it."""
    below = {
        "tasks": {"tasks"},
        "spark": {"spark"},
        "scan": {"spark", "scan"},
        "deletes": {"spark", "scan", "deletes", "tasks"},
    }
    groups = set(below)
    for group, allowed in below.items():
        paths = sorted((ROOT / "physical" / group).glob("*.py"))
        assert len(paths) > 2, group
        for path in paths:
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                for name in names:
                    parts = name.split(".")
                    if parts[:2] != ["mor", "physical"] or len(parts) < 3:
                        continue
                    target = parts[2] if parts[2] in groups else "top"
                    assert target in allowed, f"{path.relative_to(ROOT)} imports {name}"


def test_mor_config_never_shows_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mor config` prints the config file's [spark] and [file-io] entries and the AWS_*
    environment's FileIO settings with every secret (keys, session tokens, passwords,
    credentials) as ***, the other values as given (an access key id is not a secret)."""
    from mor.planner.errors import is_secret

    cfg = tmp_path / "mor.toml"
    cfg.write_text(
        "[spark]\n"
        '"spark.hadoop.fs.s3a.secret.key" = "MARKED-S3A-SECRET"\n'
        '"spark.hadoop.fs.s3a.session.token" = "MARKED-S3A-TOKEN"\n'
        '"spark.hadoop.fs.s3a.access.key" = "AKIA-VISIBLE"\n'
        '"spark.hadoop.javax.jdo.option.ConnectionPassword" = "MARKED-JDBC"\n'
        "[file-io]\n"
        '"s3.secret-access-key" = "MARKED-IO-SECRET"\n'
        '"s3.endpoint" = "http://store:9000"\n'
    )
    monkeypatch.setenv("MOR_CONFIG", str(cfg))
    monkeypatch.setenv("AWS_SESSION_TOKEN", "MARKED-ENV-TOKEN")
    assert main(["config", "--warehouse", str(tmp_path / "wh")]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "MARKED" not in text, [ln for ln in text.splitlines() if "MARKED" in ln]
    assert "spark.hadoop.fs.s3a.secret.key = *** (config file)" in text
    assert "spark.hadoop.fs.s3a.access.key = AKIA-VISIBLE (config file)" in text
    assert "s3.session-token = *** (environment)" in text
    assert "s3.endpoint = http://store:9000 (config file)" in text
    assert is_secret("credential") and is_secret("JDBC_PASSWORD") and not is_secret("s3.region")


def test_a_catalog_that_cannot_be_reached_is_not_an_unknown_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A REST catalog whose server is down and a PostgreSQL catalog refusing the connection
    are reported as unreachable, in one line, exit 1, the JDBC password masked; a name no
    configuration knows is still an unknown catalog."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp_path / "mor.toml"
    cfg.write_text(
        f'[catalogs.rest]\ntype = "rest"\nuri = "http://127.0.0.1:{port}"\n'
        f'[catalogs.pg]\ntype = "sql"\n'
        f'uri = "postgresql+psycopg://mor:MARKED-PASSWORD@127.0.0.1:{port}/lake"\n'
    )
    monkeypatch.setenv("MOR_CONFIG", str(cfg))
    for name in ("rest", "pg"):
        code = main(["run", "--catalog", name, "-e", "SELECT 1"])
        out = capsys.readouterr()
        lines = [ln for ln in out.err.splitlines() if ln.strip()]
        assert code == 1 and out.out == "" and len(lines) == 1, out.err
        assert lines[0].startswith(f"mor: catalog '{name}' cannot be reached: "), lines[0]
        assert "MARKED" not in lines[0] and "unknown catalog" not in lines[0], lines[0]
    monkeypatch.delenv("PYICEBERG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.pyiceberg.yaml
    code = main(["run", "--catalog", "nosuch", "-e", "SELECT 1"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("mor: unknown catalog 'nosuch'"), err


def test_a_long_reason_is_cut_at_a_word_never_inside_one() -> None:
    """A store's reason is shortened at a word (one line, at most the limit and ' ...'), so
    that 'curlCode' never reads 'cu'; a short one is kept whole."""
    from mor.planner.errors import clipped

    reason = "AWS Error ACCESS_DENIED during HeadObject operation: curlCode: 7, " * 8
    short = clipped(reason, 160)
    assert short.endswith(" ...") and len(short) <= 164
    assert short[:-4].split()[-1] in reason.split(), short
    assert clipped("HeadObject failed:\n  curlCode 7") == "HeadObject failed: curlCode 7"


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        ("ForbiddenError", "does not grant you table ns.t"),
        ("UnauthorizedError", "did not accept your credentials for table ns.t"),
        ("AuthorizationExpiredError", "did not accept your credentials for table ns.t"),
    ],
)
def test_a_catalog_that_refuses_the_user_is_named_as_such(raised: str, said: str) -> None:
    """A REST catalog's 401 / 403 (an OAuth token it does not accept, a table it does not
    grant) is one line saying so, not 'its metadata cannot be read'; no data is read."""
    import pyiceberg.exceptions as pe
    from pyiceberg.catalog.memory import InMemoryCatalog

    from mor import explain
    from mor.planner.errors import CatalogAccessError

    class Refusing(InMemoryCatalog):
        def load_table(self, identifier: Any) -> Any:
            raise getattr(pe, raised)("Forbidden: principal lacks TABLE_READ_DATA")

    with pytest.raises(CatalogAccessError) as e:
        explain("SELECT * FROM ns.t", catalog=Refusing("lake"), check=False)
    assert said in str(e.value) and "catalog 'lake'" in str(e.value) and "\n" not in str(e.value)


def test_time_travel_without_a_value_is_one_line(catalog: object) -> None:
    from helpers import small_table

    small_table(catalog)
    with pytest.raises(SqlSyntaxError, match=r"s.t: VERSION AS OF needs a value"):
        explain("SELECT * FROM s.t VERSION AS OF AS x", catalog=catalog, check=False)


SYNTAX_ERRORS = [
    ("SELECT 1 * FROM t", "expected an expression before 'FROM'"),
    ("SELECT a FROM t WHERE", "expected a condition after WHERE, at the end of the statement"),
    ("SELECT a FROM t WHERE a =", "expected an expression after '='"),
    ("SELECT (1 FROM t", "expected ')' at 'FROM'"),
    ("SELECT a FROM t ORDER BY", "expected an expression after ORDER BY"),
    ("SELECT a b c FROM t", "unexpected 'c'"),
    ("SELECT * FROM t WHERE a BETWEEN 1", "expected AND and an upper bound after BETWEEN"),
    ("SELECT CAST(a AS) FROM t", "expected a type after CAST, at ')'"),
    ("SELECT CASE WHEN a THEN 1 FROM t", "expected END after CASE"),
    ("DELETE FROM", "expected table name, at the end of the statement"),
    ("MERGE INTO t USING s", "expected WHEN MATCHED or WHEN NOT MATCHED clauses"),
    ("WITH x AS SELECT 1 SELECT * FROM x", "expected '(' at 'SELECT'"),
    ("SELECT a FROM t UNION", "expected a query after UNION"),
    ("SELECT 'abc", "a quote or comment that is not closed"),
]


def _flags() -> set[str]:
    """Every option any mor command takes."""
    import argparse

    from mor.cli import _parser

    out: set[str] = set()
    parsers = [_parser()]
    while parsers:
        p = parsers.pop()
        for a in p._actions:
            out.update(a.option_strings)
            if isinstance(a, argparse._SubParsersAction):
                parsers.extend(a.choices.values())
    return out


def _in_users_words(line: str, flags: set[str]) -> None:
    """No parser or Python class, no flag mor lacks, one line."""
    import re

    assert line.startswith("mor: ") and "\n" not in line.strip(), line
    for foreign in (
        "<class",
        "sqlglot",
        "Token(",
        "token_type",
        "Traceback",
        "pyiceberg.exceptions",
        "Error:",
    ):
        assert foreign not in line, line
    for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", line):
        assert flag in flags, f"{line}: names {flag}, which mor does not take"


def test_errors_speak_the_users_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep of the error paths that need no Spark (syntax errors, catalogs that cannot load,
    usage errors): each is one line in SQL's or mor's words, naming the token and what was
    expected at it, the package to install for a catalog's missing driver, and only flags
    mor has."""
    flags = _flags()
    monkeypatch.delenv("PYICEBERG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.pyiceberg.yaml
    monkeypatch.setenv("MOR_WAREHOUSE", str(tmp_path / "wh"))
    for sql, want in SYNTAX_ERRORS:
        code = main(["explain", "--no-check", "-e", sql])
        err = capsys.readouterr().err
        assert code == 1 and want in err, (sql, err)
        _in_users_words(err, flags)
    cfg = tmp_path / "mor.toml"
    cfg.write_text(
        '[catalogs.nouri]\ntype = "rest"\n'
        '[catalogs.pg2]\ntype = "sql"\nuri = "postgresql+nosuchdriver://u:SECRET@127.0.0.1:1/db"\n'
    )
    monkeypatch.setenv("MOR_CONFIG", str(cfg))
    cases = [
        (["tables", "--catalog", "nouri"], "catalog 'nouri' has no uri: set `uri` under"),
        (["tables", "--catalog", "nosuch"], "unknown catalog 'nosuch'"),
        (["run", "-e", "SELECT 1", "--set", "nope"], "--set needs NAME=VALUE"),
        (["run", "-e", "SELECT 1", "--path-map", "x"], "--path-map needs OLD=NEW"),
        (["run", str(tmp_path / "none.sql")], "no such SQL file"),
        (["run", "-e", "  ;  "], "the input holds no SQL"),
    ]
    for argv, want in cases:
        main(argv)
        err = capsys.readouterr().err
        assert want in err, (argv, err)
        _in_users_words(err, flags)
    main(["tables", "--catalog", "pg2"])  # a driver sqlalchemy cannot load: named as such
    err = capsys.readouterr().err
    assert "pg2" in err and "SECRET" not in err, err
    _in_users_words(err, flags)


def test_a_missing_catalog_driver_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """A catalog whose client module is missing (psycopg2 for postgresql+psycopg2://) names
    the module and the package to install, not pyiceberg's 'SQLAlchemy support'."""
    from mor.planner.errors import ConfigError
    from mor.planner.sources import catalog_failure

    try:
        try:
            raise ModuleNotFoundError("No module named 'psycopg2'", name="psycopg2")
        except ModuleNotFoundError as inner:
            raise RuntimeError("SQLAlchemy support not installed: pip install ...") from inner
    except RuntimeError as e:
        got = catalog_failure("downpw", e)
    assert isinstance(got, ConfigError)
    assert "catalog 'downpw' needs the Python module 'psycopg2'" in str(got)
    assert str(got).endswith("pip install psycopg2-binary")
