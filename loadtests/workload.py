"""The workload: what requests a load test sends, shared by the runner and the locust file.

A workload is a frozen, strict value (:class:`Workload`; unknown keys in a YAML/JSON file
fail) describing:

- **Prompt-length buckets** (tokens, inclusive ``lo..hi``): given explicitly
  (``"1k-2k,8k-16k"``, ``k`` = 1024) or scaled to the served model's context length from
  the GPU operating points of docs/loadtests.md (1-2K, 8-16K and 80-128K of a 128K context:
  fractions 1/128-2/128, 8/128-16/128, 80/128-128/128), the top one capped so that prompt +
  output + a margin fits the context. Within a bucket a request's prompt length is drawn
  uniformly, or from a **trace file** of real lengths (one JSON object per line with
  ``prompt_tokens`` and optional ``output_tokens``, or a CSV with those columns).
- **Output lengths** (tokens): ``max_tokens`` drawn uniformly in ``output_tokens = (lo, hi)``
  (from the trace when it has them). With ``ignore_eos`` (SGLang's and vLLM's extension,
  default on) the engine generates exactly that many, so runs are comparable.
- **Task kind**: ``copy`` (repeat a passage verbatim: lookup drafters accept 5.4-7.9 tokens
  per step there) or ``free`` (write something new about it: 1.2-2.3), mixed by
  ``copy_fraction``. Passages come from a corpus text file (windows of words at
  seeded offsets) or are generated from a fixed list of common English words.
- **Load**: closed loop at fixed concurrency levels, or open loop at fixed Poisson arrival
  rates (requests/s); ``loads`` holds one or the other as selected by ``mode``.
- Repetitions, warm-up runs, per-run request counts, time bounds (seconds).

Prompt lengths are counted with the served model's tokenizer when ``tokenizer`` is a local
path (``transformers.AutoTokenizer``; the passage is cut to the exact token count). Without
one the documented approximation is **one token per whitespace-separated word**: exact for
the fake SGLang server's simple count, and close for byte-level BPE tokenizers on the
generated text (its words are common lowercase English words, mostly one token each with
their leading space); corpus text usually costs more (about 1.3 tokens per word for English
prose). Chat-template tokens are not counted. The report always records the prompt length
the server itself reported (``usage.prompt_tokens``), so the bucket actually served is
visible.

Every random choice is seeded: request ``i`` of run ``rep`` at a point draws from
``random.Random("seed:bucket:load:phase:rep:i")``, so every target (spec, plain, router) of
a comparison gets the same prompts and lengths. With ``cache_bust`` (default on) a short
unique line starts each prompt so that no engine answers from a prefix cache filled by an
earlier target or run (the GPU figures in docs/loadtests.md were taken with a warm prefix
cache; ours are not unless asked).
"""

from __future__ import annotations

import csv
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

__all__ = [
    "DOMAIN_BUCKET_FRACTIONS",
    "Bucket",
    "PromptFactory",
    "RequestSpec",
    "TokenCounter",
    "TraceEntry",
    "Workload",
    "WorkloadError",
    "arrival_times",
    "format_tokens",
    "load_trace",
    "parse_buckets",
    "parse_loads",
    "parse_range",
    "scaled_buckets",
]

#: The GPU operating points' context buckets (docs/loadtests.md) as fractions of a 128K
#: (131,072-token) context.
DOMAIN_BUCKET_FRACTIONS: tuple[tuple[float, float], ...] = (
    (1 / 128, 2 / 128),
    (8 / 128, 16 / 128),
    (80 / 128, 128 / 128),
)

#: Common lowercase English words for generated passages (mostly single BPE tokens).
_WORDS = tuple(
    """the of and to in is it that for on with as was he be at by this had not are but from or
    have an they which one you were her all she there would their we him been has when who will
    more no if out so said what up its about into than them can only other new some could time
    these two may then do first any my now such like our over man me even most made after also
    did many before must through back years where much your way well down should because each
    just those people how too little state good very make world still own see men work long get
    here between both life being under never day same another know while last might us great old
    year off come since against go came right used take three small large next early young light
    water river stone house road field market city winter summer morning evening story song game
    table window garden letter paper number line point place hand side part head eye face door
    room name word group order family child king ship sea land tree bird fire wind rain snow""".split()  # noqa: SIM905
)

