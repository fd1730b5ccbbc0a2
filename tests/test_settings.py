"""The typed settings (planner/settings.py): defaults < config file < environment < per call;
every bad value or name is one line naming where it came from. No Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from mor.planner.errors import ConfigError
from mor.planner.settings import Settings, applied, current, declared

# the fast tier too (`make check`: tests/legs.py)
pytestmark = [pytest.mark.check]


@pytest.fixture(autouse=True)
def _no_setting_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets what it needs: the test session itself sets some (MOR_SPARK_MASTER)."""
    for setting in declared():
        monkeypatch.delenv(setting.env, raising=False)


def test_every_setting_is_a_typed_field_with_its_default() -> None:
    s = Settings()
    for setting in declared():
        assert isinstance(getattr(s, setting.name), setting.kind)
        assert getattr(s, setting.name) == setting.default, setting.name
        assert setting.env.startswith("MOR_")
    assert Settings.load() == Settings()
    assert {Settings.load().source(s.name) for s in declared()} == {"default"}


def test_precedence_config_file_then_environment_then_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    cfg = tmp_path / "config.toml"
    cfg.write_text("io_threads = 3\nbroadcast_rows = 7\nplanning_threads = 2\n")
    monkeypatch.setenv("MOR_CONFIG", str(cfg))
    monkeypatch.setenv("MOR_BROADCAST_ROWS", "11")
    s = Settings.load({"planning_threads": "5"})
    assert (s.io_threads, s.broadcast_rows, s.planning_threads) == (3, 11, 5)
    assert s.source("io_threads") == f"config file {cfg}"
    assert s.source("broadcast_rows") == "$MOR_BROADCAST_ROWS"
    assert s.source("planning_threads") == "settings"
    assert s.source("timezone") == "default" and s.timezone == "UTC"


