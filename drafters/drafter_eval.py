"""``specgate drafter eval``: a drafter's acceptance offline (verifier) and online (SGLang).

    specgate drafter eval [--target models/tiny-llama] [--draft models/tiny-llama-eagle3]
        [--url URL | --launch] [--temperature 0 [--temperature 1]] [--gamma 3]
        [--prompts 64] [--max-new-tokens 96] [--c 0.05] [--out drafter-eval]

What it measures, per temperature (``--temperature`` repeats; 0 = greedy, the default):

* **offline**: SGLang's EAGLE-3 chain decoding (topk 1, ``gamma`` steps, ``gamma + 1`` draft
  tokens) simulated in PyTorch, every draft verified by :mod:`serving.verifier`
  (:mod:`drafters.eagle3.evaluate`: how, and which cycles count). ``--no-offline`` skips it.
* **online**, with ``--url`` (a running SGLang speculative pool) or ``--launch`` (starts one
  from ``--target``/``--draft`` through :mod:`serving.local` with ``--speculative-algorithm
  EAGLE3 --speculative-eagle-topk 1 --speculative-num-steps gamma
  --speculative-num-draft-tokens gamma+1``, log in ``OUT/sglang.log``, and stops it): the
  same prompts as token ids, one ``POST /generate`` at a time (``temperature``,
  ``max_new_tokens``; EOS ends a request, as offline), and SGLang's own per-request accounting
  from ``meta_info`` (SGLang 0.5.23, ``TokenizerManager``): ``spec_verify_ct`` (verify
  cycles), ``spec_num_correct_drafts`` (accepted drafts) and ``spec_correct_drafts_histogram``
  (cycles per accepted count). Summed over the requests: accept length tau = 1 +
  correct / verify (the mean of accepted + 1 per cycle, the quantity behind SGLang's
  ``avg_spec_accept_length``), per-position acceptance from the histogram. Also recorded, as
  SGLang reports them after the run: ``/server_info`` ``internal_states[0].
  avg_spec_accept_length`` (server lifetime: includes earlier traffic and the start-up warm-up
  request, and lags by up to 40 decode steps, ``decode_log_interval``), the
  ``sglang:spec_accept_length`` gauge (the last 40-step interval only), and
  sum(completion_tokens) / sum(spec_verify_ct) (``meta_info.spec_accept_length``'s
  definition, which also counts the token the prefill emits).
* **implied speedup**: alpha = the i.i.d. acceptance rate with E[tau](alpha, gamma) = tau, and
  S(g) = E[tau](alpha, g) / (c g + 1) over g, its optimum and S at the measured gamma
  (:mod:`drafters.acceptance`, :mod:`drafters.spec_math`). ``--c`` is the relative drafter
  cost (draft time per token / target pass time); default 0.05, the EAGLE-3-on-GPU figure
  (one decoder layer against a large target). The CPU tiny
  pair's own c is not measured: on this stack both passes are dominated by Python and
  kernel-launch overhead, which says nothing about a GPU deployment.

Prompts: ``--prompts`` held-out prompts, :data:`drafters.eagle3.evaluate.PROMPT_SOURCE`
(``--seed``, ``--prompt-tokens``), the same for offline and online and every temperature.
Sampled runs (T > 0) are seeded offline (``--seed``); online they follow the server's
``--random-seed`` (0 with ``--launch``) and are reproducible only on an idle server.

Output: ``OUT/eval.json`` (below), ``OUT/acceptance.png`` (per-position acceptance bars and the
S(g) curves; matplotlib, Agg) and a table on stdout. Exit status 0; 2 on invalid arguments, an
unreachable or non-speculative server, or a server that failed to start (message on stderr).

``eval.json``, schema ``specgate.drafter-eval/v1``::

    {"schema": "specgate.drafter-eval/v1",
     "target": str, "draft": str,
     "prompts": {"source": str, "split": "heldout", "count": int, "chat": int, "seed": int,
                 "prompt_tokens": int, "max_new_tokens": int},
     "drafting": {"gamma": int, "topk": 1, "num_draft_tokens": int},    # gamma + 1
     "c": float,
     "server": null | {"url": str, "launched": bool, "speculative_algorithm": str,
                       "speculative_num_steps": int, "speculative_eagle_topk": int,
                       "speculative_num_draft_tokens": int, "version": str | null},
     "runs": [{"temperature": float,
               "offline": null | ACCEPTANCE + {"code_accept_length": float,
                                               "chat_accept_length": float},
               "online": null | ACCEPTANCE + {"requests": int, "completion_tokens": int,
                   "verify_ct": int, "correct_drafts": int, "meta_accept_length": float,
                   "server_info_avg_accept_length": float | null,
                   "metrics_spec_accept_length": float | null, "elapsed_s": float}}, ...]}

    ACCEPTANCE = {"cycles": int, "tokens_emitted": int, "accept_length": float,   # tau
                  "alpha": float, "position_acceptance": [gamma floats],   # conditional
                  "position_reach": [gamma floats],   # unconditional, non-increasing
                  "accepted_histogram": [gamma + 1 ints], "speedup": SPEEDUP}
    SPEEDUP = {"alpha": float, "c": float, "gamma": int, "speedup_at_gamma": float,
               "gamma_opt": int, "speedup_max": float, "speedup_bound": float | null,
               "table": [{"gamma": int, "expected_tokens": float, "speedup": float}, ...]}

Invariants: ``accept_length == 1 + sum(position_reach)``; ``tokens_emitted == sum((a + 1) *
accepted_histogram[a])``; ``speedup.table[g - 1].speedup == spec_math.speedup(alpha, g, c)``.
Floats are unrounded; ``speedup_bound`` is null when infinite (c = 0 and alpha = 1).

Only the standard library and :mod:`drafters.acceptance` at import time: torch, transformers,
httpx and matplotlib load inside the command (``specgate --help`` stays fast).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drafters.acceptance import (
    AcceptanceStats,
    ImpliedSpeedup,
    acceptance_from_counts,
    acceptance_from_histogram,
    implied_speedup,
)

__all__ = [
    "DEFAULT_C",
    "SCHEMA",
    "EvalError",
    "OnlineResult",
    "acceptance_json",
    "add_eval_command",
    "format_table",
    "launch_args",
    "measure_online",
    "server_speculative_config",
    "write_plot",
]

SCHEMA = "specgate.drafter-eval/v1"
#: Relative drafter cost used for the implied speedup unless ``--c`` says otherwise.
DEFAULT_C = 0.05


class EvalError(RuntimeError):
    """The evaluation cannot run: bad arguments, an unusable server (message for the user)."""


# --------------------------------------------------------------------------- pure pieces
def speedup_json(s: ImpliedSpeedup) -> dict[str, Any]:
    """The ``SPEEDUP`` object of the schema."""
    return {
        "alpha": s.alpha,
        "c": s.c,
        "gamma": s.gamma,
        "speedup_at_gamma": s.speedup_at_gamma,
        "gamma_opt": s.gamma_opt,
        "speedup_max": s.speedup_max,
        "speedup_bound": s.speedup_bound if math.isfinite(s.speedup_bound) else None,
        "table": [
            {"gamma": r.gamma, "expected_tokens": r.expected_tokens, "speedup": r.speedup}
            for r in s.table
        ],
    }


def acceptance_json(stats: AcceptanceStats, c: float) -> dict[str, Any]:
    """The ``ACCEPTANCE`` object of the schema, its implied speedup at cost ``c`` included."""
    return {
        "cycles": stats.cycles,
        "tokens_emitted": stats.tokens_emitted,
        "accept_length": stats.accept_length,
        "alpha": stats.alpha,
        "position_acceptance": list(stats.position_acceptance),
        "position_reach": list(stats.position_reach),
        "accepted_histogram": list(stats.accepted_histogram),
        "speedup": speedup_json(implied_speedup(stats.accept_length, stats.gamma, c)),
    }


def server_speculative_config(info: dict[str, Any]) -> dict[str, Any]:
    """The speculative settings of an SGLang ``/server_info`` document.

    Raises:
        EvalError: the server does not run a speculative algorithm.
    """
    algo = info.get("speculative_algorithm")
    if not algo:
        raise EvalError("the server runs no speculative algorithm (speculative_algorithm unset)")
    return {
        "speculative_algorithm": str(algo),
        "speculative_num_steps": int(info.get("speculative_num_steps") or 0),
        "speculative_eagle_topk": int(info.get("speculative_eagle_topk") or 0),
        "speculative_num_draft_tokens": int(info.get("speculative_num_draft_tokens") or 0),
        "version": info.get("version"),
    }


def launch_args(draft: str | Path, gamma: int) -> list[str]:
    """SGLang arguments of the EAGLE-3 chain pool that ``--launch`` starts (topk 1)."""
    return [
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", str(draft),
        "--speculative-eagle-topk", "1",
        "--speculative-num-steps", str(gamma),
        "--speculative-num-draft-tokens", str(gamma + 1),
    ]  # fmt: skip


# --------------------------------------------------------------------------- online
@dataclass(frozen=True)
class OnlineResult:
    """SGLang's own acceptance accounting for one temperature (see the module docstring).

    ``stats`` is None when the server reported no per-request histogram (then only
    ``accept_length`` = 1 + correct_drafts / verify_ct is known).
    """

    temperature: float
    requests: int
    completion_tokens: int
    verify_ct: int
    correct_drafts: int
    accept_length: float
    meta_accept_length: float
    stats: AcceptanceStats | None
    server_info_avg_accept_length: float | None
    metrics_spec_accept_length: float | None
    elapsed_s: float


def _get_json(client: Any, url: str) -> dict[str, Any]:
    import httpx

    try:
        r = client.get(url)
        r.raise_for_status()
        return dict(r.json())
    except (httpx.HTTPError, ValueError) as exc:
        raise EvalError(f"GET {url}: {exc}") from exc


def _avg_accept_length(info: dict[str, Any]) -> float | None:
    states = info.get("internal_states") or [{}]
    value = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
    return float(value) if value else None


def _metrics_accept_length(client: Any, base_url: str) -> float | None:
    import httpx

    from router import parse_sglang_metrics

    try:
        r = client.get(f"{base_url}/metrics")
        r.raise_for_status()
    except httpx.HTTPError:
        return None
    return parse_sglang_metrics(r.text).spec_accept_length


def measure_online(
    client: Any,
    base_url: str,
    prompts: Sequence[Sequence[int]],
    *,
    temperature: float,
    max_new_tokens: int,
    gamma: int,
    progress: Callable[[int], None] | None = None,
) -> OnlineResult:
    """Send every prompt (token ids) to ``base_url``'s ``/generate``, one at a time, and sum
    SGLang's per-request speculative accounting.

    Args:
        client: an ``httpx.Client`` (its timeouts apply; tests pass a ``MockTransport``).
        base_url: ``http://host:port`` of the SGLang server.
        prompts: token-id prompts.
        temperature, max_new_tokens: the requests' sampling parameters.
        gamma: draft steps per cycle (the server's ``speculative_num_steps``): the length of
            the per-position statistics.
        progress: optional callable(requests done).

    Raises:
        EvalError: an HTTP error, a malformed answer, or no verify cycle at all.
    """
    import httpx

    t0 = time.monotonic()
    completion = verify = correct = 0
    hist = [0] * (gamma + 1)
    have_hist = True
    for i, ids in enumerate(prompts):
        body = {
            "input_ids": list(ids),
            "sampling_params": {"temperature": temperature, "max_new_tokens": max_new_tokens},
        }
        try:
            r = client.post(f"{base_url}/generate", json=body)
            r.raise_for_status()
            meta = r.json()["meta_info"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise EvalError(f"POST {base_url}/generate (prompt {i}): {exc}") from exc
        completion += int(meta.get("completion_tokens", 0))
        ct = int(meta.get("spec_verify_ct", 0))  # absent when the request never decoded
        verify += ct
        correct += int(meta.get("spec_num_correct_drafts", 0))
        h = meta.get("spec_correct_drafts_histogram")
        if ct and not h:
            have_hist = False
        for a, n in enumerate(h or []):
            if a > gamma:
                if n:
                    raise EvalError(
                        f"prompt {i}: {n} cycles accepted {a} > gamma={gamma} drafts; "
                        "is --gamma the server's speculative_num_steps?"
                    )
                continue
            hist[a] += int(n)
        if progress is not None:
            progress(i + 1)
    elapsed = time.monotonic() - t0
    if verify == 0:
        raise EvalError(f"{base_url}: no verify cycle in {len(prompts)} requests")
    stats = None
    if have_hist:
        stats = acceptance_from_histogram(hist, gamma)
        if (stats.cycles, stats.tokens_emitted - stats.cycles) != (verify, correct):
            raise EvalError(
                f"{base_url}: histogram ({stats.cycles} cycles, "
                f"{stats.tokens_emitted - stats.cycles} accepted) disagrees with "
                f"spec_verify_ct {verify} / spec_num_correct_drafts {correct}"
            )
    info = _get_json(client, f"{base_url}/server_info")
    return OnlineResult(
        temperature=float(temperature),
        requests=len(prompts),
        completion_tokens=completion,
        verify_ct=verify,
        correct_drafts=correct,
        accept_length=1.0 + correct / verify,
        meta_accept_length=completion / verify,
        stats=stats,
        server_info_avg_accept_length=_avg_accept_length(info),
        metrics_spec_accept_length=_metrics_accept_length(client, base_url),
        elapsed_s=elapsed,
    )


def online_json(res: OnlineResult, gamma: int, c: float) -> dict[str, Any]:
    """The ``online`` object of the schema (without a histogram: no per-position fields)."""
    if res.stats is not None:
        out = acceptance_json(res.stats, c)
    else:
        out = {
            "cycles": res.verify_ct,
            "tokens_emitted": res.verify_ct + res.correct_drafts,
            "accept_length": res.accept_length,
            "alpha": implied_speedup(res.accept_length, gamma, c).alpha,
            "position_acceptance": None,
            "position_reach": None,
            "accepted_histogram": None,
            "speedup": speedup_json(implied_speedup(res.accept_length, gamma, c)),
        }
    out.update(
        requests=res.requests,
        completion_tokens=res.completion_tokens,
        verify_ct=res.verify_ct,
        correct_drafts=res.correct_drafts,
        meta_accept_length=res.meta_accept_length,
        server_info_avg_accept_length=res.server_info_avg_accept_length,
        metrics_spec_accept_length=res.metrics_spec_accept_length,
        elapsed_s=round(res.elapsed_s, 3),
    )
    return out


# --------------------------------------------------------------------------- output
def _fmt_list(xs: Sequence[float] | None) -> str:
    return " ".join(f"{x:.3f}" for x in xs) if xs else "-"


def format_table(report: dict[str, Any]) -> str:
    """A short fixed-width summary of an ``eval.json`` document."""
    p, d = report["prompts"], report["drafting"]
    g = d["gamma"]
    head = (
        f"{p['count']} held-out prompts ({p['split']}, {p['chat']} chat, seed {p['seed']}), "
        f"max_new_tokens {p['max_new_tokens']}; gamma {g} (topk {d['topk']}, "
        f"{d['num_draft_tokens']} draft tokens); c {report['c']:g}"
    )
    cols = (
        f"{'T':>4}  {'source':<7} {'cycles':>6} {'tau':>6} {'alpha':>6}  "
        f"{'accept/pos':<{6 * g}} {'reach/pos':<{6 * g}} "
        f"{f'S({g})':>6} {'g*':>3} {'S(g*)':>6}"
    )
    lines = [head, cols]
    for run in report["runs"]:
        for source in ("offline", "online"):
            a = run.get(source)
            if a is None:
                continue
            s = a["speedup"]
            lines.append(
                f"{run['temperature']:>4g}  {source:<7} {a['cycles']:>6d} "
                f"{a['accept_length']:>6.3f} {a['alpha']:>6.3f}  "
                f"{_fmt_list(a['position_acceptance']):<{6 * g}} "
                f"{_fmt_list(a['position_reach']):<{6 * g}} "
                f"{s['speedup_at_gamma']:>6.3f} {s['gamma_opt']:>3d} {s['speedup_max']:>6.3f}"
            )
            if source == "online":
                extra = [f"meta completion/verify {a['meta_accept_length']:.3f}"]
                if a["server_info_avg_accept_length"] is not None:
                    extra.append(
                        f"/server_info avg (lifetime) {a['server_info_avg_accept_length']:.3f}"
                    )
                if a["metrics_spec_accept_length"] is not None:
                    extra.append(
                        f"sglang:spec_accept_length {a['metrics_spec_accept_length']:.3f}"
                    )
                lines.append("      " + "; ".join(extra))
    return "\n".join(lines)


def write_plot(report: dict[str, Any], path: Path) -> None:
    """``acceptance.png``: left, per-position reach (bars) and conditional acceptance (dots)
    for every (temperature, source); right, the implied S(g) curves, optimum marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [
        (f"T={run['temperature']:g} {src}", run[src])
        for run in report["runs"]
        for src in ("offline", "online")
        if run.get(src) is not None
    ]
    gamma = report["drafting"]["gamma"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / max(1, len(series))
    for i, (label, a) in enumerate(series):
        xs = [k + 1 + (i - (len(series) - 1) / 2) * width for k in range(gamma)]
        if a["position_reach"] is not None:
            bars = ax1.bar(
                xs, a["position_reach"], width, label=f"{label} (tau {a['accept_length']:.2f})"
            )
            ax1.plot(xs, a["position_acceptance"], "o", color=bars.patches[0].get_facecolor())
        s = a["speedup"]
        gs = [r["gamma"] for r in s["table"]]
        line = ax2.plot(gs, [r["speedup"] for r in s["table"]], label=label)[0]
        ax2.plot([s["gamma_opt"]], [s["speedup_max"]], "*", ms=10, color=line.get_color())
    ax1.set_xticks(range(1, gamma + 1))
    ax1.set_xlabel("draft position k")
    ax1.set_ylabel("P(draft k accepted)  (bars)\nP(k accepted | 1..k-1 accepted)  (dots)")
    ax1.set_ylim(0, 1.05)
    ax1.set_title("acceptance per draft position")
    ax1.legend(fontsize=7)
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.axvline(gamma, color="grey", lw=0.8, ls=":")
    ax2.set_xlabel("draft length gamma")
    ax2.set_ylabel("S(gamma) = E[tau] / (c gamma + 1)")
    ax2.set_title(f"implied speedup, c = {report['c']:g} (star: optimum)")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- command
def add_eval_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``specgate drafter eval``."""
    drafter = subparsers.add_parser("drafter", help="drafter evaluation")
    sub = drafter.add_subparsers(dest="drafter_command", metavar="{eval}", required=True)
    p = sub.add_parser(
        "eval",
        help="acceptance per position, tau, alpha and implied S(gamma), offline and online",
        description=(
            "Measure a drafter's acceptance per draft position, mean accepted length tau, "
            "alpha and the implied S(gamma): offline with the verifier, online from SGLang's "
            "own accounting (--url or --launch). Writes OUT/eval.json and OUT/acceptance.png."
        ),
    )
    p.add_argument("--target", default="models/tiny-llama", help="target model directory")
    p.add_argument("--draft", default="models/tiny-llama-eagle3", help="EAGLE-3 draft directory")
    online = p.add_mutually_exclusive_group()
    online.add_argument("--url", default=None, help="running SGLang speculative pool to measure")
    online.add_argument(
        "--launch", action="store_true", help="start an SGLang CPU EAGLE3 pool, measure, stop it"
    )
    p.add_argument(
        "--temperature",
        type=float,
        action="append",
        default=None,
        help="sampling temperature, repeatable (default 0 = greedy; 1 for the sampled figure)",
    )
    p.add_argument(
        "--gamma",
        type=int,
        default=None,
        help="draft steps per cycle (default: the server's speculative_num_steps, else 3)",
    )
    p.add_argument("--prompts", type=int, default=64, help="held-out prompts (default 64)")
    p.add_argument("--prompt-tokens", type=int, default=48, help="tokens per prompt")
    p.add_argument("--max-new-tokens", type=int, default=96, help="tokens generated per prompt (default 96)")
    p.add_argument("--seed", type=int, default=0, help="prompt choice and offline sampling")
    p.add_argument(
        "--c",
        type=float,
        default=DEFAULT_C,
        help=f"relative drafter cost for the implied S(gamma) (default {DEFAULT_C})",
    )
    p.add_argument("--no-offline", action="store_true", help="skip the offline simulation")
    p.add_argument("--out", default="drafter-eval", help="output directory (default drafter-eval)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per online request")
    p.set_defaults(func=_run_eval)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _run_eval(args: argparse.Namespace) -> int:
    try:
        return _evaluate(args)
    except (EvalError, ValueError, OSError) as exc:
        print(f"specgate drafter eval: error: {exc}", file=sys.stderr)
        return 2


def _evaluate(args: argparse.Namespace) -> int:
    temps = args.temperature if args.temperature else [0.0]
    if any(t < 0 or not math.isfinite(t) for t in temps) or len(set(temps)) != len(temps):
        raise EvalError(f"--temperature values must be distinct and >= 0, got {temps}")
    if args.c < 0 or not math.isfinite(args.c):
        raise EvalError(f"--c must be >= 0, got {args.c}")
    if args.prompts < 1 or args.max_new_tokens < 2 or (args.gamma is not None and args.gamma < 1):
        raise EvalError("--prompts >= 1, --max-new-tokens >= 2 and --gamma >= 1 are required")
    if args.no_offline and not (args.url or args.launch):
        raise EvalError("--no-offline needs --url or --launch")
    for path in (args.target, args.draft):
        if not (Path(path) / "config.json").exists():
            raise EvalError(f"{path}: no config.json (build the models with `make models`)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import httpx
    from transformers import AutoTokenizer

    from drafters.eagle3.data import make_prompts
    from drafters.eagle3.evaluate import PROMPT_SOURCE

    tok = AutoTokenizer.from_pretrained(args.target)
    held = make_prompts(tok, "heldout", args.prompts, args.seed, prompt_tokens=args.prompt_tokens)
    runs = [{"temperature": float(t), "offline": None, "online": None} for t in temps]
    server_doc: dict[str, Any] | None = None
    with httpx.Client(timeout=httpx.Timeout(args.timeout, connect=10.0)) as client:
        gamma = args.gamma
        url = args.url.rstrip("/") if args.url else None
        if url is not None:  # its draft length decides the offline one
            server_doc = _server_doc(client, url, gamma, launched=False)
            gamma = server_doc["speculative_num_steps"]
        gamma = gamma or 3
        if not args.no_offline:  # before --launch starts a server (an idle one burns a core)
            for run in runs:
                run["offline"] = _offline(args, gamma, run["temperature"])
        if url is not None:
            _online(args, client, url, gamma, [p.ids for p in held], runs)
        elif args.launch:
            from serving.local import (
                SGLangProcess,
                SGLangStartError,
                cpu_env,
                cpu_launch_args,
                free_port,
            )

            port = free_port()
            server = SGLangProcess(
                cpu_launch_args(args.target, port=port, extra_args=launch_args(args.draft, gamma)),
                port=port,
                env=cpu_env(),
                log_path=out / "sglang.log",
            )
            _log(f"starting SGLang (EAGLE3, topk 1, {gamma} steps) on {server.base_url} ...")
            try:
                server.start(ready_timeout_s=600.0)
                _log(f"SGLang ready after {server.ready_after_s:.0f} s")
                server_doc = _server_doc(client, server.base_url, gamma, launched=True)
                _online(args, client, server.base_url, gamma, [p.ids for p in held], runs)
            except SGLangStartError as exc:
                raise EvalError(f"SGLang did not start: {exc}") from exc
            finally:
                server.stop()

    report = {
        "schema": SCHEMA,
        "target": str(args.target),
        "draft": str(args.draft),
        "prompts": {
            "source": PROMPT_SOURCE,
            "split": "heldout",
            "count": len(held),
            "chat": sum(p.chat for p in held),
            "seed": args.seed,
            "prompt_tokens": args.prompt_tokens,
            "max_new_tokens": args.max_new_tokens,
        },
        "drafting": {"gamma": gamma, "topk": 1, "num_draft_tokens": gamma + 1},
        "c": float(args.c),
        "server": server_doc,
        "runs": runs,
    }
    (out / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
    write_plot(report, out / "acceptance.png")
    print(format_table(report))
    print(f"wrote {out / 'eval.json'} and {out / 'acceptance.png'}")
    return 0


def _server_doc(client: Any, url: str, gamma: int | None, *, launched: bool) -> dict[str, Any]:
    """The ``server`` object of the schema; checks the server's draft length against gamma."""
    cfg = server_speculative_config(_get_json(client, f"{url}/server_info"))
    steps = cfg["speculative_num_steps"]
    if gamma is not None and steps != gamma:
        raise EvalError(f"--gamma {gamma} but the server drafts {steps} steps")
    if cfg["speculative_eagle_topk"] != 1 or cfg["speculative_num_draft_tokens"] != steps + 1:
        _log(
            f"note: the server drafts a tree (topk {cfg['speculative_eagle_topk']}, "
            f"{cfg['speculative_num_draft_tokens']} draft tokens); the offline figures "
            "simulate a chain (topk 1)"
        )
    return {"url": url, "launched": launched, **cfg}


def _offline(args: argparse.Namespace, gamma: int, temperature: float) -> dict[str, Any]:
    """The ``offline`` object of one run."""
    from drafters.eagle3.evaluate import offline_counts, result_from_run

    t0 = time.monotonic()
    off = offline_counts(
        args.target,
        args.draft,
        prompts=args.prompts,
        gamma=gamma,
        temperature=temperature,
        max_new_tokens=args.max_new_tokens,
        prompt_tokens=args.prompt_tokens,
        seed=args.seed,
    )
    stats = acceptance_from_counts([a for r in off.counts for a in r], gamma)
    summary = result_from_run(off)
    _log(
        f"offline T={temperature:g}: tau {stats.accept_length:.3f} over {stats.cycles} cycles "
        f"({time.monotonic() - t0:.0f} s)"
    )
    return {
        **acceptance_json(stats, args.c),
        "code_accept_length": summary.code_accept_length,
        "chat_accept_length": summary.chat_accept_length,
    }


def _online(
    args: argparse.Namespace,
    client: Any,
    url: str,
    gamma: int,
    prompts: list[Sequence[int]],
    runs: list[dict[str, Any]],
) -> None:
    """Fill the ``online`` object of every run (one temperature after the other)."""
    for run in runs:
        t = run["temperature"]
        res = measure_online(
            client, url, prompts, temperature=t, max_new_tokens=args.max_new_tokens, gamma=gamma
        )
        run["online"] = online_json(res, gamma, args.c)
        _log(
            f"online  T={t:g}: tau {res.accept_length:.3f} over {res.verify_ct} cycles "
            f"({res.elapsed_s:.0f} s)"
        )
