"""A locust user for teams that prefer locust; it shares :mod:`loadtests.workload`.

    pip install locust
    SPECGATE_WORKLOAD=workload.yaml locust -f loadtests/locustfile.py \
        --host http://127.0.0.1:8000 --users 8 --spawn-rate 8 --run-time 2m --headless

Configuration (environment variables, as locust passes no custom flags to a locustfile):

- ``SPECGATE_WORKLOAD``: a YAML file of :class:`~loadtests.workload.Workload` keys (buckets,
  output_tokens, copy_fraction, corpus, trace, tokenizer, seed, stream, ...). ``loads``,
  ``repetitions`` and warm-up keys are ignored: locust's ``--users`` is the concurrency and
  ``--run-time`` the bound.
- ``SPECGATE_BUCKETS``: bucket names to cycle through (comma-separated; default all).
- ``SPECGATE_MODEL``: model name (default: the first id of ``GET /v1/models``).

Every request is built by :meth:`PromptFactory.make` exactly as ``specgate loadtest`` builds
it (same seeds, same lengths, same copy/free mix), with phase ``locust``, run = the user's
number and index = the user's request count. Besides locust's own request line (whole
request, milliseconds), each streamed request reports two custom entries under the bucket's
name: ``TTFT`` (time to first token, ms) and ``TPOT`` (time per output token after the first,
ms), so the locust UI shows the same per-bucket latencies as the report. Speedup ratios,
accept length and calibration need ``specgate loadtest`` (interleaved comparison).

Without locust installed this module still imports (only :class:`LocustWorkload`, the shared
request builder, is defined), so tests and tooling can load it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loadtests.workload import Bucket, PromptFactory, Workload, WorkloadError

__all__ = ["LocustWorkload"]


@dataclass
class LocustWorkload:
    """The shared request builder: a workload, its prompt factory and the buckets to cycle.

    Args:
        workload: the workload (must have buckets).
        bucket_names: names to cycle through; empty: all buckets.

    Raises:
        WorkloadError: no buckets, or an unknown bucket name.
    """

    workload: Workload
    bucket_names: tuple[str, ...] = ()
    factory: PromptFactory = field(init=False)
    buckets: tuple[Bucket, ...] = field(init=False)

    def __post_init__(self) -> None:
        if not self.workload.buckets:
            raise WorkloadError("the locust workload needs explicit buckets")
        by_name = {b.name: b for b in self.workload.buckets}
        unknown = [n for n in self.bucket_names if n not in by_name]
        if unknown:
            raise WorkloadError(f"unknown buckets {unknown}; known: {sorted(by_name)}")
        self.buckets = tuple(by_name[n] for n in self.bucket_names) or self.workload.buckets
        self.factory = PromptFactory.from_workload(self.workload)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LocustWorkload:
        """Build from ``SPECGATE_WORKLOAD`` and ``SPECGATE_BUCKETS`` (module docstring).

        Raises:
            WorkloadError: unreadable or invalid workload file.
        """
        import yaml

        env = os.environ if env is None else env
        data: dict[str, Any] = {}
        path = env.get("SPECGATE_WORKLOAD")
        if path:
            try:
                loaded = yaml.safe_load(open(path).read())  # noqa: SIM115 - read once at start
            except (OSError, yaml.YAMLError) as exc:
                raise WorkloadError(f"cannot read workload {path}: {exc}") from None
            if not isinstance(loaded, dict):
                raise WorkloadError(f"workload {path} must be a mapping")
            data = loaded
        data.setdefault("buckets", "1k-2k")
        names = tuple(n.strip() for n in env.get("SPECGATE_BUCKETS", "").split(",") if n.strip())
        return cls(Workload.from_dict(data), names)

    def request(self, user: int, index: int, model: str) -> tuple[Bucket, dict[str, Any]]:
        """The ``index``-th request of user ``user``: its bucket and chat-completions body."""
        bucket = self.buckets[index % len(self.buckets)]
        spec = self.factory.make(bucket, 0.0, "locust", user, index, salt=f"locust-{user}")
        w = self.workload
        return bucket, spec.body(model, stream=w.stream, ignore_eos=w.ignore_eos,
                                 temperature=w.temperature)


try:  # locust is optional: the shared builder above works without it
    from locust import HttpUser, events, task
except ImportError:  # pragma: no cover - exercised only where locust is installed
    HttpUser = None

if HttpUser is not None:  # pragma: no cover - needs locust

    class SpecgateUser(HttpUser):  # type: ignore[misc, valid-type]
        """One closed-loop user: sends the shared workload's requests back to back."""

        def on_start(self) -> None:
            # Shared state lives on locust's Environment instance (one per run), not the module.
            env = self.environment
            if getattr(env, "specgate_workload", None) is None:
                env.specgate_workload = LocustWorkload.from_env()
                env.specgate_users = 0
            self.shared = env.specgate_workload
            self.user_id = env.specgate_users
            env.specgate_users += 1
            self.sent = 0
            self.model = os.environ.get("SPECGATE_MODEL") or self._discover_model()

        def _discover_model(self) -> str:
            with self.client.get("/v1/models", name="/v1/models", catch_response=True) as r:
                try:
                    return str(r.json()["data"][0]["id"])
                except (ValueError, KeyError, IndexError, TypeError):
                    r.failure("cannot read /v1/models")
                    return "default"

        @task
        def chat(self) -> None:
            bucket, body = self.shared.request(self.user_id, self.sent, self.model)
            self.sent += 1
            t0 = time.perf_counter()
            first = last = None
            tokens = 0
            with self.client.post("/v1/chat/completions", json=body, stream=body["stream"],
                                  name=f"chat {bucket.name}", catch_response=True) as r:
                if r.status_code != 200:
                    r.failure(f"HTTP {r.status_code}")
                    return
                if not body["stream"]:
                    return
                for line in r.iter_lines():
                    if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                        continue
                    chunk = json.loads(line[5:])
                    if chunk.get("usage"):
                        tokens = int(chunk["usage"].get("completion_tokens") or tokens)
                    if any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or ()):
                        last = time.perf_counter()
                        first = first or last
            if first is not None:
                events.request.fire(request_type="TTFT", name=bucket.name,
                                    response_time=(first - t0) * 1000, response_length=0,
                                    exception=None, context={})
            if first is not None and last is not None and tokens >= 2:
                events.request.fire(request_type="TPOT", name=bucket.name,
                                    response_time=(last - first) * 1000 / (tokens - 1),
                                    response_length=tokens, exception=None, context={})