_COPY_INSTRUCTION = "Copy the following text exactly, word for word, without any change:\n\n"
_FREE_INSTRUCTION = (
    "Read the following notes, then write a new and original story inspired by them. "
    "Do not quote the notes.\n\n"
)


class WorkloadError(ValueError):
    """A workload definition, bucket/load/range string or trace file is invalid."""


# --------------------------------------------------------------------------- parsing helpers
def _parse_count(text: str) -> int:
    """``"8k"`` -> 8192, ``"512"`` -> 512 (tokens). Raises WorkloadError."""
    t = text.strip().lower()
    mult = 1
    if t.endswith("k"):
        mult, t = 1024, t[:-1]
    elif t.endswith("m"):
        mult, t = 1024 * 1024, t[:-1]
    try:
        value = float(t) * mult
    except ValueError:
        raise WorkloadError(f"not a token count: {text!r}") from None
    if value != int(value) or value < 1:
        raise WorkloadError(f"token count must be a positive integer: {text!r}")
    return int(value)


def format_tokens(n: int) -> str:
    """A token count as written in bucket names: 8192 -> ``"8k"``, 1000 -> ``"1000"``."""
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k"
    return str(n)


def parse_range(text: str) -> tuple[int, int]:
    """``"64"`` -> (64, 64); ``"32-128"`` -> (32, 128) (tokens). Raises WorkloadError."""
    parts = text.split("-")
    if len(parts) == 1:
        n = _parse_count(parts[0])
        return n, n
    if len(parts) != 2:
        raise WorkloadError(f"not a range LO-HI: {text!r}")
    lo, hi = _parse_count(parts[0]), _parse_count(parts[1])
    if lo > hi:
        raise WorkloadError(f"range {text!r}: lo > hi")
    return lo, hi


@dataclass(frozen=True)
class Bucket:
    """A prompt-length bucket: prompts of ``lo..hi`` tokens inclusive, named ``name``."""

    name: str
    lo: int
    hi: int

    def __post_init__(self) -> None:
        if not (1 <= self.lo <= self.hi):
            raise WorkloadError(f"bucket {self.name!r}: need 1 <= lo <= hi, got {self.lo}..{self.hi}")

    @property
    def midpoint(self) -> float:
        """Geometric mean of lo and hi (tokens): the bucket's representative length."""
        return math.sqrt(self.lo * self.hi)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"name": self.name, "lo": self.lo, "hi": self.hi}


