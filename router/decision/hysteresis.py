"""The pure hysteresis steps the runtime advances once per scrape round (the policy reads
their results as snapshot flags): saturation, acceptance and the prediction fallback.

Each is a function of the previous state and the new signal, no I/O, no clock; the saturation
and acceptance steps feed :class:`router.decision.bypass.BypassState`, the prediction fallback
:class:`router.decision.prediction_check.PredictionCheck` (``Runtime.advance_checks``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from router.config.routing import PredictionCheckConfig
    from router.decision.prediction_check import PredictionCheck

__all__ = ["advance_prediction_check", "expected_speedup", "next_low_acceptance", "next_prediction_fallback",
           "next_saturated"]


def next_saturated(previous: bool, load: int, *, enter: int, exit: int) -> bool:
    """Saturation hysteresis: on at ``load >= enter``, off at ``load < exit``, else unchanged.

    Args:
        previous: the current bypass state.
        load: the pool's load (requests running + queued, or in flight).
        enter: ``routing.saturation.enter``; exit: ``routing.saturation.exit`` (< enter).
    """
    if load >= enter:
        return True
    if load < exit:
        return False
    return previous


def expected_speedup(accept_length: float, *, gamma: int, c: float) -> float:
    """Expected speedup S = tau / (c * gamma + 1) from a measured mean accept length tau.

    tau is SGLang's ``spec_accept_length`` (tokens emitted per verify step, bonus included);
    gamma the draft length (tokens); c the drafter's relative cost (Leviathan et al. 2023,
    arXiv:2211.17192, section 3.2).
    """
    return accept_length / (c * gamma + 1.0)


def next_low_acceptance(previous: bool, accept_length: float | None, *, gamma: int, c: float,
                        enter_below: float, exit_above: float) -> bool:
    """Acceptance hysteresis on the expected speedup.

    A missing, stale or zero accept length is *unknown* (the SGLang gauge refreshes every 40
    decode steps, and a bypassed pool decodes nothing): unknown turns the bypass off so the
    pool is measured again, never on.
    """
    if accept_length is None or accept_length <= 0:
        return False
    speedup = expected_speedup(accept_length, gamma=gamma, c=c)
    if speedup < enter_below:
        return True
    if speedup >= exit_above:
        return False
    return previous


def next_prediction_fallback(previous: bool, error: float | None, checks: int, *, enter: float, exit: float,
                             min_checks: int) -> bool:
    """Prediction-fallback hysteresis for one pool (:mod:`router.decision.prediction_check`).

    Args:
        previous: the current state.
        error: the pool's median relative error over its recent checks (None: none).
        checks: how many recent checks ``error`` is over.
        enter, exit: ``routing.learning.check.fallback_enter`` / ``fallback_exit`` (exit < enter).
        min_checks: ``routing.learning.check.min_checks``.

    Returns:
        On when ``error >= enter`` over at least ``min_checks`` checks; off when ``error <
        exit``, or when fewer than ``min_checks`` recent checks are left (the model gets its
        chance again: a pool the fallback stopped feeding is measured anew); else ``previous``.
    """
    if error is None or checks < min_checks:
        return False
    if error >= enter:
        return True
    if error < exit:
        return False
    return previous


def advance_prediction_check(check: PredictionCheck, cfg: PredictionCheckConfig,
                             now: float) -> tuple[bool, float | None, int]:
    """One scrape round's step of a pool's checks (the router's ``Runtime.advance_checks`` and
    the day simulator's alike): refresh its measured cells and their corrections
    (:meth:`~router.decision.prediction_check.PredictionCheck.corrections`), then move its fallback state by
    :func:`next_prediction_fallback` (``cfg``: ``routing.learning.check``; disabled: off).

    Returns:
        ``(changed, median relative error, recent checks)``; on a change ``fallback_since`` is
        ``now`` and a turn-on counts in ``fallbacks``.
    """
    check.measured = check.measured_cells(now)
    check.correction = check.corrections(now)
    check.measured_factor = check.corrections(now, band=0.0)
    error, checks = check.error(now)
    new = cfg.enabled and next_prediction_fallback(check.fallback, error, checks, enter=cfg.fallback_enter,
                                                   exit=cfg.fallback_exit, min_checks=cfg.min_checks)
    if new == check.fallback:
        return False, error, checks
    check.fallback, check.fallback_since = new, now
    check.fallbacks += new
    return True, error, checks

