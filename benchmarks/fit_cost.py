"""Router CPU of the learning: ``SpeedFit.observe`` per finished request, seeded.

    .venv/bin/python benchmarks/fit_cost.py [--observations 5000] [--repeats 5] [--seed 0]

Builds ``--observations`` seeded observations of a speculative pool (prompts 200-20,000
tokens, outputs 20-400, batches 1-24, a measured accept length, a context bucket and a
temperature class each, durations from :func:`router.decision.predict.completion_s` with +-5% noise),
then feeds them to a fresh :class:`router.decision.learn.SpeedFit` from :data:`router.decision.learn.DEFAULT_PRIOR`
``--repeats`` times and prints the best run's ``time.process_time`` per observation
(microseconds): the per-request cost of the fit update, refits every
:data:`router.decision.learn.REFIT_EVERY` observations included. CPU time of this process only; run it
on a quiet machine and compare interleaved runs.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from router import DEFAULT_PRIOR, Observation, SpeedFit, SpeedModel, completion_s

TRUE = SpeedModel(decode_s_per_token=0.01, batch_knee=8.0, attention_s_per_token=1e-7, prefill_s_per_token=1e-4,
                  gamma=4, c=0.05)


def observations(n: int, seed: int) -> list[tuple[Observation, str]]:
    """``n`` seeded observations of :data:`TRUE` with their temperature class."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        p, m, b = rng.choice([200, 1000, 4000, 20000]), rng.randint(20, 400), rng.randint(1, 24)
        tau = rng.uniform(1.5, 3.5)
        y = completion_s(TRUE, batch=b, prompt_tokens=p, cached_tokens=0, output_tokens=m, accept_length=tau)
        out.append((Observation(p, 0, m, b, y * rng.uniform(0.95, 1.05), tau), rng.choice(["greedy", "sampled"])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--observations", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    obs = observations(args.observations, args.seed)
    prior = replace(DEFAULT_PRIOR, gamma=TRUE.gamma, c=TRUE.c)
    best = float("inf")
    for _ in range(args.repeats):
        fit = SpeedFit(prior)
        start = time.process_time()
        for i, (o, cls) in enumerate(obs):
            fit.observe(o, float(i), cls, measured=True)
        best = min(best, time.process_time() - start)
    print(f"SpeedFit.observe: {best / len(obs) * 1e6:.1f} us per observation "
          f"(best of {args.repeats}, {len(obs)} observations, seed {args.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
