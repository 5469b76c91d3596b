"""``specgate plan``: advise (and with ``--apply`` set) the split of N engines from the router's live window.

``specgate plan --router URL --engines N --once --json`` fetches ``GET /admin/plan/window``
(the router's admin key from ``--admin-key-file PATH`` or ``$SPECGATE_ADMIN_KEY``), predicts
every split (:func:`loadtests.plan.advise`) and prints one JSON object on standard output:
``{"advised": {"speculative": k, "plain": N - k}, "splits": [...], "window": {"requests": r,
"seconds": s, ...}, "metric", "current", "trusted", "untrusted_because", "model"}``.

Without ``--once`` it runs a round every ``--interval`` seconds (:class:`loadtests.planloop.PlanLoop`:
hysteresis, dwell, the cost of a change), prints one JSON line per round with ``--json``
(the advice plus ``"step"``), logs every change, and serves its metrics
(:class:`loadtests.planloop.PlanMetrics`) on ``--metrics-port``. With ``--apply`` the split is
the replicas of the two pools' Deployments, moved one engine at a time
(:class:`loadtests.plankube.PoolScaler`). ``--rounds`` bounds the loop (tests, drills).

Exit status: 0; 1 when the window cannot be read or predicted (``--once``); 2 on bad arguments
(argparse, a missing admin key).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from loadtests.planloop import HEDGE, LOOP_DEFAULTS

__all__ = ["add_commands", "fetch_window", "read_admin_key"]

log = logging.getLogger("specgate.plan")


def read_admin_key(path: str | None) -> str | None:
    """The admin key: the first line of ``path`` that is neither blank nor a ``#`` comment,
    else ``$SPECGATE_ADMIN_KEY``; None when neither gives one.

    Raises:
        OSError: ``path`` cannot be read.
    """
    if path:
        for line in Path(path).read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                return line.strip()
        return None
    return os.environ.get("SPECGATE_ADMIN_KEY") or None


def fetch_window(router: str, key: str, *, model: str | None = None, timeout_s: float = 10.0) -> dict[str, Any]:
    """The router's ``GET /admin/plan/window`` document.

    Raises:
        RuntimeError: the request failed or the answer is not 200 JSON (the router's error
            message quoted).
    """
    import httpx

    try:
        r = httpx.get(router.rstrip("/") + "/admin/plan/window", params={"model": model} if model else None,
                      headers={"Authorization": f"Bearer {key}"}, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise RuntimeError(f"cannot reach the router at {router}: {exc}") from None
    if r.status_code != 200:
        try:
            msg = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            msg = r.text[:200]
        raise RuntimeError(f"the router answered {r.status_code} to GET /admin/plan/window: {msg}")
    doc: dict[str, Any] = r.json()
    return doc


def _advise(args: argparse.Namespace, key: str) -> dict[str, Any]:
    from loadtests.plan import advise

    doc = fetch_window(args.router, key, model=args.model, timeout_s=args.timeout)
    return advise(doc, args.engines, metric=args.metric, max_error=args.max_error, seed=args.seed,
                  max_replay_error=args.max_replay_error, hedge=args.hedge)


def _text(advice: dict[str, Any]) -> str:
    lines = [f"{'split':<8} {'mean s':>8} {'p90 s':>8} {'goodput/s':>10} {'mean s if sampled':>18}"]
    for s in advice["splits"]:
        def f(v: Any, w: int = 8) -> str:
            return f"{v:>{w}.3f}" if isinstance(v, float) else f"{'-':>{w}}"
        lines.append(f"{s['speculative']}s+{s['plain']}p{'':<4} {f(s['predicted_mean_s'])} {f(s['predicted_p90_s'])} "
                     f"{f(s['predicted_goodput_rps'], 10)} {f(s.get('predicted_mean_s_if_sampled'), 18)}")
    a, w, h = advice["advised"], advice["window"], advice.get("hedge") or {}
    lines.append(f"advice: {a['speculative']} speculative + {a['plain']} plain engines (best {advice['metric']}; "
                 f"window {w['requests']} requests over {w['seconds']:.0f} s)")
    if h.get("safe") is not None:
        lines.append(f"hedge {h['factor']}: safe if the traffic turned sampled: "
                     f"{', '.join(str(k) for k in h['safe'])} speculative"
                     + (f" (without the hedge: {h['unhedged']})" if h["unhedged"] != a["speculative"] else ""))
    if not advice["trusted"]:
        lines.append("not trusted, not acted on: " + "; ".join(advice["untrusted_because"]))
    return "\n".join(lines)


def _once(args: argparse.Namespace, key: str) -> int:
    from loadtests.plan import PlanError

    try:
        advice = _advise(args, key)
    except (RuntimeError, PlanError) as exc:
        print(f"specgate plan: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(advice) if args.json else _text(advice), flush=True)
    return 0


def _loop(args: argparse.Namespace, key: str) -> int:
    from loadtests.plan import PlanError
    from loadtests.planloop import Hysteresis, PlanLoop, PlanMetrics

    h = Hysteresis(dwell_s=args.dwell_s, step_s=args.step_s, change_cost_s=args.change_cost_s,
                   min_gain=args.min_gain, reverse_gain=args.reverse_gain, sustained_gain=args.sustained_gain,
                   sustained_rounds=args.sustained_rounds, smooth_rounds=args.smooth_rounds,
                   retreat_ratio=args.retreat_ratio, retreat_rounds=args.retreat_rounds,
                   floor_speculative=args.floor_speculative, floor_plain=args.floor_plain)
    loop, metrics = PlanLoop(args.engines, h), PlanMetrics()
    scaler = _scaler(args) if args.apply else None
    if args.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port, addr=args.metrics_host, registry=metrics.registry)
    stop = threading.Event()
    rounds = 0
    while not stop.is_set() and (args.rounds is None or rounds < args.rounds):
        started = time.monotonic()
        rounds += 1
        _round(args, key, loop, metrics, scaler, PlanError)
        stop.wait(max(0.0, args.interval - (time.monotonic() - started)))
    return 0


def _round(args: argparse.Namespace, key: str, loop: Any, metrics: Any, scaler: Any, plan_error: type) -> None:
    """One round: fetch, advise, decide, apply; every failure is logged and counted."""
    from loadtests.plankube import ScaleError

    try:
        doc = fetch_window(args.router, key, model=args.model, timeout_s=args.timeout)
    except RuntimeError as exc:
        metrics.errors.labels("fetch").inc()
        log.warning("plan: %s", exc)
        return
    try:
        from loadtests.plan import advise

        advice = advise(doc, args.engines, metric=args.metric, max_error=args.max_error, seed=args.seed,
                        max_replay_error=args.max_replay_error, hedge=args.hedge)
    except plan_error as exc:
        metrics.errors.labels("predict").inc()
        log.warning("plan: no advice this round: %s", exc)
        return
    metrics.advice(advice)
    try:
        current = scaler.split()[0] if scaler is not None else advice["current"]["speculative"]
    except ScaleError as exc:
        metrics.errors.labels("apply").inc()
        log.warning("plan: %s", exc)
        return
    now = time.monotonic()
    step = loop.decide(loop.observe(advice), current, now)
    if not step.changed:
        loop.commit(step, now)
    else:
        if scaler is not None:
            try:
                scaler.move(step.moved_to - step.current)
            except ScaleError as exc:
                metrics.errors.labels("apply").inc()
                log.warning("plan: %s", exc)
                return
        loop.commit(step, now)
        log.warning("plan: change %d+%d -> %d+%d (%s; predicted gain %s on %s; advice %d+%d)", step.current,
                    args.engines - step.current, step.moved_to, args.engines - step.moved_to, step.outcome,
                    step.as_dict()["gain"], advice["metric"], advice["advised"]["speculative"],
                    advice["advised"]["plain"])
    metrics.step(step, args.engines, time.time())
    if args.json:
        print(json.dumps({**advice, "step": step.as_dict(), "applied": scaler is not None}), flush=True)


def _scaler(args: argparse.Namespace) -> Any:
    from loadtests.plankube import PoolScaler, ScaleTargets

    if not args.spec_deployment or not args.plain_deployment:
        raise SystemExit("specgate plan: --apply needs --spec-deployment and --plain-deployment")
    return PoolScaler(ScaleTargets(args.namespace, args.spec_deployment, args.plain_deployment, args.engines,
                                   args.floor_speculative, args.floor_plain), api_url=args.kube_api)


def _plan(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        key = read_admin_key(args.admin_key_file)
    except OSError as exc:
        print(f"specgate plan: cannot read --admin-key-file: {exc}", file=sys.stderr)
        return 2
    if key is None:
        print("specgate plan: no admin key (--admin-key-file PATH or $SPECGATE_ADMIN_KEY)", file=sys.stderr)
        return 2
    if args.engines < 1:
        print("specgate plan: --engines must be >= 1", file=sys.stderr)
        return 2
    return _once(args, key) if args.once else _loop(args, key)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``plan``."""
    p = sub.add_parser("plan", help="advise (and with --apply set) how many of N engines run speculative, "
                                    "from the router's live window of requests",
                       description="Predict every split of N engines between the speculative and the plain pool "
                                   "from the router's live window (GET /admin/plan/window) and advise one; without "
                                   "--once, a round every --interval seconds, with --apply moving engines one at a "
                                   "time by scaling the pools' Deployments.")
    p.add_argument("--router", required=True, help="the router's base URL (its admin API)")
    p.add_argument("--engines", type=int, required=True, help="N, the engines of the two pools together")
    p.add_argument("--admin-key-file", help="a file holding the router's admin key (else $SPECGATE_ADMIN_KEY)")
    p.add_argument("--model", help="the served model to plan for (default: the router's first)")
    p.add_argument("--metric", choices=("mean_s", "p90_s", "goodput_rps"), default="mean_s",
                   help="what the advice optimises (default mean_s)")
    p.add_argument("--max-error", type=float, default=0.3,
                   help="the largest median relative prediction error of a pool the advice trusts (default 0.3: "
                        "the router's routing.learning.check.fallback_exit)")
    p.add_argument("--max-replay-error", type=float, default=0.5,
                   help="the largest relative difference between the replay of the current split and what the "
                        "window's requests measured at it that the advice trusts (default 0.5)")
    p.add_argument("--hedge", type=float, default=HEDGE,
                   help="advise only splits whose --metric, were every request of the window sampled, is within "
                        f"1 + HEDGE of the best split's then (default {HEDGE}; inf: no hedge; doubles the replay's CPU)")
    p.add_argument("--once", action="store_true", help="one advice, then exit")
    p.add_argument("--json", action="store_true", help="print JSON (one object; one line per round in the loop)")
    p.add_argument("--seed", type=int, default=0, help="the simulator's seed")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds for each call to the router")
    loop = p.add_argument_group("the loop (without --once)")
    loop.add_argument("--interval", type=float, default=60.0, help="seconds between rounds (default 60)")
    loop.add_argument("--rounds", type=int, help="stop after this many rounds (default: run until stopped)")
    loop.add_argument("--dwell-s", type=float, default=LOOP_DEFAULTS.dwell_s,
                      help="seconds after a change before one in the other direction; the horizon a gain is "
                           "weighed over (default 1800)")
    loop.add_argument("--step-s", type=float, default=LOOP_DEFAULTS.step_s,
                      help="seconds after a change before the next engine moves (default 120)")
    loop.add_argument("--change-cost-s", type=float, default=LOOP_DEFAULTS.change_cost_s,
                      help="seconds an engine is out of service to change mode (default 300)")
    loop.add_argument("--min-gain", type=float, default=LOOP_DEFAULTS.min_gain,
                      help="the smallest predicted relative gain acted on (default 0.05)")
    loop.add_argument("--reverse-gain", type=float, default=LOOP_DEFAULTS.reverse_gain,
                      help="the predicted relative gain that reverses the last change before --dwell-s (default 0.2)")
    loop.add_argument("--sustained-gain", type=float, default=LOOP_DEFAULTS.sustained_gain,
                      help="a smaller gain acted on when --sustained-rounds rounds running predict it (default 0.02)")
    loop.add_argument("--sustained-rounds", type=int, default=LOOP_DEFAULTS.sustained_rounds, help="rounds running for --sustained-gain (default 3)")
    loop.add_argument("--smooth-rounds", type=int, default=LOOP_DEFAULTS.smooth_rounds,
                      help="the loop decides on each split's median prediction over this many rounds (default 3)")
    loop.add_argument("--retreat-ratio", type=float, default=LOOP_DEFAULTS.retreat_ratio,
                      help="leave the current split at once (past the median, an untrusted model and the dwell) "
                           "when its predicted and its measured seconds reach this many times the best split's "
                           "prediction in --retreat-rounds rounds running (default 1.5; inf: never)")
    loop.add_argument("--retreat-rounds", type=int, default=LOOP_DEFAULTS.retreat_rounds, help="rounds running for --retreat-ratio (default 2)")
    loop.add_argument("--floor-speculative", type=int, default=LOOP_DEFAULTS.floor_speculative, help="engines the speculative pool keeps")
    loop.add_argument("--floor-plain", type=int, default=LOOP_DEFAULTS.floor_plain, help="engines the plain pool keeps")
    loop.add_argument("--metrics-port", type=int, help="serve the planner's Prometheus metrics on this port")
    loop.add_argument("--metrics-host", default="0.0.0.0", help="the metrics server's address (default 0.0.0.0)")
    k8s = p.add_argument_group("--apply (Kubernetes)")
    k8s.add_argument("--apply", action="store_true",
                     help="move engines by scaling the two pools' Deployments (one engine at a time)")
    k8s.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "default"),
                     help="the Deployments' namespace (default $POD_NAMESPACE, else default)")
    k8s.add_argument("--spec-deployment", help="the speculative pool's Deployment")
    k8s.add_argument("--plain-deployment", help="the plain pool's Deployment")
    k8s.add_argument("--kube-api", help="the API server's URL (default: in-cluster, else the kubeconfig)")
    p.set_defaults(func=_plan)
