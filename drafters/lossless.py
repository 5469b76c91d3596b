"""Lossless check: a speculative pool must emit exactly the plain pool's greedy tokens.

Speculative decoding is lossless (Leviathan et al. 2023, arXiv:2211.17192): with greedy
verification (temperature 0) the emitted tokens equal the target's own greedy tokens whatever
the drafter proposes. ``specgate verify-lossless --spec URL --plain URL`` sends the same
greedy requests to both SGLang servers (``POST /generate`` with ``temperature 0`` and
``max_new_tokens``) and compares the ``output_ids`` token for token, reporting the first
divergence (prompt, position, both tokens). On the CPU stack in float32 they must be identical;
in bfloat16 kernels may legitimately diverge after some tokens (measured on this project's CPU
stack: ~57 tokens, even without speculation).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict, dataclass, field

import aiohttp

__all__ = ["DEFAULT_PROMPTS", "Divergence", "LosslessReport", "add_verify_command", "verify_lossless"]

DEFAULT_PROMPTS = (
    "def fibonacci(n):\n",
    "import os\nimport sys\n\n\ndef main():\n",
    "class Stack:\n    def __init__(self):\n",
    "for i in range(10):\n    print(i)\n",
    "with open(path) as f:\n",
)


@dataclass(frozen=True)
class Divergence:
    """The first differing token of one prompt (``position`` counts output tokens from 0)."""

    prompt: int
    position: int
    spec_token: int | None
    plain_token: int | None


@dataclass
class LosslessReport:
    """Per-prompt comparison; ``identical`` when every prompt matched token for token."""

    prompts: int = 0
    tokens_compared: int = 0
    divergences: list[Divergence] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.divergences


async def _generate(session: aiohttp.ClientSession, url: str, text: str, max_new_tokens: int) -> list[int]:
    body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
    async with session.post(url.rstrip("/") + "/generate", json=body,
                            timeout=aiohttp.ClientTimeout(total=600)) as r:
        doc = await r.json(content_type=None)
        if r.status != 200:
            raise RuntimeError(f"{url}: HTTP {r.status}: {str(doc)[:200]}")
    ids = doc.get("output_ids")
    if not isinstance(ids, list):
        raise RuntimeError(f"{url}: /generate returned no output_ids")  # noqa: TRY004  a server fault
    return ids


async def verify_lossless(spec_url: str, plain_url: str, prompts: list[str] | tuple[str, ...] = DEFAULT_PROMPTS,
                          *, max_new_tokens: int = 64) -> LosslessReport:
    """Compare greedy ``output_ids`` of the two servers on every prompt.

    Raises:
        RuntimeError: when a server answers with an error or without ``output_ids``.
    """
    report = LosslessReport(prompts=len(prompts))
    async with aiohttp.ClientSession() as session:
        for i, text in enumerate(prompts):
            spec, plain = await asyncio.gather(_generate(session, spec_url, text, max_new_tokens),
                                               _generate(session, plain_url, text, max_new_tokens))
            n = max(len(spec), len(plain))
            report.tokens_compared += min(len(spec), len(plain))
            for pos in range(n):
                a = spec[pos] if pos < len(spec) else None
                b = plain[pos] if pos < len(plain) else None
                if a != b:
                    report.divergences.append(Divergence(i, pos, a, b))
                    break
    return report


def _cmd(args: argparse.Namespace) -> int:
    prompts = list(DEFAULT_PROMPTS)
    if args.prompts:
        with open(args.prompts) as fh:
            prompts = [json.loads(line)["text"] if line.lstrip().startswith("{") else line.rstrip("\n").replace("\\n", "\n")
                       for line in fh if line.strip()]
    try:
        report = asyncio.run(verify_lossless(args.spec, args.plain, prompts, max_new_tokens=args.max_new_tokens))
    except (RuntimeError, aiohttp.ClientError, OSError) as exc:
        print(f"specgate verify-lossless: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**asdict(report), "identical": report.identical}, indent=2))
    else:
        print(f"{report.prompts} prompts, {report.tokens_compared} tokens compared: "
              + ("identical" if report.identical else f"{len(report.divergences)} prompt(s) diverge"))
        for d in report.divergences:
            print(f"  prompt {d.prompt}: first divergence at output token {d.position}: "
                  f"spec {d.spec_token} vs plain {d.plain_token}")
    return 0 if report.identical else 1


def add_verify_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``verify-lossless``."""
    p = sub.add_parser("verify-lossless", help="greedy tokens of a speculative pool vs a plain pool")
    p.add_argument("--spec", required=True, help="speculative SGLang server URL")
    p.add_argument("--plain", required=True, help="plain SGLang server URL")
    p.add_argument("--prompts", default=None, help="file: one prompt per line (\\n escapes) or JSONL {text}")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens generated per prompt (default 64)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_cmd)
