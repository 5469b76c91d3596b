"""``specgate`` sub-commands contributed by the ``drafters`` package.

``spec-math --alpha A --c C [--gamma-max N] [--json]``
    Print the speculative-decoding speedup S(gamma) = E[tau] / (c*gamma + 1) for
    gamma = 1..N and the optimal gamma (see :mod:`drafters.spec_math` for the formulas).
    ``--json`` prints exactly ``{"gamma_opt": int, "speedup_max": float,
    "table": [{"gamma": int, "expected_tokens": float, "speedup": float}, ...]}``.
    Without ``--gamma-max`` the table runs to max(16, ceil(1.5 * gamma_opt)); when S grows
    without bound (c = 0, or alpha = 1 with c < 1) ``--gamma-max`` is required.
    Exit codes: 0 on success, 2 on invalid input (message on stderr).

``drafter eval ...``
    Acceptance of a drafter offline (the verifier) and online (SGLang), per draft position, tau,
    alpha and the implied S(gamma); see :mod:`drafters.drafter_eval`.

This module imports only the standard library and :mod:`drafters.spec_math`, so ``specgate
--help`` stays fast (no torch import).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from drafters import spec_math

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register the drafters sub-commands on the top-level ``specgate`` parser.

    Args:
        subparsers: the object returned by ``ArgumentParser.add_subparsers``. Each
            sub-command sets ``func`` (callable(args) -> int exit code).
    """
    p = subparsers.add_parser(
        "spec-math",
        help="speculative-decoding speedup table and optimal draft length",
        description=(
            "S(gamma) = E[tau] / (c*gamma + 1), E[tau] = (1 - alpha^(gamma+1)) / (1 - alpha) "
            "(Leviathan et al. 2023, arXiv:2211.17192)."
        ),
    )
    p.add_argument(
        "--alpha", type=float, required=True, help="acceptance rate in [0, 1] (1 - TV(p, q))"
    )
    p.add_argument(
        "--c",
        type=float,
        required=True,
        help="relative drafter cost: draft time per token / target forward time (>= 0)",
    )
    p.add_argument(
        "--gamma-max",
        type=int,
        default=None,
        help="largest draft length to tabulate and consider (default: max(16, 1.5 * optimum))",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=_run_spec_math)

    from drafters.lossless import add_verify_command  # aiohttp only; no torch

    add_verify_command(subparsers)

    from drafters.drafter_eval import add_eval_command  # torch etc. load inside the command

    add_eval_command(subparsers)


def _run_spec_math(args: argparse.Namespace) -> int:
    """Compute and print the table; returns the exit code (2 on invalid input)."""
    try:
        gamma_opt = spec_math.optimal_gamma(args.alpha, args.c, args.gamma_max)
        gamma_max = args.gamma_max
        if gamma_max is None:
            gamma_max = max(16, math.ceil(1.5 * gamma_opt))
        table = spec_math.speedup_table(args.alpha, args.c, gamma_max)
        bound = spec_math.speedup_bound(args.alpha, args.c)
    except ValueError as exc:
        print(f"specgate spec-math: error: {exc}", file=sys.stderr)
        return 2
    speedup_max = table[gamma_opt - 1].speedup

    if args.json:
        doc = {
            "gamma_opt": gamma_opt,
            "speedup_max": speedup_max,
            "table": [
                {"gamma": r.gamma, "expected_tokens": r.expected_tokens, "speedup": r.speedup}
                for r in table
            ],
        }
        print(json.dumps(doc))
        return 0

    print(f"alpha={args.alpha:g}  c={args.c:g}  (S = E[tau] / (c*gamma + 1))")
    print(f"{'gamma':>5}  {'E[tau]':>8}  {'speedup':>8}")
    for r in table:
        mark = "  <- optimum" if r.gamma == gamma_opt else ""
        print(f"{r.gamma:>5d}  {r.expected_tokens:>8.3f}  {r.speedup:>7.3f}x{mark}")
    print(
        f"optimum: gamma={gamma_opt}  speedup={speedup_max:.3f}x  "
        f"(bound min(1/c, 1/(1-alpha)) = {bound:.3f}x)"
    )
    return 0
