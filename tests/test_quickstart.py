"""docs/quickstart.md as a new user runs it: every command of its shell blocks, in order, in
an empty folder (the page's two independent parts, a table from an empty catalog and the demo
table, each in a folder of its own, side by side), each a real `mor` process that must end
with exit 0 and print what the page promises. The catalog the page calls `lake` is a catalog
of the test's own, configured as the page says (its REST example stands for any catalog
pyiceberg loads). The install line names extras pyproject.toml declares;
tests/test_packaging.py installs the wheel itself."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "quickstart.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


def _commands(info: str = "sh") -> list[list[str]]:
    """The commands of the page's code blocks whose info string is `info` ("sh": the ones
    this test runs; "sh server": the server block, tests/test_server.py's)."""
    blocks = re.findall(rf"```{re.escape(info)}\n(.*?)```", PAGE.read_text(), re.S)
    lines = [shlex.split(ln, comments=True) for b in blocks for ln in b.splitlines()]
    return [c for c in lines if c]  # a comment line is no command


def test_the_install_line_names_declared_extras() -> None:
    installs = [c for c in _commands() if c[:2] == ["pip", "install"]]
    assert installs, "the quickstart has no install line"
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for c in installs:
        for req in c[2:]:
            m = re.fullmatch(r"mor\[(\w+)\]", req)
            assert m and m.group(1) in extras, req
    assert "'mor[connect]'" in PAGE.read_text() and "connect" in extras


def _run_part(
    commands: list[list[str]], folder: Path, python: bool, env: dict[str, str]
) -> list[tuple[str, str]]:
    """`commands` run in `folder` one after another, each a `mor` process that must exit 0;
    then, with `python`, the page's Python block as a script run there with the environment's
    Python. Each command's line and its output."""
    env = {**env, "HOME": str(folder)}
    outputs = []
    for c in commands:
        assert c[0] == "mor", c
        done = subprocess.run(
            [sys.executable, "-m", "mor.cli", *c[1:]],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"{shlex.join(c)}: {done.stderr}"
        outputs.append((shlex.join(c), done.stdout))
    if python:
        (block,) = _python_blocks()
        script = folder / "quickstart.py"
        script.write_text(block)
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=folder,
            env={**env, "PYSPARK_PYTHON": sys.executable},  # an activated environment's python3
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(("python", done.stdout))
    return outputs


def test_every_command_of_the_quickstart_runs(tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    lake = tmp_path / "lake"
    lake.mkdir()
    cat = SqlCatalog("lake", uri=f"sqlite:///{lake}/catalog.db", warehouse=f"file://{lake}")
    cat.create_namespace("sales")
    rows = pa.table({"order_id": pa.array(range(25), pa.int64())})
    cat.create_table("sales.orders", schema=rows.schema).append(rows)
    config = tmp_path / "config.toml"
    # the page's [catalogs.lake], pointed at this test's catalog
    config.write_text(
        f'[catalogs.lake]\ntype = "sql"\nuri = "sqlite:///{lake}/catalog.db"\n'
        f'warehouse = "file://{lake}"\n'
    )
    env = {**os.environ, "MOR_CONFIG": str(config)}
    for k in ("MOR_WAREHOUSE", "SPARK_REMOTE", "PYICEBERG_HOME"):
        env.pop(k, None)
    commands = [c for c in _commands() if c[0] != "pip"]  # pip: the test above, test_packaging
    # The page's first part (a table from an empty catalog, then its Python) touches only
    # shop.orders and the Parquet file it writes; the rest only demo.orders and the lake. Each
    # part runs in an empty folder of its own, as a new user's, and the two run side by side
    # (each `mor run` is mostly one JVM starting: two at once use both cores); in each part the
    # commands run in the page's order.
    demo = next(i for i, c in enumerate(commands) if c[:2] == ["mor", "demo"])
    user, other = tmp_path / "user", tmp_path / "user2"
    parts = [(commands[:demo], user, True), (commands[demo:], other, False)]
    for _, folder, _ in parts:
        folder.mkdir()
    with ThreadPoolExecutor(2) as pool:
        done_parts = list(pool.map(lambda p: _run_part(*p, env), parts))
    outputs = [o for part in done_parts for o in part]
    text = dict(outputs)
    assert (user / "warehouse" / "catalog.db").exists()
    assert (other / "warehouse" / "catalog.db").exists()
    # a table from nothing: created, filled, upserted from a view, joined with a Parquet file
    created = next(v for k, v in text.items() if "CREATE TABLE shop.orders" in k)
    assert "table shop.orders: created" in created, created
    merged = next(v for k, v in text.items() if "MERGE INTO shop.orders" in k)
    assert "merged 2 rows (1 updated, 0 deleted, 1 inserted" in merged, merged
    joined = next(v for k, v in text.items() if "rates.parquet` r" in k)
    assert "| APAC   | 0.057750  |" in joined and "| EU     | 56.160000 |" in joined, joined
    assert "| US     | 30.000000 |" in joined, joined
    shown = next(v for k, v in text.items() if "SHOW TABLES IN shop" in k)
    assert "| shop      | orders    | false       |" in shown and "Part 0" in shown
    python = text["python"]
    assert "|  APAC|  1|" in python and "|    EU|  2|" in python, python
    assert "|    US|  3|" in python, python
    by_region = next(v for k, v in text.items() if "GROUP BY region" in k)
    assert "| EU " in by_region and "| US " in by_region
    assert "sales.orders" in text["mor tables --catalog lake"]
    assert "| 25 |" in next(v for k, v in text.items() if "--catalog lake -e" in k)
    explained = next(v for k, v in text.items() if "EXPLAIN DELETE" in k)
    assert explained.startswith("DELETE FROM demo.orders: deletes the rows (_file, _pos)")
    dry = next(v for k, v in text.items() if k.endswith("--dry-run"))
    deleted = next(
        v for k, v in text.items() if k.startswith("mor run -e 'DELETE") and "--dry" not in k
    )
    n = re.search(r"would delete (\d+) rows", dry)
    assert n and f"deleted {n.group(1)} rows" in deleted, (dry, deleted)
    assert text["mor health demo.orders"].startswith("table        demo.orders")
