"""EAD's per-position sampling temperature (Yang et al., 2025, "Let it Calm: Exploratory Annealed Decoding for
Verifiable Reinforcement Learning", arXiv 2510.05251):

    tau_t = 1                                          for t < c   (the first generated tokens: a template)
    tau_t = max(1 + tau_max - exp(t / d), tau_min)     otherwise,

t the 0-based position of the token being generated, and a decay that grows with the training step s,
d_s = min(d0 + 5 s, 40000). The authors' sampler (yangalan123/EAD-RLVR, ``annealed_sampling.py``, mode "negexp")
divides t by 20 d_s, not by d_s: ``length_scale`` (default 20) is that factor, so ``decay`` is their ``decay_freq``
(25 in their run script, with c = 10, tau_max = 1.2, tau_min = 0.1, the defaults here); ``length_scale: 1`` gives the
formula as the paper prints it.

Config (``rollout.temperature_schedule``)::

    rollout:
      temperature_schedule: {start: 10, tau_max: 1.2, tau_min: 0.1, decay: 25}   # optional: length_scale: 20

The engine samples position t at ``rollout.temperature * tau_t`` (so tau_t itself at the default temperature 1; the
authors' logits processor runs before vLLM's own temperature the same way) and logs the behaviour log-probs at that
temperature; the trainer's target policy stays at ``rollout.temperature``, and decoupled truncated importance
sampling (``algo.tis_cap``) corrects for the difference. Greedy sampling (temperature 0) ignores the schedule.

The step enters through the schedule, resolved once per training step by its caller::

    schedule = TemperatureSchedule.from_config(cfg.rollout.temperature_schedule).at_step(step)
    SamplingParams(..., temperature_schedule=schedule)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from rlvr.errors import UserError

MAX_DECAY = 40000.0  # the cap of d_s (the paper; the authors' code caps decay_freq the same way)
DECAY_PER_STEP = 5.0  # d_s grows by 5 per training step (the paper; decay_freq_increase_factor in their code)
KEYS = ("start", "tau_max", "tau_min", "decay", "length_scale")


def ead_temperature(t: int, *, start: int, tau_max: float, tau_min: float, decay: float) -> float:
    """tau_t = 1 for t < start, else max(1 + tau_max - exp(t / decay), tau_min) (EAD, arXiv 2510.05251)."""
    if t < start:
        return 1.0
    x = t / decay
    if x > 700.0:  # exp overflows a float past ~709.78; the temperature has long reached its floor
        return float(tau_min)
    return max(1.0 + tau_max - math.exp(x), tau_min)


def step_decay(decay: float, step: int) -> float:
    """d_s = min(d0 + 5 s, 40000) (EAD's training-step-aware decay)."""
    return min(decay + DECAY_PER_STEP * max(int(step), 0), MAX_DECAY)


@dataclass(frozen=True)
class TemperatureSchedule:
    """EAD's schedule at one training step (module docstring). ``tau(t)`` is the temperature of position t."""

    start: int = 10
    tau_max: float = 1.2
    tau_min: float = 0.1
    decay: float = 25.0  # d0, in the authors' decay_freq units (see length_scale)
    length_scale: float = 20.0
    step: int = 0

    def at_step(self, step: int) -> "TemperatureSchedule":
        return replace(self, step=int(step))

    @property
    def effective_decay(self) -> float:
        """The d of tau_t = max(1 + tau_max - exp(t / d), tau_min) at this step: length_scale * d_s."""
        return self.length_scale * step_decay(self.decay, self.step)

    def tau(self, t: int) -> float:
        return ead_temperature(t, start=self.start, tau_max=self.tau_max, tau_min=self.tau_min,
                               decay=self.effective_decay)

    def taus(self, length: int) -> list[float]:
        return [self.tau(t) for t in range(length)]

    @classmethod
    def from_config(cls, raw: Any, where: str = "rollout.temperature_schedule") -> "TemperatureSchedule | None":
        """The schedule a config mapping describes (None for None); a bad value raises UserError naming the key."""
        if raw is None:
            return None
        if isinstance(raw, TemperatureSchedule):
            return raw
        if not isinstance(raw, dict):
            raise UserError(f"{where}: expected a mapping {{start, tau_max, tau_min, decay}}, got {raw!r}")
        unknown = sorted(set(map(str, raw)) - set(KEYS))
        if unknown:
            raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}; expected {', '.join(KEYS)}")
        values = {**{k: getattr(cls, k) for k in KEYS}, **raw}

        def number(key: str, *, integer: bool = False) -> float:
            v = values[key]
            ok = isinstance(v, int) if integer else isinstance(v, (int, float))
            if isinstance(v, bool) or not ok or not math.isfinite(v):
                kind = "an integer" if integer else "a number"
                raise UserError(f"{where}.{key}: expected {kind}, got {v!r}")
            return v

        start = int(number("start", integer=True))
        tau_max, tau_min = float(number("tau_max")), float(number("tau_min"))
        decay, length_scale = float(number("decay")), float(number("length_scale"))
        if start < 0:
            raise UserError(f"{where}.start: expected an integer >= 0 (positions kept at temperature 1), got {start}")
        if tau_min <= 0:
            raise UserError(f"{where}.tau_min: expected a temperature > 0, got {tau_min}")
        if tau_max < tau_min:
            raise UserError(f"{where}.tau_max: expected a temperature >= tau_min ({tau_min}), got {tau_max}")
        if decay <= 0 or length_scale <= 0:
            key = "decay" if decay <= 0 else "length_scale"
            raise UserError(f"{where}.{key}: expected a number > 0, got {values[key]!r}")
        return cls(start=start, tau_max=tau_max, tau_min=tau_min, decay=decay, length_scale=length_scale)


# Engines whose generate() varies the temperature per position; an engine that learns to adds its name here.
# vLLM does not: its per-request temperature is fixed, a logits processor would have to re-scale every position,
# and the log-probs it returns are taken before processors run, so they would not be the behaviour policy's.
ENGINES_WITH_SCHEDULE = frozenset({"hf"})


def temperature_schedule_problem(raw: Any, *, engine: str, tis_cap: float | None) -> str | None:
    """Why ``rollout.temperature_schedule`` cannot be used as configured, or None (also None when it is unset).

    The schedule must parse (``TemperatureSchedule.from_config``), the engine must vary its temperature per position
    (``ENGINES_WITH_SCHEDULE``), and the run needs ``algo.tis_cap``: the annealed sampler is a behaviour policy
    that differs from the trained one, which decoupled truncated importance sampling corrects (EAD, arXiv 2510.05251)."""
    if raw is None:
        return None
    try:
        TemperatureSchedule.from_config(raw)
    except UserError as exc:
        return str(exc)
    if engine not in ENGINES_WITH_SCHEDULE:
        return (f"rollout.temperature_schedule is not supported by rollout.engine={engine} (engines that anneal the "
                f"temperature per position: {', '.join(sorted(ENGINES_WITH_SCHEDULE))})")
    if tis_cap is None:
        return ("rollout.temperature_schedule needs algo.tis_cap (e.g. algo.tis_cap=2.0): the annealed sampler is a "
                "behaviour policy apart from the trained one, and truncated importance sampling corrects for it")
    return None
