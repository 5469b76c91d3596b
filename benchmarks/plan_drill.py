"""The conversion drill's figures: ``specgate plan --apply`` on the fake Kubernetes API under traffic.

    PYTHONPATH=. .venv/bin/python benchmarks/plan_drill.py [--runs 1] [--rounds 3] [--window 24]
        [--clients 3] [--seed 38] [--startup-s 0.3]

Runs :func:`tests.support.plan_drill.run_drill` (real HTTP on loopback: the router discovering
both pools from a fake API server, step-driven fake SGLang pods, a controller that follows the
Deployments' replicas; the day of that module's docstring) and prints per run: the requests sent
by phase, mode and temperature class, the failed ones, the splits round by round, the scale
writes, the pods' transitions, the requests each converted pod still held when it turned
terminating, the ``plan: change`` log lines, the planner's change counters and the wall time.
Exit status 1 when a run lost a request or a pod was cut at its grace period.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from tests.support.plan_drill import run_drill
    from tests.support.tokenizer import make_test_tokenizer

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3, help="planner rounds per phase")
    p.add_argument("--window", type=int, default=24, help="the router's planner window (requests)")
    p.add_argument("--clients", type=int, default=3, help="concurrent client threads")
    p.add_argument("--seed", type=int, default=38)
    p.add_argument("--startup-s", type=float, default=0.3, help="a new pod's time to ready (s)")
    args = p.parse_args(argv)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = make_test_tokenizer(Path(tmp) / "tokenizer")
        for run in range(args.runs):
            work = Path(tmp) / f"run{run}"
            work.mkdir()
            started = time.monotonic()
            res = run_drill(work, tokenizer, rounds=args.rounds, window=args.window, clients=args.clients,
                            seed=args.seed + run, startup_s=args.startup_s)
            wall = time.monotonic() - started
            get = res.metrics.registry.get_sample_value
            print(f"run {run}: {sum(res.sent.values())} requests, {len(res.failures)} failed, "
                  f"{len(res.changes)} conversions, {wall:.1f} s wall")
            for kind, n in sorted(res.sent.items()):
                print(f"  sent {'/'.join(kind)}: {n}")
            for line in res.failures[:10]:
                print(f"  FAILED {line}")
            print("  splits (speculative, plain) before round 1 and after each:", res.splits)
            print("  scale writes:", res.scale_writes)
            print("  pods:", [f"{pool}:{ip}:{what}" for pool, ip, what in res.events])
            print("  in flight when terminating:", res.drains, "cut at grace:", res.killed)
            for line in res.changes:
                print("  log:", line)
            print("  specgate_plan_changes_total:", {r: get("specgate_plan_changes_total", {"reason": r})
                                                     for r in ("gain", "floor")})
            print("  router at the end (healthy):", {k: sorted(v) for k, v in res.healthy.items()})
            bad += bool(res.failures or res.killed)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
