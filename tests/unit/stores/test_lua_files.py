"""The Redis store's Lua scripts as .lua files (worker/stores/redis/lua.py): every file is read
by the modules that run them, a script is sent without its header or an include line, and the
installed package carries the files."""

from __future__ import annotations

import fnmatch
import json
import tomllib
from typing import Any

import pytest
from lupa.lua51 import LuaRuntime  # the Lua of Redis (and of fakeredis, in this process)

from tests.conftest import ROOT
from tests.unit.stores.test_store_attempts import TRIAGED, attempt
from worker.stores import codec, outcome_json
from worker.stores.codec import OUTCOME_FIELDS, OWN_FIELDS, SHARED_FIELDS
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


# --- the spelling record.lua reads from codec.py ----------------------------------------------

ATTEMPT_FIELDS = (*codec.OWN_FIELDS, *codec.OUTCOME_FIELDS, *codec.SHARED_FIELDS)


@pytest.mark.parametrize("name", ["record", "index", "note", "confirm", "close", "give_back"])
def test_a_script_that_writes_attempts_names_none_of_their_fields(name: str) -> None:
    # drift.lua and cluster_drift.lua spell a ContractDriftAlert, not an attempt.
    text = (LUA_DIR / f"{name}.lua").read_text(encoding="utf-8")
    assert [field for field in ATTEMPT_FIELDS if f'"{field}"' in text] == []
    assert ("--#include codec\n" in text) == (name == "record")


def codec_constants() -> Any:
    """The Lua locals record.lua is given (lua.codec_header()), as Lua reads them."""
    runtime = LuaRuntime(unpack_returned_tuples=True)
    return runtime.execute(
        lua.codec_header() + "return {OWN_KEYS, VALUE_AT, COMPACT_KEY, SHARED_START, string.find}"
    )


def test_the_lua_keys_are_the_codecs_field_lists() -> None:
    own, value_at, compact_key, shared_start, _ = codec_constants().values()
    keys = "".join(own.values())
    # Derived from the field lists, not restated: each key names the field in its place.
    assert keys == "".join(
        ("{" if i == 0 else ",") + json.dumps(name) + ":" for i, name in enumerate(OWN_FIELDS)
    )
    assert value_at == f',"{OUTCOME_FIELDS[0]}":'
    assert compact_key == f'"{codec.SHARED_HEAD_FIELDS[0]}":'
    head = codec.SHARED_HEAD_FIELDS
    assert shared_start == f',"{head[0]}":%d+,"{head[1]}":'  # the two keys, a number between
    assert [*own.values()] == [*codec.OWN_KEYS]


def test_the_lua_finds_in_a_stored_first_what_the_codec_reads_out_of_it() -> None:
    """record.lua builds a whole attempt, tells a compact one, and finds its outcome and
    shared members in a stored first, by the header's constants; the same as codec.py."""
    own, value_at, compact_key, shared_start, find = codec_constants().values()
    first = attempt(1, **TRIAGED, answer_length=40)
    stored = codec.whole(first)
    case_id, task_id, recorded_at = codec.own_json(first)
    built = (
        f"{own[1]}{case_id}{own[2]}{task_id}{own[3]}{recorded_at},"
        f"{codec.outcome_members(first)},{codec.shared_json(first)}}}"
    )
    assert built == stored
    assert codec.shared_head(first).startswith(compact_key)
    value_from = find(stored, value_at, 1, True)[0]
    shared_from = find(stored, shared_start)[0]
    # Lua counts from 1; the members between are the outcome, after them the shared ones.
    assert stored[value_from : shared_from - 1] == codec.outcome_members(first)
    assert stored[shared_from:-1] == codec.shared_json(first)
    assert codec.kept_comparands(stored) == (outcome_json(first), codec.shared_json(first))


def test_the_python_spelling_names_the_shared_fields_in_their_listed_order() -> None:
    """_shared_head_fields() spells SHARED_HEAD_FIELDS in their order (every optional one
    set, triage kept), and shared_json() ends with DRIFT_FIELDS."""
    every = attempt(
        1,
        answer_length=12,
        expected_evidence={"refund-window": ["doc-1"]},
        grader_name="g",
        grader_version="1",
        grader_model="m",
        previous_policy_version="v0",
        previous_status="pass",
    )
    assert not codec.derivable(every)
    spelled = json.loads("{" + codec.shared_json(every) + "}")
    assert tuple(spelled) == SHARED_FIELDS
    assert tuple(spelled)[-2:] == codec.DRIFT_FIELDS
