"""Live acceptance per temperature class, from a gauge that goes stale while an engine idles.

SGLang's ``sglang:spec_accept_length`` (tau: tokens emitted per verify step, bonus included) is
the mean over the engine's whole batch, refreshed every ``decode_log_interval`` (40) decode
steps, and kept at its last value while nothing decodes. Greedy requests (temperature 0)
accept far more draft tokens than sampled ones on the same drafter (rejection sampling
accepts with ``min(1, p/q)``, Leviathan et al. 2023, arXiv:2211.17192, section 2.3), so one
pooled figure set by two sampled requests says nothing about greedy traffic, and a pool
bypassed on it never reports again. This module keeps what the gauge says true:

1. **A reading is an observation only when the engine decoded since the last one**:
   ``generation_tokens_total`` advanced since the previous scrape and either the gauge moved
   or at least ``refresh_tokens`` (40 verify steps' worth of tokens, ``40 * (gamma + 1)``) were
   generated since the last observation. A value that sits still on an idle engine is old
   news and is ignored.
2. **Per class.** The router knows the temperature class of every request it sent to the
   endpoint since the last observation (``f_g`` greedy, ``f_s = 1 - f_g`` sampled). Steps, not
   tokens, add up over a batch, so ``1 / tau_obs = f_g / tau_g + f_s / tau_s`` (tokens weighted
   by class), which is linear in ``x = (1/tau_g, 1/tau_s)``; each observation takes one
   normalised-LMS step ``x += w * r * f / |f|^2`` with ``r = 1/tau_obs - f . x`` and
   ``w = acceptance.weight``. A pure-class observation is an exponential average of that class.
   A class seen for the first time starts at the observed value; seen beside a class already
   known, it also takes that reading's LMS step alone (kept within ``tau >= 1``: a verify step
   emits at least one token) and the known estimate is left as it is. The class weights are
   request counts, not the verify steps each request had in the reading (a request carried
   from the last window may have had a few), so the LMS step on the first mixed reading of a
   class with no estimate put half of its residual on the known class: on the real CPU pools
   the first sampled reading (1.0-1.3) after greedy requests pulled the greedy estimate from
   2.2 to below break-even. Solving the reading for the new class instead
   (``x_new = (1/tau_obs - f_known x_known) / f_new``) doubled the gauge's noise into it (a
   sampled start of 4.1), which the next mixed step then put on greedy; the step on the new
   class alone goes half that way (``w``).
   The next window starts with the requests still running and those that ended since the
   previous scrape: the gauge moved at some instant before that scrape, and a request that
   ended in between decoded its last steps into the next reading (a sampled request's tail
   read as greedy made a greedy class look bad on the real CPU pools).
3. **LoRA adapters.** An adapter changes the target's distribution while the draft runs
   without it (sgl-project/sglang#28395, #34337), so the gauge over a batch that held adapter
   requests is not the base model's acceptance: a reading whose window held an adapter request
   (sent, running or ended since the previous reading) is dropped, not observed.
4. **Age.** A class's estimate is used for ``acceptance.max_age_s`` after the last observation
   it took part in; older, it is unknown: the decision then uses the pool's calibrated prior
   (predicted-time mode) or treats the pool as not bad (guard mode), so a bypassed pool gets
   traffic again and is measured again. The probe share this costs is bounded: one scrape
   interval of eligible requests per ``max_age_s`` while the drafter really is bad. An expired
   estimate is dropped, not blended: the class's next observation starts afresh.

State lives on one :class:`AcceptanceTracker` per endpoint, changed only on the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CLASSES", "AcceptanceTracker", "temperature_class"]

#: The temperature classes tracked (request field ``temperature == 0`` or ``top_k == 1``: greedy).
CLASSES = ("greedy", "sampled")


def temperature_class(doc: dict[str, object]) -> str:
    """``"greedy"`` when the request decodes greedily (``temperature`` 0, or SGLang's ``top_k``
    1), else ``"sampled"``; an absent temperature is sampled (OpenAI's default is 1, and so is
    SGLang's unless the model's generation config says otherwise)."""
    temperature = doc.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature == 0:
        return "greedy"
    top_k = doc.get("top_k")
    if top_k == 1 and not isinstance(top_k, bool):
        return "greedy"
    return "sampled"


@dataclass(slots=True)
class AcceptanceTracker:
    """One endpoint's per-class accept-length estimates (see the module docstring).

    Attributes:
        inverse: ``1 / tau`` per class (None until first observed).
        observed_at: monotonic time (s) of each class's last observation.
        window: requests sent per class since the last observation (the class mix).
        running: requests in flight per class (carried into the next window).
        ended: requests per class that ended since the previous scrape (also carried: the
            gauge may have moved before they ended, so their last steps count in the next one).
        adapter_window, adapter_running, adapter_ended: the same counts of LoRA-adapter
            requests (any class); a window with one is not an observation.
    """

    inverse: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(CLASSES))
    observed_at: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(CLASSES))
    window: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    running: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    ended: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    adapter_window: int = 0
    adapter_running: int = 0
    adapter_ended: int = 0
    _last_value: float | None = None
    _last_counter: float | None = None
    _tokens_since: float = 0.0

    def started(self, cls: str, adapter: bool = False) -> None:
        """A request of class ``cls`` was sent to the endpoint (``adapter``: with a LoRA adapter)."""
        self.window[cls] += 1
        self.running[cls] += 1
        if adapter:
            self.adapter_window += 1
            self.adapter_running += 1

    def finished(self, cls: str, adapter: bool = False) -> None:
        """A request of class ``cls`` ended."""
        self.running[cls] -= 1
        self.ended[cls] += 1
        if adapter:
            self.adapter_running -= 1
            self.adapter_ended += 1

    def scraped(self, value: float | None, counter: float | None, now: float, *, weight: float,
                refresh_tokens: float, running_reqs: int) -> bool:
        """Feed one scrape; returns True when it was an observation (estimates changed).

        Args:
            value: the gauge ``spec_accept_length`` (None or <= 0: unknown).
            counter: ``generation_tokens_total`` (None: not exported; then a reading counts
                only while the engine reports running requests).
            now: monotonic time (s).
            weight: the LMS step ``w`` in (0, 1].
            refresh_tokens: tokens after which an unchanged value still counts as re-measured.
            running_reqs: the engine's ``num_running_reqs``.
        """
        ended, self.ended = self.ended, dict.fromkeys(CLASSES, 0)
        adapter_ended, self.adapter_ended = self.adapter_ended, 0
        if counter is None:
            decoded, grew = running_reqs > 0, 0.0
        else:
            grew = 0.0 if self._last_counter is None else max(0.0, counter - self._last_counter)
            decoded = grew > 0
            self._last_counter = counter
        self._tokens_since += grew
        if not decoded or value is None or value <= 0:
            return False
        moved = value != self._last_value
        if not moved and counter is not None and self._tokens_since < refresh_tokens:
            return False
        self._last_value = value
        self._tokens_since = 0.0
        total = sum(self.window.values())
        if total == 0:
            return False
        if self.adapter_window:  # adapter traffic decoded in this reading: not the base model's
            self.window = {c: self.running[c] + ended[c] for c in CLASSES}
            self.adapter_window = self.adapter_running + adapter_ended
            return False
        frac = {c: self.window[c] / total for c in CLASSES}
        target = 1.0 / value
        new = [c for c in CLASSES if frac[c] > 0 and self.inverse[c] is None]
        if new and len(new) < sum(f > 0 for f in frac.values()):
            # A class seen for the first time beside a known one starts at the observed value
            # and takes the LMS step alone (kept within tau >= 1); the known estimate is left
            # as it is (see the module docstring).
            for c in new:
                self.inverse[c] = target
            residual = target - sum(frac[c] * (self.inverse[c] or 0.0) for c in CLASSES)
            norm = sum(f * f for f in frac.values())
            for c in new:
                self.inverse[c] = min(1.0, max(1e-3, target + weight * residual * frac[c] / norm))
                self.observed_at[c] = now
            self.window = {k: self.running[k] + ended[k] for k in CLASSES}
            self.adapter_window = self.adapter_running + adapter_ended
            return True
        for c in new:
            self.inverse[c] = target
        predicted = sum(frac[c] * (self.inverse[c] or 0.0) for c in CLASSES)
        residual = target - predicted
        norm = sum(f * f for f in frac.values())
        for c in CLASSES:
            if frac[c] > 0:
                inv = self.inverse[c] or target
                self.inverse[c] = max(1e-3, inv + weight * residual * frac[c] / norm)
                self.observed_at[c] = now
        self.window = {c: self.running[c] + ended[c] for c in CLASSES}
        self.adapter_window = self.adapter_running + adapter_ended
        return True

    def accept_length(self, cls: str, now: float, max_age_s: float) -> float | None:
        """The class's estimated tau if observed within ``max_age_s``, else None (unknown).

        An estimate found older than ``max_age_s`` is dropped: the class's next observation
        starts from the observed value, as a first one does, so a class bypassed on a bad
        reading is judged on the new measurement alone, not blended with the reading that made
        it bypassed (``observed_at`` is kept: :meth:`age_s` still says how old the last one is).
        """
        at, inv = self.observed_at[cls], self.inverse[cls]
        if at is None or inv is None:
            return None
        if now - at > max_age_s:
            self.inverse[cls] = None
            return None
        return 1.0 / inv

    def age_s(self, cls: str, now: float) -> float | None:
        """Seconds since the class was last observed (None: never)."""
        at = self.observed_at[cls]
        return None if at is None else now - at
