"""The Redis store's Lua scripts as .lua files (worker/stores/redis/lua.py): every file is read
by the modules that run them, a script is sent without its header or an include line, and the
installed package carries the files."""

from __future__ import annotations

import fnmatch
import tomllib

import pytest

from tests.conftest import ROOT
from worker.stores.redis import lua, redis_cluster, redis_ledger, redis_store

LUA_DIR = ROOT / "worker" / "stores" / "redis"
LUA_FILES = sorted(path.stem for path in LUA_DIR.glob("*.lua"))
# What importing the modules read, before a test here reads a file itself.
READ_ON_IMPORT = sorted(lua.read)

# What the modules run, by the file each was read from.
SCRIPTS = {
    "record": redis_store.RECORD_LUA,
    "cluster_drift": redis_cluster.DRIFT_LUA,
    "note": redis_ledger.NOTE_LUA,
    "confirm": redis_ledger.CONFIRM_LUA,
    "close": redis_ledger.CLOSE_LUA,
    "give_back": redis_ledger.GIVE_BACK_LUA,
}


def test_every_lua_file_is_read_as_the_modules_are_imported() -> None:
    # The scripts the modules run, and the parts they include (index, drift): none is unused.
    assert READ_ON_IMPORT == LUA_FILES
    assert set(SCRIPTS) < set(LUA_FILES)
    assert set(LUA_FILES) - set(SCRIPTS) == {"index", "drift"}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_script_is_its_file_without_header_with_its_includes(name: str) -> None:
    script = SCRIPTS[name]
    assert script == lua.source(name)
    assert lua.INCLUDE not in script
    text = (LUA_DIR / f"{name}.lua").read_text(encoding="utf-8")
    assert text.startswith("-- ")  # every file says what its script is given
    assert not script.startswith("--")  # and the server is not sent that
    assert script in text or lua.INCLUDE in text


def test_an_include_stands_for_the_part_it_names() -> None:
    drift = lua.source("drift")
    index = lua.source("index")
    assert "local function drift(" in drift
    assert "local function index(" in index
    assert drift in redis_store.RECORD_LUA
    assert index in redis_store.RECORD_LUA
    assert drift in redis_cluster.DRIFT_LUA
    assert index not in redis_cluster.DRIFT_LUA


def test_the_header_ends_at_the_first_line_that_is_not_a_comment() -> None:
    # A comment inside the script (after its first line) is the script's, as the server is sent.
    assert lua.source("index").startswith("\n-- Index the hash under its case")


def test_the_package_data_carries_every_lua_file() -> None:
    # A wheel (not an editable install) has only what [tool.setuptools.package-data] names.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["worker"]
    for name in LUA_FILES:
        relative = f"stores/redis/{name}.lua"
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), relative
