"""The building blocks of the config tree (:mod:`router.config`).

:class:`Strict` is the base of every section: ``extra="forbid"`` (an unknown key is an error,
so a typo never silently falls back to a default) and ``frozen=True`` (a loaded config is a
value). The constrained scalars below are the fields' types: ``strict=True`` integers refuse
``"8"``, ``8.0`` and ``true``. :func:`format_errors` turns a pydantic ``ValidationError`` into
the one-line-per-key report that :class:`ConfigError` carries.
"""

from __future__ import annotations

from typing import Annotated

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


def format_errors(exc: ValidationError, prefix: str = "") -> str:
    """``exc`` as one ``  <dotted.key.path>: <message>`` line per error (``prefix`` first in
    each path, e.g. ``routing``; ``<root>`` for the document itself)."""
    lines = []
    for err in exc.errors(include_url=False, include_input=False):
        parts = ([prefix] if prefix else []) + [str(p) for p in err["loc"]]
        loc = ".".join(parts) or "<root>"
        lines.append(f"  {loc}: {err['msg']}")
    return "\n".join(lines)

