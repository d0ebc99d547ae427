"""Forms of the speed model, behind one interface, so they can be compared on held-out epochs. Pure.

Every form turns the same observations (full epochs per second at (workers, servers)) into a fitted model with
`epochs_per_s(w, s)`, `epoch_time_s(w, s)` and `to_dict()`. `FORMS` names them; `CHOSEN_FORM` is the one the
policy uses (`fit_chosen`), chosen by benchmarks/fit_accuracy.py on measured LeNet and ResNet-18 epochs (its
current figures are in benchmarks/results.md).

The forms:
- `quadratic`: the thesis's concave quadratic in speed, coach.estimates.speed.fit_speed.
- `optimus`: Optimus's step time theta0*B/w + theta1 + theta2*w/s + theta3*w + theta4*s with non-negative
  thetas. Coach keeps the per-worker batch b fixed (global batch B = b*w), so an epoch is N/(b*w) steps and
  its time is t = c1/w + c2/s + c3 + c4*s/w (c1 = N*(theta0*b + theta1)/b: B/w and 1 cannot be told apart
  when B/w is constant; c2, c3, c4 from theta2, theta3, theta4). Linear in the c's, all >= 0.
- `comm`: compute shared by the workers, traffic per server growing with the workers, and a fixed part:
  t = a/w + b*w/s + c.
- `levels`: no functional form: log epoch time is additive in a per-level effect of each axis, interpolated
  linearly between observed levels and held flat beyond them (no gain is predicted that was not measured).

The linear forms are fitted by non-negative least squares on the *relative* residual (predicted / measured
epoch time - 1, times sqrt(weight)), so a slow and a fast configuration count alike. Their documented rule for
data that cannot identify a term: terms are taken in the form's order (the constant first) and a term whose
column is a linear combination of the terms already taken, over the observed (w, s), is dropped (coefficient
0, listed in `fixed`). So one point gives a constant time, and an axis with one level is flat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np
from scipy.optimize import nnls

from coach.estimates.speed import MIN_EPOCHS_PER_S, SpeedObservation, check_observations, fit_speed

#: The terms a linear epoch-time form may use, by name: each a function of (workers, servers).
TERMS: Mapping[str, Callable[[float, float], float]] = {
    "1": lambda w, s: 1.0,
    "1/w": lambda w, s: 1.0 / w,
    "1/s": lambda w, s: 1.0 / s,
    "s/w": lambda w, s: s / w,
    "w/s": lambda w, s: w / s,
    "w": lambda w, s: float(w),
    "s": lambda w, s: float(s),
}
# A column whose least-squares residual on the columns before it is below this fraction of its norm adds
# nothing the data can tell apart.
_DEPENDENT = 1e-9


class SpeedModel(Protocol):
    """What the policy needs of a fitted speed model."""

    @property
    def observations(self) -> int: ...  # observations behind the fit

    def epochs_per_s(self, workers: int, servers: int) -> float: ...

    def epoch_time_s(self, workers: int, servers: int) -> float: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class SpeedForm:
    name: str
    formula: str  # human-readable, for reports
    fit: Callable[[Sequence[SpeedObservation]], SpeedModel]


def _speed_of(epoch_time_s: float) -> float:
    """Epochs per second for a predicted epoch time, floored at MIN_EPOCHS_PER_S like the quadratic."""
    if not (math.isfinite(epoch_time_s) and epoch_time_s > 0):
        return MIN_EPOCHS_PER_S  # no usable prediction: assume no progress, never infinite speed
    return max(1.0 / epoch_time_s, MIN_EPOCHS_PER_S)


# ------------------------------------------------------------------------------------------- linear forms

@dataclass(frozen=True)
class TimeFit:
    """Epoch time as a non-negative sum of terms: t(w, s) = sum of coefficient * term(w, s), seconds."""

    form: str
    terms: tuple[str, ...]  # names in TERMS
    coefficients: tuple[float, ...]  # seconds per unit of each term, >= 0
    observations: int
    rms_error: float  # weighted root mean square relative error of the fitted epoch times
    fixed: tuple[str, ...]  # terms the data could not identify, set to 0
    notes: tuple[str, ...]

    def epoch_time_s(self, workers: float, servers: float) -> float:
        return 1.0 / self.epochs_per_s(workers, servers)

    def epochs_per_s(self, workers: float, servers: float) -> float:
        time_s = sum(c * TERMS[t](workers, servers) for t, c in zip(self.terms, self.coefficients) if c)
        return _speed_of(time_s)

    def to_dict(self) -> dict[str, Any]:
        return {"form": self.form, "epoch_time_terms_s": dict(zip(self.terms, self.coefficients)),
                "observations": self.observations, "rms_error": self.rms_error, "fixed": list(self.fixed),
                "notes": list(self.notes)}


def fit_time_terms(form: str, terms: Sequence[str], observations: Sequence[SpeedObservation]) -> TimeFit:
    """Non-negative least squares on relative residuals; unidentifiable terms dropped (module docstring)."""
    obs = check_observations(observations)
    time_s = np.array([1.0 / o.epochs_per_s for o in obs])
    sqrt_weight = np.sqrt(np.array([float(o.weight) for o in obs]))
    row_scale = sqrt_weight / time_s
    kept: list[str] = []
    fixed: list[str] = []
    for term in terms:
        column = np.array([TERMS[term](o.workers, o.servers) for o in obs])
        if kept:
            basis = np.column_stack([np.array([TERMS[k](o.workers, o.servers) for o in obs]) for k in kept])
            residual = column - basis @ np.linalg.lstsq(basis, column, rcond=None)[0]
        else:
            residual = column
        if np.linalg.norm(residual) <= _DEPENDENT * max(float(np.linalg.norm(column)), 1.0):
            fixed.append(term)
        else:
            kept.append(term)
    design = np.column_stack([np.array([TERMS[k](o.workers, o.servers) for o in obs]) for k in kept])
    solution, _ = nnls(design * row_scale[:, None], time_s * row_scale)
    values = dict(zip(kept, (float(x) for x in solution)))
    coefficients = tuple(values.get(term, 0.0) for term in terms)
    relative = (design @ solution) / time_s - 1.0
    weight = sqrt_weight**2
    rms = float(math.sqrt(float(np.sum(weight * relative**2) / np.sum(weight))))
    notes = tuple(f"term {t}: not identified by the observed counts (a combination of {', '.join(kept)}): 0"
                  for t in fixed)
    return TimeFit(form=form, terms=tuple(terms), coefficients=coefficients, observations=len(obs),
                   rms_error=rms, fixed=tuple(fixed), notes=notes)


OPTIMUS_TERMS = ("1", "1/w", "1/s", "s/w")
COMM_TERMS = ("1", "1/w", "w/s")


def fit_optimus(observations: Sequence[SpeedObservation]) -> TimeFit:
    return fit_time_terms("optimus", OPTIMUS_TERMS, observations)


def fit_comm(observations: Sequence[SpeedObservation]) -> TimeFit:
    return fit_time_terms("comm", COMM_TERMS, observations)


# ------------------------------------------------------------------------------------------- levels form

@dataclass(frozen=True)
class LevelsFit:
    """log epoch time = mean + effect of the worker level + effect of the server level.

    Between observed levels an effect is interpolated linearly; beyond them it is the nearest level's.
    """

    worker_levels: tuple[float, ...]
    worker_effects: tuple[float, ...]  # log seconds, the lowest level 0
    server_levels: tuple[float, ...]
    server_effects: tuple[float, ...]
    log_time_s: float  # log seconds at the lowest levels
    observations: int
    rms_error: float  # weighted root mean square relative error of the fitted epoch times
    fixed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def epoch_time_s(self, workers: float, servers: float) -> float:
        return 1.0 / self.epochs_per_s(workers, servers)

    def epochs_per_s(self, workers: float, servers: float) -> float:
        log_time = (self.log_time_s + float(np.interp(workers, self.worker_levels, self.worker_effects))
                    + float(np.interp(servers, self.server_levels, self.server_effects)))
        return _speed_of(math.exp(log_time))

    def to_dict(self) -> dict[str, Any]:
        return {"form": "levels", "log_time_s": self.log_time_s,
                "worker_effects": dict(zip((f"{x:g}" for x in self.worker_levels), self.worker_effects)),
                "server_effects": dict(zip((f"{x:g}" for x in self.server_levels), self.server_effects)),
                "observations": self.observations, "rms_error": self.rms_error, "fixed": list(self.fixed),
                "notes": list(self.notes)}


def fit_levels(observations: Sequence[SpeedObservation]) -> LevelsFit:
    """Weighted least squares on log epoch time; the minimum-norm solution splits what the design confounds."""
    obs = check_observations(observations)
    w = np.array([float(o.workers) for o in obs])
    s = np.array([float(o.servers) for o in obs])
    log_time = np.log(np.array([1.0 / o.epochs_per_s for o in obs]))
    sqrt_weight = np.sqrt(np.array([float(o.weight) for o in obs]))
    w_levels, s_levels = np.unique(w), np.unique(s)
    columns = [np.ones_like(log_time)]
    columns += [(w == level).astype(float) for level in w_levels[1:]]
    columns += [(s == level).astype(float) for level in s_levels[1:]]
    design = np.column_stack(columns)
    effects = np.linalg.lstsq(design * sqrt_weight[:, None], log_time * sqrt_weight, rcond=None)[0]
    n_w = len(w_levels) - 1
    worker_effects = (0.0, *(float(e) for e in effects[1:1 + n_w]))
    server_effects = (0.0, *(float(e) for e in effects[1 + n_w:]))
    relative = np.exp(design @ effects - log_time) - 1.0
    weight = sqrt_weight**2
    rms = float(math.sqrt(float(np.sum(weight * relative**2) / np.sum(weight))))
    notes = tuple(f"{name}: 1 level ({levels[0]:g}): flat" for name, levels in
                  (("workers", w_levels), ("servers", s_levels)) if len(levels) == 1)
    return LevelsFit(worker_levels=tuple(float(x) for x in w_levels), worker_effects=worker_effects,
                     server_levels=tuple(float(x) for x in s_levels), server_effects=server_effects,
                     log_time_s=float(effects[0]), observations=len(obs), rms_error=rms, notes=notes)


# ------------------------------------------------------------------------------------------- registry

FORMS: Mapping[str, SpeedForm] = {
    "quadratic": SpeedForm("quadratic", "f = -b1 (w-b2)^2 - b3 (s-b4)^2 + b5 epochs/s", fit_speed),
    "optimus": SpeedForm("optimus", "t = c1/w + c2/s + c3 + c4 s/w, c >= 0", fit_optimus),
    "comm": SpeedForm("comm", "t = a/w + b w/s + c, a, b, c >= 0", fit_comm),
    "levels": SpeedForm("levels", "log t additive per level, interpolated, flat beyond", fit_levels),
}

#: The form the policy fits: the only one within 10% of held-out LeNet and ResNet-18 epochs when fitted on
#: calibration only (benchmarks/fit_accuracy.py; the figures are in benchmarks/results.md).
CHOSEN_FORM = "levels"


def fit_chosen(observations: Sequence[SpeedObservation]) -> SpeedModel:
    """The policy's speed model: the chosen form fitted on every observation so far."""
    return FORMS[CHOSEN_FORM].fit(observations)
