"""Models built from field values that are valid by construction, without validating them.

The worker builds a handful of models on every message (the outcome, the decision, a finding
per missing claim, the attempt and its kept citations, the record) from values that were
validated already (the message's) or that its own code makes (the metric's, triage's, the
clock's). Validating them again was a third of triage's cost; pydantic's model_construct()
skips validation but walks the fields in Python and costs more than validating.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

Model = TypeVar("Model", bound=BaseModel)

_new = object.__new__
_set = object.__setattr__  # the models are frozen: their own __setattr__ refuses


def trusted(model: type[Model], fields: dict[str, Any]) -> Model:
    """An instance of `model` holding `fields`, as `model(**fields)` builds it from values
    its validation leaves as they are (the exact types, text without a lone surrogate where
    the model is strict): the same fields, equal, dumped the same.

    `fields` names every field of the model, in the model's order, defaults included; the
    instance keeps the dict itself, so the caller hands over a new one. The model has no
    extra fields and no private attributes. tests/unit/contracts/test_trusted.py and
    tests/unit/pipeline/test_trusted_builds.py check each caller's instances against
    validated ones.
    """
    instance = _new(model)
    _set(instance, "__dict__", fields)
    _set(instance, "__pydantic_fields_set__", set(fields))
    _set(instance, "__pydantic_extra__", None)
    _set(instance, "__pydantic_private__", None)
    return instance
