"""What a :class:`~router.state.fleet.Fleet` (one :class:`~router.state.runtime.Runtime` per model) is built
from, and building one outside the router.

:func:`load_runtime_inputs` does the I/O (the YAML validated whole, each model's tokenizer, the
API key files) and touches no live object, so the router runs it in a worker thread at start
(:func:`router.app.asgi.create_app`) and on each reload (:mod:`router.app.reload`), then builds the
fleet on its event loop (:func:`router.state.fleet.build_fleet`). :func:`build_runtime` builds one
model's runtime in one call, for scripts and benchmarks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from router.access.auth import Auth, load_auth
from router.config.tree import Config, load_config
from router.request.features import PromptCounter
from router.state.runtime import LeaseLedger, Runtime

__all__ = ["RuntimeInputs", "build_runtime", "load_runtime_inputs"]


@dataclass(frozen=True, slots=True)
class RuntimeInputs:
    """What a :class:`Runtime` is built from, loaded off the event loop.

    Attributes:
        config: the validated YAML.
        counters: model name -> its prompt token counter (a previous one when its tokenizer
            path is unchanged; models with one tokenizer path share one counter).
        auth: the resolved API keys.
    """

    config: Config
    counters: Mapping[str, PromptCounter]
    auth: Auth

    @property
    def counter(self) -> PromptCounter:
        """The first model's counter (the only one of a one-model config)."""
        return self.counters[self.config.models[0].name]


def load_runtime_inputs(config: Config | Path, previous_counter: object = None,
                        previous_counters: Iterable[PromptCounter] = ()) -> RuntimeInputs:
    """Do the fleet's I/O: read and validate the YAML (when given a path), load each model's
    tokenizer (unless ``previous_counter`` or one of ``previous_counters`` has the same path)
    and read the API key files and variables.

    Touches no live object, so it may run in a worker thread; build the :class:`Runtime` from
    the result on the event loop.

    Raises:
        ConfigError: invalid YAML, or a configured API key source missing or empty.
        OSError: the file or the tokenizer cannot be read.
        Exception: whatever the tokenizer library raises on a corrupt file.
    """
    if not isinstance(config, Config):
        config = load_config(config)
    by_path: dict[str, PromptCounter] = {}
    for old in (*previous_counters, *([previous_counter] if isinstance(previous_counter, PromptCounter) else [])):
        by_path.setdefault(str(getattr(old, "path", "")), old)
    counters: dict[str, PromptCounter] = {}
    for model in config.models:
        counter = by_path.get(model.tokenizer)
        if counter is None:
            counter = by_path[model.tokenizer] = PromptCounter(model.tokenizer)
        counters[model.name] = counter
    return RuntimeInputs(config, counters, load_auth(config.auth))


def build_runtime(config: Config, previous: Runtime | None = None,
                  ledger: LeaseLedger | None = None) -> Runtime:
    """Build a :class:`Runtime` for ``config``'s first model (the only one of a one-model
    config; :func:`router.state.fleet.build_fleet` builds every model's), reusing ``previous``'s tokenizer, endpoints,
    ledger and overrides; reads the API key files and variables (``auth``).

    Does I/O and, with ``previous``, writes to its live endpoints: call it only where no event
    loop routes with ``previous`` (scripts, benchmarks). The router loads
    :func:`load_runtime_inputs` in a thread and builds the :class:`Runtime` on its loop.

    Raises:
        OSError: when the tokenizer cannot be loaded.
        ConfigError: when a configured API key source is missing or empty.
    """
    inputs = load_runtime_inputs(config, previous.counter if previous is not None else None)
    return Runtime(config.for_model(config.models[0].name), inputs.counter, previous, ledger=ledger, auth=inputs.auth)
