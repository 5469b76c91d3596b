"""What a :class:`~router.pools.Runtime` is built from, and building one outside the router.

:func:`load_runtime_inputs` does a runtime's I/O (the YAML validated whole, the tokenizer, the
API key files) and touches no live object, so the router runs it in a worker thread at start
(:func:`router.app.create_app`) and on each reload (:mod:`router.reload`), then builds the
:class:`~router.pools.Runtime` on its event loop. :func:`build_runtime` does both in one call,
for scripts and benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from router.auth import Auth, load_auth
from router.config import Config, load_config
from router.features import PromptCounter
from router.pools import LeaseLedger, Runtime

__all__ = ["RuntimeInputs", "build_runtime", "load_runtime_inputs"]


@dataclass(frozen=True, slots=True)
class RuntimeInputs:
    """What a :class:`Runtime` is built from, loaded off the event loop.

    Attributes:
        config: the validated YAML.
        counter: the prompt token counter (the previous one when the tokenizer path is unchanged).
        auth: the resolved API keys.
    """

    config: Config
    counter: PromptCounter
    auth: Auth


def load_runtime_inputs(config: Config | Path, previous_counter: object = None) -> RuntimeInputs:
    """Do a runtime's I/O: read and validate the YAML (when given a path), load the tokenizer
    (unless ``previous_counter`` has the same path) and read the API key files and variables.

    Touches no live object, so it may run in a worker thread; build the :class:`Runtime` from
    the result on the event loop.

    Raises:
        ConfigError: invalid YAML, or a configured API key source missing or empty.
        OSError: the file or the tokenizer cannot be read.
        Exception: whatever the tokenizer library raises on a corrupt file.
    """
    if not isinstance(config, Config):
        config = load_config(config)
    if previous_counter is not None and getattr(previous_counter, "path", None) == config.model.tokenizer:
        counter: PromptCounter = previous_counter  # type: ignore[assignment]
    else:
        counter = PromptCounter(config.model.tokenizer)
    return RuntimeInputs(config, counter, load_auth(config.auth))


def build_runtime(config: Config, previous: Runtime | None = None,
                  ledger: LeaseLedger | None = None) -> Runtime:
    """Build a :class:`Runtime` for ``config``, reusing ``previous``'s tokenizer, endpoints,
    ledger and overrides; reads the API key files and variables (``auth``).

    Does I/O and, with ``previous``, writes to its live endpoints: call it only where no event
    loop routes with ``previous`` (scripts, benchmarks). The router loads
    :func:`load_runtime_inputs` in a thread and builds the :class:`Runtime` on its loop.

    Raises:
        OSError: when the tokenizer cannot be loaded.
        ConfigError: when a configured API key source is missing or empty.
    """
    inputs = load_runtime_inputs(config, previous.counter if previous is not None else None)
    return Runtime(config, inputs.counter, previous, ledger=ledger, auth=inputs.auth)
