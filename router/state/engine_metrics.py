"""An SGLang server's ``/metrics`` text as an :class:`EngineLoad` (pure; no I/O).

:func:`parse_sglang_metrics` is pure (text in, :class:`EngineLoad` out). It reads SGLang's
gauges (``python/sglang/srt/metrics/collector.py``, 0.5.23): ``num_running_reqs``,
``num_queue_reqs``, ``token_usage``, ``spec_accept_length``, ``spec_accept_rate``, under the
``sglang:`` prefix or the ``sglang_`` spelling some versions emit. It also reads what the
engine *is* (set once at its start, ``emit_constants``): ``context_len`` (its context length),
``max_total_num_tokens`` (its KV pool), the ``model_name`` label of those series (its
``--served-model-name``), and the tokenizer counter ``num_requests_total``; a counter that
goes back, or a constant that changes, tells :mod:`router.state.identity` the engine restarted. Data-parallel ranks emit one
series each: running and queued requests are summed, token usage is the maximum, accept
length and rate are averaged over the series that report a positive value (the spec gauges
read 0 until 40 decode steps have run, ``decode_log_interval``; 0 means unknown).

:mod:`router.loops.scraper` fetches the text; :class:`router.state.endpoint.Endpoint` keeps the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["EngineLoad", "parse_sglang_metrics"]

_WANTED = {
    "num_running_reqs": "sum",
    "num_queue_reqs": "sum",
    "token_usage": "max",
    "max_total_num_tokens": "min",
    "kv_used_tokens": "max",
    "spec_accept_length": "mean",
    "spec_accept_rate": "mean",
    "generation_tokens_total": "sum",
    "num_requests_total": "sum",
    "context_len": "min",
}

#: the series whose ``model_name`` label names the served model (the engine's constants)
_NAMED = frozenset(("max_total_num_tokens", "context_len"))


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One scrape of an SGLang server.

    Attributes:
        num_running_reqs: requests in the running batch (summed over DP ranks).
        num_queue_reqs: requests waiting (summed over DP ranks).
        token_usage: KV-cache usage fraction in [0, 1] (max over ranks).
        spec_accept_length: mean accepted tokens per verify step, None when unknown.
        spec_accept_rate: mean acceptance rate, None when unknown.
        max_total_num_tokens: the KV pool's capacity in tokens (the smallest over ranks),
            None when not exported.
        kv_used_tokens: KV tokens in use (the largest over ranks); None when not exported
            (then ``token_usage * max_total_num_tokens``, :attr:`kv_used`).
        generation_tokens_total: tokens generated since the engine started (the tokenizer
            counter, summed over its label sets and ranks), None when not exported. It tells a
            fresh ``spec_accept_length`` from the last value of an idle engine, which SGLang
            keeps while nothing decodes.
        num_requests_total: requests the engine has received since it started (summed), None
            when not exported (SGLang exports it after the first request).
        context_len: the engine's context length (``sglang:context_len``, the smallest over
            ranks; tokens), None when not exported.
        model_names: the ``model_name`` labels of ``max_total_num_tokens`` and ``context_len``
            (the engine's served model name; empty when not exported).
    """

    num_running_reqs: int = 0
    num_queue_reqs: int = 0
    token_usage: float = 0.0
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    generation_tokens_total: float | None = None
    max_total_num_tokens: int | None = None
    kv_used_tokens: int | None = None
    num_requests_total: float | None = None
    context_len: int | None = None
    model_names: frozenset[str] = frozenset()

    @property
    def kv_used(self) -> int:
        """KV tokens in use: ``kv_used_tokens``, else ``token_usage`` of the capacity (0 unknown)."""
        if self.kv_used_tokens is not None:
            return self.kv_used_tokens
        cap = self.max_total_num_tokens
        return 0 if cap is None else round(self.token_usage * cap)

    @property
    def load(self) -> int:
        """Running plus queued requests."""
        return self.num_running_reqs + self.num_queue_reqs


def parse_sglang_metrics(text: str) -> EngineLoad:
    """Parse SGLang's Prometheus exposition text into an :class:`EngineLoad`.

    Unknown series, comments, histograms and malformed lines are ignored; missing gauges
    read 0 (running/queued/usage) or None (accept length/rate).
    """
    values: dict[str, list[float]] = {}
    names: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("sglang"):
            continue
        name_end = len(line)
        for i, ch in enumerate(line):
            if ch in "{ ":
                name_end = i
                break
        name = line[:name_end]
        if len(name) < 8 or name[6] not in ":_":
            continue
        key = name[7:]
        if key not in _WANTED:
            continue
        rest = line[name_end:]
        if rest.startswith("{"):
            close = rest.rfind("}")
            if close < 0:
                continue
            if key in _NAMED:
                _model_name(rest[:close], names)
            rest = rest[close + 1:]
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if math.isnan(value):
            continue
        values.setdefault(key, []).append(value)

    def agg(key: str) -> float | None:
        vals = values.get(key)
        if not vals:
            return None
        how = _WANTED[key]
        if how == "sum":
            return sum(vals)
        if how == "max":
            return max(vals)
        if how == "min":
            return min(vals)
        positive = [v for v in vals if v > 0]
        return sum(positive) / len(positive) if positive else None

    return EngineLoad(
        num_running_reqs=int(agg("num_running_reqs") or 0),
        num_queue_reqs=int(agg("num_queue_reqs") or 0),
        token_usage=float(agg("token_usage") or 0.0),
        spec_accept_length=agg("spec_accept_length"),
        spec_accept_rate=agg("spec_accept_rate"),
        generation_tokens_total=agg("generation_tokens_total"),
        max_total_num_tokens=_int(agg("max_total_num_tokens")),
        kv_used_tokens=_int(agg("kv_used_tokens")),
        num_requests_total=agg("num_requests_total"),
        context_len=_int(agg("context_len")),
        model_names=frozenset(names),
    )


def _model_name(labels: str, into: set[str]) -> None:
    """Add the ``model_name`` label value of a series' ``{...}`` text to ``into`` (Prometheus
    text escapes ``\\``, ``\"`` and ``\n`` in label values; a name with them is left out)."""
    start = labels.find('model_name="')
    if start < 0:
        return
    start += len('model_name="')
    end = labels.find('"', start)
    if end > start and "\\" not in labels[start:end]:
        into.add(labels[start:end])


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
