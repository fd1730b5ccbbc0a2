"""docs/quickstart.md as a new user runs it: every command of its shell blocks, in order, in
an empty folder, each a real `mor` process that must end with exit 0 and print what the page
promises. The catalog the page calls `lake` is a catalog of the test's own, configured as the
page says (its REST example stands for any catalog pyiceberg loads). The install line names
extras pyproject.toml declares; tests/test_packaging.py installs the wheel itself."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "quickstart.md"


def _commands() -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(), re.S)
    return [shlex.split(ln, comments=True) for b in blocks for ln in b.splitlines() if ln.strip()]


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
    user = tmp_path / "user"  # an empty folder, as a new user's
    user.mkdir()
    env = {**os.environ, "MOR_CONFIG": str(config), "HOME": str(user)}
    for k in ("MOR_WAREHOUSE", "SPARK_REMOTE", "PYICEBERG_HOME"):
        env.pop(k, None)
    outputs = []
    for c in _commands():
        if c[0] == "pip":
            continue  # test_the_install_line_names_declared_extras, test_packaging.py
        assert c[0] == "mor", c
        done = subprocess.run(
            [sys.executable, "-m", "mor.cli", *c[1:]],
            cwd=user,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"{shlex.join(c)}: {done.stderr}"
        outputs.append((shlex.join(c), done.stdout))
    text = dict(outputs)
    assert (user / "warehouse" / "catalog.db").exists()
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
