"""Hugging Face ``transformers`` references and a tiny HTTP client for the SGLang tests.

- :func:`hf_greedy`: greedy continuation with EOS ignored (argmax at every step, KV cache),
  the reference SGLang's ``temperature=0, ignore_eos=True`` output must equal token for token.
- :func:`hf_conditionals`: teacher-forced next-token distributions over a whole sequence, the
  exact distributions the sampled tests compare SGLang's samples with.
- :func:`generate`: ``POST /generate`` with token ids (no tokenizer round trip).

The references run torch with one intra-op thread (:func:`one_thread`): for a model this
small, OpenMP threads only add synchronization, which on a busy 2-core machine made a
64-token greedy reference 8-15x slower (1-1.75 s instead of 0.12 s).
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(1)``; restores the previous count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def hf_greedy(model: Any, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """Argmax decoding of ``max_new_tokens`` tokens after ``prompt_ids`` (float32, no EOS stop)."""
    out: list[int] = []
    with torch.no_grad(), one_thread():
        res = model(torch.tensor([prompt_ids]), use_cache=True)
        for _ in range(max_new_tokens):
            nxt = int(res.logits[0, -1].argmax())
            out.append(nxt)
            res = model(torch.tensor([[nxt]]), past_key_values=res.past_key_values, use_cache=True)
    return out


def hf_conditionals(
    model: Any, prompt_ids: list[int], output_ids: list[int], temperature: float
) -> np.ndarray:
    """``softmax(logits / temperature)`` of the token after ``prompt + output[:j]`` for each j.

    Returns float64 [len(output_ids), V]: row j is the distribution ``output_ids[j]`` was
    drawn from.
    """
    seq = torch.tensor([prompt_ids + output_ids[:-1]])
    with torch.no_grad(), one_thread():
        logits = model(seq).logits[0, len(prompt_ids) - 1 :].float()
    return torch.softmax(logits / temperature, dim=-1).double().numpy()


def generate(
    base_url: str,
    input_ids: list[int] | list[list[int]],
    sampling_params: dict[str, Any],
    timeout_s: float = 600.0,
) -> Any:
    """``POST {base_url}/generate`` with ``input_ids`` (one prompt or a batch); returns the JSON
    body (a dict, or a list of dicts for a batch). Raises urllib.error.HTTPError on non-2xx."""
    body = json.dumps({"input_ids": input_ids, "sampling_params": sampling_params}).encode()
    req = urllib.request.Request(
        f"{base_url}/generate", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.load(resp)