def parse_buckets(text: str) -> tuple[Bucket, ...]:
    """``"1k-2k,8k-16k"`` -> two buckets (tokens, ``k`` = 1024). Raises WorkloadError."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, hi = parse_range(part)
        out.append(Bucket(f"{format_tokens(lo)}-{format_tokens(hi)}", lo, hi))
    if not out:
        raise WorkloadError("no buckets given")
    return tuple(out)


def parse_loads(text: str) -> tuple[float, ...]:
    """``"1,4,8"`` -> (1.0, 4.0, 8.0): concurrency levels or arrival rates. Raises WorkloadError."""
    try:
        loads = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise WorkloadError(f"not a list of numbers: {text!r}") from None
    if not loads or any(not (v > 0 and math.isfinite(v)) for v in loads):
        raise WorkloadError(f"loads must be positive numbers: {text!r}")
    return loads


def scaled_buckets(
    context_tokens: int,
    *,
    output_tokens: int = 0,
    fractions: Sequence[tuple[float, float]] = DOMAIN_BUCKET_FRACTIONS,
) -> tuple[Bucket, ...]:
    """Buckets scaled to a model's context length (docs/loadtests.md's 1-2K/8-16K/80-128K).

    Args:
        context_tokens: the served model's context length (tokens).
        output_tokens: the largest output budget (tokens); the top bucket is capped at
            ``context_tokens - output_tokens - max(64, context_tokens // 64)`` so the request
            fits with the chat template and a speculative engine's reserved draft tokens.
        fractions: (lo, hi) fractions of the context per bucket.

    Raises:
        WorkloadError: when the context is too small for the buckets.
    """
    cap = context_tokens - output_tokens - max(64, context_tokens // 64)
    out = []
    for lo_f, hi_f in fractions:
        lo = max(1, round(context_tokens * lo_f))
        hi = min(cap, round(context_tokens * hi_f))
        if hi < lo:
            raise WorkloadError(
                f"context {context_tokens} tokens leaves no room for bucket {lo_f:.4f}-{hi_f:.4f}"
                f" with {output_tokens} output tokens"
            )
        out.append(Bucket(f"{format_tokens(lo)}-{format_tokens(hi)}", lo, hi))
    return tuple(out)


@dataclass(frozen=True)
class TraceEntry:
    """One trace row: a real request's prompt length and, if known, its output length (tokens)."""

    prompt_tokens: int
    output_tokens: int | None = None


def load_trace(path: str | Path) -> tuple[TraceEntry, ...]:
    """Read a trace of real lengths: JSON lines or CSV with ``prompt_tokens[,output_tokens]``.

    Raises:
        WorkloadError: unreadable file, a missing/non-integer ``prompt_tokens``, or no rows.
    """
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise WorkloadError(f"cannot read trace {p}: {exc.strerror}") from None
    rows: list[Mapping[str, Any]] = []
    if p.suffix.lower() == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
    else:
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    raise WorkloadError(f"trace {p} line {i}: not JSON") from None
    out = []
    for i, row in enumerate(rows, 1):
        try:
            prompt = int(row["prompt_tokens"])
            out_tok = row.get("output_tokens")
            output = int(out_tok) if out_tok not in (None, "") else None
        except (KeyError, TypeError, ValueError):
            raise WorkloadError(f"trace {p} row {i}: needs an integer prompt_tokens") from None
        if prompt < 1 or (output is not None and output < 1):
            raise WorkloadError(f"trace {p} row {i}: lengths must be >= 1")
        out.append(TraceEntry(prompt, output))
    if not out:
        raise WorkloadError(f"trace {p} has no rows")
    return tuple(out)


# --------------------------------------------------------------------------- the workload
@dataclass(frozen=True)
class Workload:
    """A load-test workload (see the module docstring). Frozen; build with :meth:`from_dict`.

    Attributes:
        buckets: prompt-length buckets (tokens); empty means "scale to the context length".
        loads: concurrency levels (``mode="closed"``) or arrival rates in requests/s (``open``).
        mode: ``closed`` (fixed concurrency) or ``open`` (Poisson arrivals).
        model: model name sent in requests; None: the first id of the target's ``/v1/models``.
        tokenizer: local tokenizer directory for exact prompt token counts; None: 1 token/word.
        context_length: the model's context (tokens) for scaled buckets; None: read
            ``max_model_len`` from ``/v1/models``.
        output_tokens: (lo, hi) output budget per request (tokens).
        copy_fraction: share of copy-style prompts in [0, 1]; the rest are free-form.
        corpus: text file to cut passages from; None: generated text.
        trace: trace file of real lengths; None: uniform within each bucket.
        stream: stream responses (TTFT and inter-token latency need it).
        ignore_eos: ask the engine to generate exactly ``max_tokens`` (SGLang extension).
        temperature: sampling temperature (0 = greedy).
        sampled_fraction: share of the requests sent at temperature 1 instead (request ``i`` of
            a run is sampled when ``floor((i + 1) f) > floor(i f)``: evenly interleaved), so one
            load test measures both temperature classes' acceptance (per request, from SGLang's
            ``spec_tokens_details``) for a complete speed block.
        cache_bust: prepend a unique line to every prompt (defeats prefix caching).
        requests_per_run: measured requests per run; None: ``max(min_requests_per_run,
            ceil(requests_per_load * load))``, by default ``max(8, 4 * concurrency)`` (closed)
            or ``max(8, ceil(4 * rate))`` (open).
        requests_per_load: with ``requests_per_run`` None, requests per unit of load (closed
            loop: waves, each worker sends this many; open loop: seconds of arrivals).
        min_requests_per_run: with ``requests_per_run`` None, the floor of a run's requests.
        warmup_runs: discarded runs per point and target before measuring (>= 3: CUDA
            graphs are captured at the first real generation).
        warmup_requests: requests per warm-up run; None: one wave (``ceil(load)``, at most 64).
        repetitions: measured runs per point and target (>= 1; >= 3 to judge the spread).
        seed: seed of every random choice.
        request_timeout_s: one request's limit (seconds).
        max_duration_s: the whole load test's limit (seconds); no new request starts after it.
        max_inflight: open loop: at most this many requests in flight (arrivals then wait).
        metrics_interval_s: how often the pools' ``/metrics`` are sampled during a run.
        spread_threshold: spread (max / min) above which runs are not stable.
    """

    buckets: tuple[Bucket, ...] = ()
    loads: tuple[float, ...] = (1.0, 4.0, 8.0)
    mode: str = "closed"
    model: str | None = None
    tokenizer: str | None = None
    context_length: int | None = None
    output_tokens: tuple[int, int] = (64, 64)
    copy_fraction: float = 0.0
    corpus: str | None = None
    trace: str | None = None
    stream: bool = True
    ignore_eos: bool = True
    temperature: float = 0.0
    sampled_fraction: float = 0.0
    cache_bust: bool = True
    requests_per_run: int | None = None
    requests_per_load: float = 4.0
    min_requests_per_run: int = 8
    warmup_runs: int = 3
    warmup_requests: int | None = None
    repetitions: int = 3
    seed: int = 0
    request_timeout_s: float = 300.0
    max_duration_s: float = 3600.0
    max_inflight: int = 256
    metrics_interval_s: float = 0.5
    spread_threshold: float = 1.10

    def __post_init__(self) -> None:
        if self.mode not in ("closed", "open"):
            raise WorkloadError(f"mode must be 'closed' or 'open', got {self.mode!r}")
        if not self.loads or any(not (v > 0 and math.isfinite(v)) for v in self.loads):
            raise WorkloadError("loads must be positive numbers")
        if self.mode == "closed" and any(v != int(v) for v in self.loads):
            raise WorkloadError("closed-loop loads are concurrency levels: integers")
        lo, hi = self.output_tokens
        if not (1 <= lo <= hi):
            raise WorkloadError(f"output_tokens must satisfy 1 <= lo <= hi, got {self.output_tokens}")
        if not 0.0 <= self.copy_fraction <= 1.0:
            raise WorkloadError("copy_fraction must be in [0, 1]")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise WorkloadError("temperature must be a finite number >= 0")
        if not 0.0 <= self.sampled_fraction <= 1.0:
            raise WorkloadError("sampled_fraction must be in [0, 1]")
        if not (self.requests_per_load > 0 and math.isfinite(self.requests_per_load)):
            raise WorkloadError("requests_per_load must be a positive number")
        for name in ("repetitions", "max_inflight", "min_requests_per_run"):
            if getattr(self, name) < 1:
                raise WorkloadError(f"{name} must be >= 1")
        if self.warmup_runs < 0:
            raise WorkloadError("warmup_runs must be >= 0")
        for name in ("requests_per_run", "warmup_requests", "context_length"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise WorkloadError(f"{name} must be >= 1")
        for name in ("request_timeout_s", "max_duration_s", "metrics_interval_s"):
            if not getattr(self, name) > 0:
                raise WorkloadError(f"{name} must be > 0 seconds")
        if not self.spread_threshold > 1.0:
            raise WorkloadError("spread_threshold must be > 1")
        names = [b.name for b in self.buckets]
        if len(set(names)) != len(names):
            raise WorkloadError(f"duplicate bucket names: {names}")

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workload:
        """Build from a YAML/JSON mapping; unknown keys fail.

        ``buckets`` may be a string (``"1k-2k,8k-16k"``) or a list of ``{name?, lo, hi}``;
        ``loads`` a string or a list; ``output_tokens`` an int, ``"LO-HI"`` or ``[lo, hi]``.

        Raises:
            WorkloadError: unknown keys or invalid values.
        """
        if not isinstance(data, Mapping):
            raise WorkloadError("a workload must be a mapping")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise WorkloadError(f"unknown workload keys: {unknown}")
        kw: dict[str, Any] = dict(data)
        try:
            if "buckets" in kw:
                b = kw["buckets"]
                if isinstance(b, str):
                    kw["buckets"] = parse_buckets(b)
                else:
                    kw["buckets"] = tuple(
                        Bucket(x.get("name") or f"{format_tokens(int(x['lo']))}-{format_tokens(int(x['hi']))}",
                               int(x["lo"]), int(x["hi"]))
                        for x in b
                    )
            if "loads" in kw:
                v = kw["loads"]
                kw["loads"] = parse_loads(v) if isinstance(v, str) else tuple(float(x) for x in v)
            if "output_tokens" in kw:
                v = kw["output_tokens"]
                if isinstance(v, int):
                    kw["output_tokens"] = (v, v)
                elif isinstance(v, str):
                    kw["output_tokens"] = parse_range(v)
                else:
                    kw["output_tokens"] = (int(v[0]), int(v[1]))
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            if isinstance(exc, WorkloadError):
                raise
            raise WorkloadError(f"invalid workload value: {exc}") from None
        return cls(**kw)

    def temperature_of(self, index: int) -> float:
        """The temperature of request ``index`` of a run (:attr:`sampled_fraction`)."""
        f = self.sampled_fraction
        return 1.0 if f > 0 and math.floor((index + 1) * f) > math.floor(index * f) else self.temperature

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict that :meth:`from_dict` reads back."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "buckets":
                v = [b.as_dict() for b in v]
            elif isinstance(v, tuple):
                v = list(v)
            out[f.name] = v
        return out

    def with_buckets(self, buckets: tuple[Bucket, ...]) -> Workload:
        """A copy with ``buckets`` set."""
        return replace(self, buckets=buckets)

    # ---------------------------------------------------------------- sizes
    def requests_for(self, load: float) -> int:
        """Measured requests in one run at ``load`` (see ``requests_per_run``)."""
        if self.requests_per_run is not None:
            return self.requests_per_run
        return max(self.min_requests_per_run, math.ceil(self.requests_per_load * load - 1e-9))

    def warmup_requests_for(self, load: float) -> int:
        """Requests in one warm-up run at ``load``: one wave unless set."""
        if self.warmup_requests is not None:
            return self.warmup_requests
        return max(1, min(64, math.ceil(load)))


# --------------------------------------------------------------------------- token counting
class TokenCounter:
    """Counts and cuts prompt text in tokens.

    With ``tokenizer_path`` it uses ``transformers.AutoTokenizer`` (no special tokens);
    without, the approximation one token per whitespace-separated word (module docstring).

    Raises:
        WorkloadError: the tokenizer cannot be loaded.
    """

    def __init__(self, tokenizer_path: str | None = None) -> None:
        self.exact = tokenizer_path is not None
        self._tok: Any = None
        if tokenizer_path is not None:
            try:
                from transformers import AutoTokenizer

                self._tok = AutoTokenizer.from_pretrained(tokenizer_path)
            except Exception as exc:  # noqa: BLE001 - any loader failure is a config error
                raise WorkloadError(f"cannot load tokenizer {tokenizer_path!r}: {exc}") from None

    def count(self, text: str) -> int:
        """Tokens in ``text``."""
        if self._tok is None:
            return len(text.split())
        return len(self._tok.encode(text, add_special_tokens=False))

    def cut(self, text: str, n: int) -> str:
        """The longest prefix of ``text`` of at most ``n`` tokens (whole words without tokenizer)."""
        if n <= 0:
            return ""
        if self._tok is None:
            return " ".join(text.split()[:n])
        ids = self._tok.encode(text, add_special_tokens=False)[:n]
        out = self._tok.decode(ids)
        # Re-encoding can merge differently at the cut; trim until it fits.
        while ids and self.count(out) > n:
            ids = ids[:-1]
            out = self._tok.decode(ids)
        return out


# --------------------------------------------------------------------------- prompts
@dataclass(frozen=True)
class RequestSpec:
    """One request to send.

    Attributes:
        messages: chat messages (one user message).
        max_tokens: output budget (tokens).
        task: ``copy`` or ``free``.
        bucket: the bucket's name.
        prompt_tokens_target: the drawn prompt length (tokens, message text only).
        prompt_tokens_counted: the message text's length by the :class:`TokenCounter`.
        index: position within its run.
    """

    messages: tuple[Mapping[str, str], ...]
    max_tokens: int
    task: str
    bucket: str
    prompt_tokens_target: int
    prompt_tokens_counted: int
    index: int

    def body(self, model: str, *, stream: bool, ignore_eos: bool, temperature: float) -> dict[str, Any]:
        """The ``/v1/chat/completions`` request body."""
        body: dict[str, Any] = {
            "model": model,
            "messages": [dict(m) for m in self.messages],
            "max_tokens": self.max_tokens,
            "temperature": temperature,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        if ignore_eos:
            body["ignore_eos"] = True
        return body


@dataclass
class PromptFactory:
    """Builds the :class:`RequestSpec` s of a run, deterministically from the workload seed.

    Args:
        workload: the workload.
        counter: token counter (exact with a tokenizer, else 1 token per word).
        corpus_text: passage source; None: generated words.
        trace: trace rows; None: uniform lengths within the bucket.

    Use :meth:`from_workload` to read the corpus and trace files the workload names.
    """

    workload: Workload
    counter: TokenCounter
    corpus_text: str | None = None
    trace: tuple[TraceEntry, ...] | None = None
    _corpus_words: list[str] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.corpus_text is not None:
            self._corpus_words = self.corpus_text.split()
            if not self._corpus_words:
                raise WorkloadError("the corpus is empty")

    @classmethod
    def from_workload(cls, workload: Workload, counter: TokenCounter | None = None) -> PromptFactory:
        """Read the workload's corpus and trace files. Raises WorkloadError when unreadable."""
        corpus = None
        if workload.corpus is not None:
            try:
                corpus = Path(workload.corpus).read_text()
            except OSError as exc:
                raise WorkloadError(f"cannot read corpus {workload.corpus}: {exc.strerror}") from None
        trace = load_trace(workload.trace) if workload.trace is not None else None
        return cls(workload, counter or TokenCounter(workload.tokenizer), corpus, trace)

    def _passage_words(self, rng: random.Random, n_words: int) -> str:
        if self._corpus_words:
            words = self._corpus_words
            start = rng.randrange(len(words))
            out = [words[(start + i) % len(words)] for i in range(n_words)]
            return " ".join(out)
        out = []
        for i in range(n_words):
            w = rng.choice(_WORDS)
            out.append(w + "." if i % 12 == 11 else w)
        return " ".join(out)

    def _lengths(self, rng: random.Random, bucket: Bucket) -> tuple[int, int]:
        w = self.workload
        if self.trace is not None:
            rows = [t for t in self.trace if bucket.lo <= t.prompt_tokens <= bucket.hi]
            if not rows:
                raise WorkloadError(f"the trace has no prompt in bucket {bucket.name}")
            row = rng.choice(rows)
            out = row.output_tokens if row.output_tokens is not None else rng.randint(*w.output_tokens)
            return row.prompt_tokens, out
        return rng.randint(bucket.lo, bucket.hi), rng.randint(*w.output_tokens)

    def make(self, bucket: Bucket, load: float, phase: str, rep: int, index: int,
             salt: str = "") -> RequestSpec:
        """Request ``index`` of run ``rep`` (``phase``: ``warmup`` or ``measure``).

        ``salt`` (e.g. the target name) only changes the cache-busting line, never the
        lengths, task or passage: every target gets the same workload.
        """
        w = self.workload
        rng = random.Random(f"{w.seed}:{bucket.name}:{load:g}:{phase}:{rep}:{index}")
        prompt_len, max_tokens = self._lengths(rng, bucket)
        task = "copy" if rng.random() < w.copy_fraction else "free"
        head = _COPY_INSTRUCTION if task == "copy" else _FREE_INSTRUCTION
        if w.cache_bust:
            tag = random.Random(f"{w.seed}:{salt}:{bucket.name}:{load:g}:{phase}:{rep}:{index}")
            head = f"[run {tag.getrandbits(48):012x}]\n" + head
        budget = max(1, prompt_len - self.counter.count(head))
        # Generated words are ~1 token each; corpus words may cost more: draw enough to cut.
        n_words = budget if not self.counter.exact else int(budget * 1.2) + 16
        passage = self._passage_words(rng, n_words)
        if self.counter.exact:
            passage = self.counter.cut(passage, budget)
            while self.counter.count(passage) < budget:  # rare: too few words for the budget
                passage = self.counter.cut(passage + " " + self._passage_words(rng, budget), budget)
        text = head + passage
        return RequestSpec(
            messages=({"role": "user", "content": text},),
            max_tokens=max_tokens,
            task=task,
            bucket=bucket.name,
            prompt_tokens_target=prompt_len,
            prompt_tokens_counted=self.counter.count(text),
            index=index,
        )


def arrival_times(rate: float, n: int, seed: str) -> list[float]:
    """Poisson arrivals: ``n`` cumulative offsets (seconds) with exponential gaps of mean 1/rate.

    The first request arrives at 0. ``seed`` is any string (Random's version-2 string seeding
    is stable across processes). Raises ValueError for rate <= 0.
    """
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s, got {rate!r}")
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        if i:
            t += rng.expovariate(rate)
        out.append(t)
    return out

