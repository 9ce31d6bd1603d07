"""Elastic's published ECS field types, and a check of a document against them as an index with
ECS's mappings would see it (tests/fixtures/ecs-fields.json says where the types come from)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from tests.conftest import ROOT

ECS_TYPES: dict[str, str] = json.loads(
    (ROOT / "tests" / "fixtures" / "ecs-fields.json").read_text(encoding="utf-8")
)["fields"]
# Every proper prefix of a field name is an object in ECS (a field set or a nesting level).
ECS_OBJECTS = {
    name.rsplit(".", depth)[0] for name in ECS_TYPES for depth in range(1, name.count(".") + 1)
}
ECS_FIELD_SETS = {name.split(".", 1)[0] for name in ECS_TYPES if "." in name}
TEXT_TYPES = {"keyword", "constant_keyword", "wildcard", "match_only_text", "text", "ip"}
OBJECT_TYPES = {"object", "flattened", "nested"}


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every leaf, as Elasticsearch flattens a document: objects in a
    list share the list's path, and a list of scalars is one field with many values."""
    if isinstance(value, dict):
        if not value and path:
            yield path, value
        for key, child in value.items():
            yield from leaves(child, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for item in value:
            yield from leaves(item, path)
    else:
        yield path, value


def ecs_type_error(name: str, value: Any) -> str | None:
    """Why `value` cannot be indexed as ECS's `name`, or None when it can."""
    kind = ECS_TYPES[name]
    if value is None:
        return None
    if kind in TEXT_TYPES:
        ok = isinstance(value, str)
    elif kind in {"long", "integer", "short", "byte", "unsigned_long"}:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind in {"float", "double", "scaled_float", "half_float"}:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind == "date":
        ok = isinstance(value, str) and datetime.fromisoformat(value).utcoffset() is not None
    else:
        ok = kind in OBJECT_TYPES and isinstance(value, dict)
    return None if ok else f"{name}: ECS maps it as {kind}, the line has {value!r}"


def ecs_conflicts(document: dict[str, Any]) -> list[str]:
    """Every field of `document` that an index with ECS's mappings would refuse or misfile:
    a value of the wrong type, an object where ECS has a value or a value where ECS has an
    object (a string `event`), or a field of our own inside one of ECS's field sets."""
    problems = []
    for path, value in leaves(document):
        parents = [path.rsplit(".", depth)[0] for depth in range(1, path.count(".") + 1)]
        if any(p in ECS_TYPES and ECS_TYPES[p] not in OBJECT_TYPES for p in parents):
            problems.append(f"{path}: under an ECS field that is not an object")
        elif path in ECS_TYPES:
            problem = ecs_type_error(path, value)
            if problem:
                problems.append(problem)
        elif path in ECS_OBJECTS:
            problems.append(f"{path}: ECS maps it as an object, the line has {value!r}")
        elif path.split(".", 1)[0] in ECS_FIELD_SETS:
            problems.append(f"{path}: not an ECS field, inside ECS's field set")
    return problems
