"""Runtime overrides of routing thresholds (``PUT /admin/config``), shared by all replicas.

An :class:`Overrides` document is validated by the same rules as the YAML (strict integers,
unknown keys refused); :meth:`Overrides.apply` merges it into the YAML's ``routing``
(:class:`router.config.routing.RoutingConfig`) and re-validates the result, and
:meth:`Overrides.flat` lists the set values by dotted key (``routing.saturation.enter``).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from router.config.base import ConfigError, NonNegativeInt, PositiveInt, Strict, format_errors
from router.config.routing import RoutingConfig

__all__ = [
    "Overrides",
    "RoutingOverride",
    "SaturationOverride",
    "parse_overrides",
]


class SaturationOverride(Strict):
    """Overrides of ``routing.saturation`` (requests); a missing key keeps the YAML value."""

    enter: PositiveInt | None = None
    exit: NonNegativeInt | None = None


class RoutingOverride(Strict):
    """Overrides of ``routing`` (``long_prompt_tokens`` in tokens)."""

    long_prompt_tokens: PositiveInt | None = None
    saturation: SaturationOverride | None = None


class Overrides(Strict):
    """Runtime overrides of routing thresholds (``PUT /admin/config``), shared by all replicas.

    The document is ``{"routing": {"long_prompt_tokens": N, "saturation": {"enter": E,
    "exit": X}}}`` with every key optional; the YAML stays the base and ``Overrides()`` (empty)
    means "YAML values". Validation is the YAML's: strict integers, unknown keys refused, and
    :meth:`apply` re-checks the merged ``routing`` (``exit < enter``).
    """

    routing: RoutingOverride = RoutingOverride()

    def flat(self) -> dict[str, int]:
        """The set values by dotted key, e.g. ``{"routing.saturation.enter": 16}``."""
        out: dict[str, int] = {}
        r = self.routing
        if r.long_prompt_tokens is not None:
            out["routing.long_prompt_tokens"] = r.long_prompt_tokens
        if r.saturation is not None:
            if r.saturation.enter is not None:
                out["routing.saturation.enter"] = r.saturation.enter
            if r.saturation.exit is not None:
                out["routing.saturation.exit"] = r.saturation.exit
        return out

    def apply(self, routing: RoutingConfig) -> RoutingConfig:
        """``routing`` with these overrides merged in, validated like the YAML.

        Raises:
            ConfigError: when the merged thresholds are invalid (e.g. ``exit >= enter``).
        """
        if not self.flat():
            return routing
        data = routing.model_dump()
        r = self.routing
        if r.long_prompt_tokens is not None:
            data["long_prompt_tokens"] = r.long_prompt_tokens
        if r.saturation is not None:
            for key in ("enter", "exit"):
                value = getattr(r.saturation, key)
                if value is not None:
                    data["saturation"][key] = value
        try:
            return RoutingConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError("invalid overrides:\n" + format_errors(exc, prefix="routing")) from None


def parse_overrides(data: Any) -> Overrides:
    """Validate a JSON document into :class:`Overrides`.

    Raises:
        ConfigError: on unknown keys or non-integer / out-of-range values, naming each path.
    """
    if not isinstance(data, dict):
        raise ConfigError("overrides: the document must be a JSON object")
    try:
        return Overrides.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("invalid overrides:\n" + format_errors(exc)) from None
