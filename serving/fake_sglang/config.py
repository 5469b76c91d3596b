"""``FakeConfig``: how one fake SGLang server behaves (its launch flags, frozen).

The semantics of each field (limits, reserved draft tokens, timing) are the module docstring of
:mod:`serving.fake_sglang`; the properties reproduce SGLang 0.5.23's derived limits.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["FakeConfig"]


@dataclass(frozen=True)
class FakeConfig:
    """How one fake SGLang server behaves. Frozen; unknown fields fail in ``from_dict``.

    Identity and limits:
        model_name: served model name (``/v1/models``, metric label ``model_name``).
        context_length: the model's context length in tokens (``C`` in the module docstring).
        context_length_flag: True mimics a server launched with ``--context-length`` (SGLang then
            also refuses chat ``max_tokens > C`` up front, check 1).
        max_total_num_tokens: KV pool size in tokens; bounds ``max_req_len`` and is the
            denominator of ``token_usage``.
        max_running_requests: samples allowed to run at once; more wait in the queue
            (``num_queue_reqs``). None: unlimited.
        tokenizer_path: a Hugging Face tokenizer directory for exact token counts; None uses the
            documented simple count.
        eos_token_id: the id reported as ``matched_stop`` when a choice "hits EOS".
        eos_after_tokens: a choice whose limit is above this many tokens stops after this many
            with ``finish_reason "stop"``; None: only the limit ends a choice.
    Speculative decoding:
        speculative_algorithm: None, "EAGLE", "EAGLE3", "NGRAM", ... (``--speculative-algorithm``).
        speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens: as SGLang's
            flags; for EAGLE/EAGLE3 they set the reserved tokens ``R`` of the length check.
        spec_accept_length: reported ``sglang:spec_accept_length`` and ``/server_info``
            ``avg_spec_accept_length`` (the latter only after a first token, as in SGLang).
        spec_accept_rate: reported ``sglang:spec_accept_rate``.
    Timing (seconds; 0 means "yield to the event loop only"):
        prefill_delay_s: fixed delay before the first token.
        prefill_s_per_token: extra delay per prompt token before the first token.
        decode_step_s: delay between two decode steps (one token of every running choice).
        health_delay_s: delay of ``/health`` and ``/health_generate`` (SGLang's is >= 1 s).
    Client disconnect:
        on_disconnect: "abort" (stop generating) or "ignore" (go on until the limit or an
            ``/abort_request``, like sglang#37833).
        disconnect_abort_delay_s: with "abort", how long generation goes on after the
            disconnect (SGLang: 2 s for streams).
    Metrics:
        enable_metrics: False makes ``/metrics`` answer 404 (server without ``--enable-metrics``).
        metrics_prefix: "sglang:" (0.5.23) or "sglang_" (some other versions).
        dp_size: data-parallel ranks; > 1 emits one series per rank with a ``dp_rank`` label
            and spreads requests over ranks round robin.
        weight_version: reported in ``metadata.weight_version``.
        max_log_entries: the access log keeps this many newest entries (memory bound for
            benchmarks).
    Embedding models (``--is-embedding``):
        is_embedding: serve ``/v1/embeddings`` and ``/v1/rerank``; without it both answer 400
            with SGLang's "does not appear to be an embedding model" message.
        embedding_dim: floats per embedding when the request gives no ``dimensions``; embedding
            ``k`` of input ``i`` is ``sin(i * 1000 + k + 1)`` (deterministic; a large
            ``dimensions`` makes a large response).
    Losslessness:
        perturb_output: token ``i >= 2`` of every choice is emitted as ``tok{i+1}``: an engine
            whose output differs from the target model's (what a lossless canary must catch).
            Read from ``FakeState.config`` per token, so a test may swap the config to turn it
            off.
        perturb_only_field: with ``perturb_output``, perturb only requests whose JSON body has
            this top-level field (e.g. ``"tools"``: only tool-calling answers differ).
    LoRA (``serving/fake_sglang/lora.py``):
        enable_lora: ``--enable-lora``; without it any adapter request is 400.
        lora_paths: ``--lora-paths`` entries, ``<name>=<path>`` or ``<path>`` (the loaded adapters).
    Prefix cache (``serving/fake_sglang/prefix_cache.py``):
        prefix_cache_tokens: 0 (default) for none; else a radix-like cache of this many tokens
            (LRU, leaves first) and SGLang's ``--enable-cache-report``: chat and single-text
            completion usage carries ``prompt_tokens_details`` =
            ``{"cached_tokens": N, "image_tokens": null, "audio_tokens": null,
            "video_tokens": null}`` (0.5.23's ``PromptTokensDetails``, always present then),
            and prefill costs ``prefill_s_per_token`` only for the uncached tokens.
    """

    model_name: str = "fake-model"
    context_length: int = 2048
    context_length_flag: bool = True
    max_total_num_tokens: int = 1 << 20
    max_running_requests: int | None = None
    tokenizer_path: str | None = None
    eos_token_id: int = 2
    eos_after_tokens: int | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int = 3
    speculative_eagle_topk: int = 1
    speculative_num_draft_tokens: int = 4
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0
    prefill_delay_s: float = 0.0
    prefill_s_per_token: float = 0.0
    decode_step_s: float = 0.0
    health_delay_s: float = 0.0
    on_disconnect: str = "abort"
    disconnect_abort_delay_s: float = 0.0
    enable_metrics: bool = True
    metrics_prefix: str = "sglang:"
    dp_size: int = 1
    weight_version: str = "default"
    max_log_entries: int = 100_000
    is_embedding: bool = False
    embedding_dim: int = 8
    perturb_output: bool = False
    perturb_only_field: str | None = None
    prefix_cache_tokens: int = 0
    enable_lora: bool = False
    lora_paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.context_length < 8:
            raise ValueError(f"context_length must be >= 8, got {self.context_length}")
        if self.max_total_num_tokens < 8:
            raise ValueError(f"max_total_num_tokens must be >= 8, got {self.max_total_num_tokens}")
        if self.max_running_requests is not None and self.max_running_requests < 1:
            raise ValueError("max_running_requests must be >= 1 or None")
        if self.on_disconnect not in ("abort", "ignore"):
            raise ValueError(
                f"on_disconnect must be 'abort' or 'ignore', got {self.on_disconnect!r}"
            )
        if self.metrics_prefix not in ("sglang:", "sglang_"):
            raise ValueError(
                f"metrics_prefix must be 'sglang:' or 'sglang_', got {self.metrics_prefix!r}"
            )
        if self.dp_size < 1:
            raise ValueError(f"dp_size must be >= 1, got {self.dp_size}")
        if self.prefix_cache_tokens < 0:
            raise ValueError("prefix_cache_tokens must be >= 0")
        for name in (
            "prefill_delay_s",
            "prefill_s_per_token",
            "decode_step_s",
            "health_delay_s",
            "disconnect_abort_delay_s",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FakeConfig:
        """Build from a mapping; unknown keys raise ``ValueError``."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown FakeConfig fields: {sorted(unknown)}")
        return cls(**data)

    @property
    def lora_adapters(self) -> dict[str, str]:
        """``{name: path}`` of ``lora_paths`` (SGLang: a bare path is its own name)."""
        return {(e.split("=", 1)[0] if "=" in e else e): (e.split("=", 1)[1] if "=" in e else e)
                for e in self.lora_paths}

    @property
    def is_eagle(self) -> bool:
        """True for the algorithms whose draft tokens SGLang reserves in the length check."""
        return (self.speculative_algorithm or "").upper() in ("EAGLE", "EAGLE3", "FROZEN_KV_MTP")

    @property
    def num_reserved_tokens(self) -> int:
        """``R``: tokens SGLang adds to the input length before comparing with the context."""
        if not self.is_eagle:
            return 0
        return max(
            self.speculative_eagle_topk * self.speculative_num_steps,
            self.speculative_num_draft_tokens,
        )

    @property
    def max_req_len(self) -> int:
        """SGLang's ``max_req_len`` = min(context_length - 1, max_total_num_tokens - 1)."""
        return min(self.context_length - 1, self.max_total_num_tokens - 1)

    @property
    def max_req_input_len(self) -> int:
        """SGLang's ``max_req_input_len`` = max_req_len - 5 (scheduler's input check)."""
        return self.max_req_len - 5
