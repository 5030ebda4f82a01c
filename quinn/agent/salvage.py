"""Structured answers that are nearly right: a score on another scale, one bad item among good ones.

Asked for an ``importance`` between 0 and 1, a small model writes 8 (a 1-10 scale) or 80 (percent); asked for a
list of memories, it gets one item wrong. Rejecting the whole answer loses every good item with the bad one (seen:
qwen2.5-coder-0.5b's extraction of a mail thrown away, twice, for ``new.0.importance: 5``). Two repairs, each
logged by the caller:

* `rescaled`: before validation, a number above a field's upper bound of 1 that reads as a 1-10 or 1-100 score
  is put back on the field's scale (8 -> 0.8, 80 -> 0.8); any other number outside its field's ``ge``/``le``
  bounds is clamped to the bound. No model round trip.
* `without_invalid_items`: when the model, asked once more, is still wrong, the list items that fail validation
  are dropped and the rest kept, as long as something is left.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)

_BOUNDS = {"less_than_equal": "le", "greater_than_equal": "ge"}
_PASSES = 5  # each pass fixes every error pydantic reported; nested fixes can reveal more


def rescaled(format: type[T], value: Any) -> tuple[Any, list[str]]:
    """``value`` with its out-of-bound numbers put back in bounds, and a note for each change."""
    notes: list[str] = []
    value = copy.deepcopy(value)
    for _ in range(_PASSES):
        try:
            format.model_validate(value)
            break
        except ValidationError as exc:
            changed = False
            for error in exc.errors():
                bound = _BOUNDS.get(error["type"])
                if bound is None:
                    continue
                parent, key = _parent(value, error["loc"])
                number = parent[key] if parent is not None else None
                if isinstance(number, bool) or not isinstance(number, int | float):
                    continue
                limit = float(error["ctx"][bound])
                fixed = _on_scale(float(number), limit) if bound == "le" else limit
                parent[key] = fixed
                notes.append(f"{_path(error['loc'])}: {number} -> {fixed:g}")
                changed = True
            if not changed:
                break
    return value, notes


def without_invalid_items(format: type[T], value: Any) -> tuple[T, list[str]] | None:
    """``value`` validated after dropping the list items that fail, with a note per item dropped; None when that
    does not make it valid or leaves nothing (every list emptied that had items)."""
    if not isinstance(value, dict):
        return None
    value = copy.deepcopy(value)
    had_items = any(isinstance(v, list) and v for v in value.values())
    notes: list[str] = []
    for _ in range(_PASSES * 4):
        try:
            parsed = format.model_validate(value)
        except ValidationError as exc:
            drops = sorted({(e["loc"][0], e["loc"][1]) for e in exc.errors()
                            if len(e["loc"]) >= 2 and isinstance(e["loc"][1], int)
                            and isinstance(value.get(e["loc"][0]), list)}, reverse=True)  # fmt: skip
            if not drops:
                return None
            for field, index in drops:
                if index < len(value[field]):
                    del value[field][index]
                    notes.append(f"dropped {field}.{index}")
            continue
        if had_items and not any(isinstance(v, list) and v for v in value.values()):
            return None
        return parsed, notes
    return None


def _on_scale(number: float, upper: float) -> float:
    if upper == 1 and 1 < number <= 10:
        return number / 10
    if upper == 1 and 10 < number <= 100:
        return number / 100
    return upper


def _parent(value: Any, loc: tuple[int | str, ...]) -> tuple[Any, int | str]:
    node = value
    for step in loc[:-1]:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return None, loc[-1]
    if isinstance(node, dict | list):
        try:
            node[loc[-1]]  # type: ignore[index]  # a name on a list is a TypeError, caught
        except (KeyError, IndexError, TypeError):
            return None, loc[-1]
        return node, loc[-1]
    return None, loc[-1]


def _path(loc: tuple[int | str, ...]) -> str:
    return ".".join(map(str, loc))
