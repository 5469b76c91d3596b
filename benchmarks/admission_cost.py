"""In-process CPU cost of the admission checks per request (docs/performance.md).

    .venv/bin/python benchmarks/admission_cost.py [--number 200000]

Times, with ``timeit`` (best of 5 repeats), what ``router.api._generate`` adds per request for
priority and sampling controls: :func:`router.admission.resolve_priority`,
:func:`router.sampling.validate_sampling`, :func:`router.sampling.speculative_caveats` and
:func:`router.sampling.check_min_tokens`, for a plain chat body and for one that sets
``priority`` (from a key with a grant), ``seed``, ``logit_bias`` and ``min_p``; and the
proxy's scan of a non-streamed body for an engine abort (``b'"abort"' in body``). The key's
SHA-256 (one per request, only when ``auth.priority.keys`` is set) is timed apart.
"""

from __future__ import annotations

import argparse
import hashlib
import timeit

import orjson

from router.admission import resolve_priority
from router.config_server import PriorityGrant
from router.sampling import check_min_tokens, speculative_caveats, validate_sampling

PLAIN = {"model": "tiny-llama", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
CONTROLLED = {**PLAIN, "priority": 5, "seed": 3, "logit_bias": {"5": -100}, "min_p": 0.1}
GRANT = PriorityGrant(min=0, max=10, default=1)
BODY = orjson.dumps({"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok " * 64},
                                              "finish_reason": "length"}]})


def _checks(doc: dict, grant: PriorityGrant | None) -> None:
    resolve_priority(doc, None, grant, None)
    validate_sampling(doc)
    speculative_caveats(doc)
    check_min_tokens(doc, 64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200_000)
    n = parser.parse_args().number
    cases = {
        "plain body, key without a grant": lambda: _checks(PLAIN, None),
        "priority+seed+logit_bias+min_p, granted key": lambda: _checks(CONTROLLED, GRANT),
        "key digest (sha256, with auth.priority.keys)": lambda: hashlib.sha256(b"sk-a-client-key-0123456789").digest(),
        "non-stream abort scan, 300-byte body": lambda: b'"abort"' in BODY,
    }
    for name, fn in cases.items():
        best = min(timeit.repeat(fn, number=n, repeat=5))
        print(f"{name}: {best / n * 1e6:.2f} us")


if __name__ == "__main__":
    main()