def test_applied_nests_and_is_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOR_IO_THREADS", "6")
    with applied({"broadcast_rows": 5}) as outer:
        assert outer.broadcast_rows == 5 and outer.io_threads == 6
        with applied(None):
            assert current() is outer  # a call inside a call keeps the caller's settings
        with applied({"io_threads": 2}):
            assert (current().broadcast_rows, current().io_threads) == (5, 2)
        assert current() is outer
    assert current().broadcast_rows == 20_000_000


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"bitmap_bytes": 1},
            "settings: unknown setting 'bitmap_bytes' (did you mean 'position_bitmap_bytes'?)",
        ),
        ({"MOR_IO_THREADS": 2}, "unknown setting 'MOR_IO_THREADS' (did you mean 'io_threads'?)"),
        ({"io_threads": 0}, "settings: io_threads must be at least 1, got 0"),
        ({"broadcast_rows": "many"}, "settings: broadcast_rows must be an integer, got 'many'"),
        ({"broadcast_rows": True}, "broadcast_rows must be an integer, got True"),
        ({"driver_memory": "lots"}, "driver_memory must be a size like 4g or 2048m"),
        ({"spark_log_level": "LOUD"}, "spark_log_level must be one of ALL, DEBUG"),
        ({"timezone": ""}, "timezone must be a non-empty string"),
        ({"scan_barrier": "maybe"}, "settings: scan_barrier must be true or false, got 'maybe'"),
        ({"scan_barrier": 2}, "scan_barrier must be true or false, got 2"),
    ],
)
def test_a_bad_override_is_one_line_naming_it(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        Settings.load(overrides)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_bad_environment_and_config_values_name_their_origin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOR_PLANNING_THREADS", "0")
    with pytest.raises(ConfigError, match="^MOR_PLANNING_THREADS must be at least 1, got 0$"):
        Settings.load()
    monkeypatch.delenv("MOR_PLANNING_THREADS")
    cfg = tmp_path / "config.toml"
    monkeypatch.setenv("MOR_CONFIG", str(cfg))
    cfg.write_text('position_driver_rows = "x"\n')
    with pytest.raises(ConfigError, match=f"^{cfg}: position_driver_rows must be an integer"):
        Settings.load()
    cfg.write_text("io_thread = 2\n")
    with pytest.raises(ConfigError, match=f"^{cfg}: unknown setting 'io_thread'"):
        Settings.load()
    cfg.unlink()
    with pytest.raises(ConfigError, match="MOR_CONFIG names"):
        Settings.load()
    monkeypatch.delenv("MOR_CONFIG")
    with pytest.raises(ConfigError, match="settings must map setting names to values"):
        Settings.load(["io_threads"])  # type: ignore[arg-type]


def test_a_settings_object_overrides_with_what_it_set() -> None:
    mine = Settings.load({"position_bitmap_bytes": 0})
    merged = Settings.load({"io_threads": 3}).overridden(mine)
    assert (merged.position_bitmap_bytes, merged.io_threads) == (0, 3)


def test_a_per_call_setting_changes_what_runs(tmp_path: Path) -> None:
    """`settings=` reaches the decision the compiler makes: EXPLAIN PHYSICAL of the demo table
    shows bitmaps by default and the anti-join with position_bitmap_bytes=0, and nothing of the
    call's settings is left behind."""
    from mor import explain
    from mor.demo import build_demo_table

    wh = str(tmp_path / "wh")
    build_demo_table(wh)
    sql = "SELECT * FROM demo.orders"
    plain = explain(sql, warehouse=wh, physical=True, check=False)
    joined = explain(
        sql, warehouse=wh, physical=True, check=False, settings={"position_bitmap_bytes": 0}
    )
    assert "filter by bitmaps of deleted positions" in plain
    assert "left_anti join with broadcast(deleted positions, ~" in joined
    assert "bitmaps" not in joined
    shuffled = explain(
        sql,
        warehouse=wh,
        physical=True,
        check=False,
        settings={"position_bitmap_bytes": 0, "broadcast_bytes": 1},
    )
    assert "left_anti join with deleted positions (shuffled, not broadcast: " in shuffled
    assert explain(sql, warehouse=wh, physical=True, check=False) == plain
    with pytest.raises(ConfigError, match="unknown setting 'bitmap'"):
        explain(sql, warehouse=wh, check=False, settings={"bitmap": 0})


@pytest.mark.parametrize(
    ("raw", "value"),
    [("true", True), ("OFF", False), ("1", True), ("no", False), (False, False), (1, True)],
)
def test_a_switch_takes_the_usual_spellings(raw: object, value: bool) -> None:
    assert Settings.load({"scan_barrier": raw}).scan_barrier is value


# the module of each layer that declares its settings, by the layer's name in
# docs/configuration.md's table
LAYER_MODULES = {
    "planner": "mor.planner.settings",
    "rules/physical": "mor.rules.physical.rule_settings",
    "physical": "mor.physical.spark.spark_settings",
}
DECLARING = {m.rsplit(".", 1)[1] + ".py" for m in LAYER_MODULES.values()}


def test_each_setting_is_declared_by_the_lowest_layer_that_reads_it() -> None:
    """Settings live with the layer they steer: a setting read in planner/ is declared there,
    one read first in rules/ is declared in rules/physical/rule_settings.py, the rest in
    physical/spark/spark_settings.py; and every setting is read somewhere (none left over)."""
    import re

    root = Path(__file__).resolve().parents[1]
    order = ("planner", "rules", "physical")
    texts = {
        top: [f.read_text() for f in (root / top).rglob("*.py") if f.name not in DECLARING]
        for top in order
    }
    wrong = {}
    for setting in declared():
        attr = re.compile(rf"\.{setting.name}\b")
        readers = [top for top in order if any(attr.search(t) for t in texts[top])]
        assert readers, f"setting {setting.name} is read nowhere"
        declared_in = setting.layer.split(".")[1]
        if readers[0] != declared_in:
            wrong[setting.name] = (declared_in, readers)
    assert not wrong, wrong


def test_every_setting_is_documented_with_its_variable_default_and_layer() -> None:
    """docs/configuration.md's table lists every setting, in the order `mor config` does,
    with its environment variable, default and declaring layer."""
    import re

    doc = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `(MOR_\w+)` \| ([^|]+) \| `([\w/]+)` \|", doc, re.M)
    assert [r[0] for r in rows] == [s.name for s in declared()]
    for (name, env, default, layer), s in zip(rows, declared()):
        assert env == s.env, name
        shown = "(empty)" if s.default == "" else str(s.default).lower()
        assert default.strip().lower() == shown, (name, default)
        assert s.layer == LAYER_MODULES[layer], (name, layer)
