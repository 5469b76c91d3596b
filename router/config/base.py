"""The building blocks of the config tree (:mod:`router.config.tree`).

:class:`Strict` is the base of every section: ``extra="forbid"`` (an unknown key is an error,
so a typo never silently falls back to a default) and ``frozen=True`` (a loaded config is a
value). The constrained scalars below are the fields' types: ``strict=True`` integers refuse
``"8"``, ``8.0`` and ``true``. :func:`format_errors` turns a pydantic ``ValidationError`` into
the one-line-per-key report that :class:`ConfigError` carries.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "ConfigError",
    "EnvName",
    "NonEmptyStr",
    "NonNegativeInt",
    "PositiveFloat",
    "PositiveInt",
    "Strict",
    "Url",
    "format_errors",
]

PositiveInt = Annotated[int, Field(strict=True, ge=1)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Url = Annotated[str, Field(strict=True, pattern=r"^https?://[^\s/]+(:\d+)?/?$")]
EnvName = Annotated[str, Field(strict=True, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
NonEmptyStr = Annotated[str, Field(strict=True, min_length=1)]


class ConfigError(ValueError):
    """The operator YAML is missing, unreadable, or fails validation.

    ``str(exc)`` is a readable multi-line report naming each offending key path.
    """


class Strict(BaseModel):
    """A config section: unknown keys refused, instances frozen, lax types unless a field
    says ``strict=True``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


#: Key-path parts whose values are never echoed in an error (secrets, URLs with passwords).
_SECRET_PARTS = ("key", "secret", "password", "token_file", "redis_url", "auth")


def _unwrap(tp: Any) -> Any:
    """The model class inside ``X | None`` / ``Annotated[X, ...]`` (else ``tp``)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _unwrap(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        models = [a for a in get_args(tp) if isinstance(a, type) and issubclass(a, BaseModel)]
        return models[0] if len(models) == 1 else tp
    return tp


def _keys_at(model: type[BaseModel] | None, loc: Sequence[int | str]) -> list[str]:
    """The keys (aliases where set) of the section at ``loc`` under ``model``; [] when unknown."""
    tp: Any = model
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(part, int):
            args = get_args(tp)
            tp = args[0] if get_origin(tp) in (list, tuple) and args else None
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            field = next((f for n, f in tp.model_fields.items() if (f.alias or n) == part), None)
            tp = None if field is None else field.annotation
        elif get_origin(tp) is dict and len(get_args(tp)) == 2:
            tp = get_args(tp)[1]
        else:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [f.alias or n for n, f in tp.model_fields.items()]
    return []


def _shown(loc: Sequence[int | str], value: Any) -> str:
    """`` (got 'x')`` for a scalar input outside secret keys, else ``""``."""
    if any(isinstance(p, str) and any(s in p.lower() for s in _SECRET_PARTS) for p in loc):
        return ""
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return f" (got {value!r})"
    if isinstance(value, str):
        return f" (got {value[:60]!r}{'...' if len(value) > 60 else ''})"
    if isinstance(value, list):
        return " (got a list)"
    if isinstance(value, dict):
        return " (got a mapping)"
    return ""


def format_errors(exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None,
                  loc_map: Callable[[Sequence[int | str]], Sequence[int | str]] | None = None) -> str:
    """``exc`` as one ``  <dotted.key.path>: <message>`` line per error (``prefix`` first in
    each path, e.g. ``routing``; ``<root>`` for the document itself).

    A wrong value is echoed after the message (``(got 'eight')``; never under a key naming a
    key, secret, password, the auth section or the Redis URL). An unknown key says so and, when
    ``model`` (the root section's class) knows the keys next to it, names the closest one
    (:func:`difflib.get_close_matches`, cutoff 0.6): ``unknown key; did you mean
    'long_prompt_tokens'?``; the "required" error of the key it was meant to be is then
    dropped, so one typo gives one line. ``loc_map`` rewrites each key path for display (the
    one-model form's ``models.0.pools`` shown as ``pools``: :func:`router.config.models.one_model_loc`).
    """
    errors = exc.errors(include_url=False)
    lines: list[str] = []
    meant: set[tuple[int | str, ...]] = set()
    suggestions: dict[int, str] = {}
    for i, err in enumerate(errors):
        if err["type"] != "extra_forbidden" or not err["loc"]:
            continue
        parent, key = tuple(err["loc"][:-1]), str(err["loc"][-1])
        siblings = _keys_at(model, parent)
        missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and tuple(e["loc"][:-1]) == parent]
        close = difflib.get_close_matches(key, missing, n=1, cutoff=0.6) or difflib.get_close_matches(
            key, siblings, n=1, cutoff=0.6)
        if close:
            suggestions[i] = close[0]
            if close[0] in missing:
                meant.add((*parent, close[0]))
    for i, err in enumerate(errors):
        loc_t = tuple(err["loc"])
        if err["type"] == "missing" and loc_t in meant:
            continue
        shown_loc = loc_map(err["loc"]) if loc_map is not None else err["loc"]
        parts = ([prefix] if prefix else []) + [str(p) for p in shown_loc]
        loc = ".".join(parts) or "<root>"
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + (f"; did you mean {suggestions[i]!r}?" if i in suggestions else "")
        elif err["type"] == "missing" or not err["loc"]:
            msg = err["msg"]
        else:
            msg = err["msg"] + _shown(err["loc"], err.get("input"))
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)
