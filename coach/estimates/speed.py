"""The speed surface: how fast a job trains with w workers and s parameter servers. Pure, no side effects.

This is the `quadratic` form of coach.estimates.speed_forms, which compares it with others on measured epochs and
names the form the policy uses.

The policy chooses worker and server counts by predicting epoch time, so it needs a model of speed that is
fitted from the few epochs a job has run. Like Optimus, speed is a concave quadratic in each count,

    f(w, s) = -b1 * (w - b2)**2 - b3 * (s - b4)**2 + b5        (full epochs per second; b1, b3 >= 0)

with b2 and b4 the worker and server counts beyond which more of them stop helping. A quadratic per axis needs
three distinct levels on that axis to identify both its curvature and its vertex, so the fit states explicitly
what it does with fewer (per axis, by the number of distinct levels observed):

- 1 level: the axis is flat: curvature 0, vertex at that level (b1 = 0, b2 = level; both in `fixed`).
- 2 levels (the calibration design w, s in {1, 2}): curvature and vertex cannot both be identified. The fitted
  difference d between the higher and the lower level in the additive main-effects model (each level of the
  other axis its own effect, least squares) decides: d > 0 (more helps) puts the vertex one step beyond the
  highest level (b2 = hi + 1: optimistic by one step, diminishing after); d <= 0 puts it at the lower level
  (b2 = lo). The curvature is then fitted (b1 >= 0) and b2 is in `fixed`. A third level, which real epochs at
  a new count provide, makes the axis identifiable.
- 3 or more levels: the vertex is fitted freely in [lo - 4, hi + 8] and nothing is fixed.

The fit is weighted least squares with these bounds, solved exactly as one bounded linear problem (see `_fit`:
a free vertex in [L, H] is the non-negative mix of two quadratics with vertices L and H), so it finds the global
optimum with no starting points or search and is deterministic. When a fitted curvature is 0 its vertex has no
effect and is reported at the mean observed level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence, TypeVar

import numpy as np
import numpy.typing as npt
from scipy.optimize import lsq_linear

# Predicted speed never drops below this, so that epoch times stay finite and positive far from the data.
MIN_EPOCHS_PER_S = 1e-9
# Free vertices are bounded to [lowest level - VERTEX_BELOW, highest level + VERTEX_ABOVE].
VERTEX_BELOW = 4.0
VERTEX_ABOVE = 8.0
# With two levels and speed rising, the vertex goes this many counts beyond the highest level.
VERTEX_STEP = 1.0

_COEFFICIENTS = ("b1", "b2", "b3", "b4", "b5")
_NO_DIFFERENCE = 1e-9  # a 2-level difference within this fraction of the fastest speed counts as none
_AT_BOUND = 1e-6  # a vertex this close (in counts) to its search bound is reported as at the bound

_Array = npt.NDArray[np.float64]  # one value per observation
_Counts = TypeVar("_Counts", float, _Array)  # one count, or one per observation


@dataclass(frozen=True)
class SpeedObservation:
    workers: int  # worker functions the epoch ran with
    servers: int  # parameter-server functions the epoch ran with
    epochs_per_s: float  # full-epoch equivalents per second (fraction q of the data in t s gives q / t)
    weight: float = 1.0  # weight of this observation in the least-squares fit (> 0)


@dataclass(frozen=True)
class SpeedFit:
    b1: float  # curvature along workers, (epochs/s) per worker**2, >= 0
    b2: float  # worker count of fastest speed (vertex), workers
    b3: float  # curvature along servers, (epochs/s) per server**2, >= 0
    b4: float  # server count of fastest speed (vertex), servers
    b5: float  # speed at the vertex, epochs/s
    observations: int  # how many observations it was fitted on
    rms_error: float  # weighted root mean square residual, epochs/s
    fixed: tuple[str, ...]  # coefficients not identified by the data, set by a documented rule instead
    notes: tuple[str, ...]  # one human-readable line per rule applied

    def epochs_per_s(self, workers: float, servers: float) -> float:
        """Predicted full epochs per second, floored at MIN_EPOCHS_PER_S (never <= 0)."""
        speed = _surface((self.b1, self.b2, self.b3, self.b4, self.b5), workers, servers)
        return max(float(speed), MIN_EPOCHS_PER_S) if math.isfinite(speed) else MIN_EPOCHS_PER_S

    def epoch_time_s(self, workers: float, servers: float) -> float:
        """Predicted seconds per full epoch."""
        return 1.0 / self.epochs_per_s(workers, servers)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (plain floats, ints, lists of strings)."""
        return {
            "form": "quadratic", "b1": self.b1, "b2": self.b2, "b3": self.b3, "b4": self.b4, "b5": self.b5,
            "observations": self.observations, "rms_error": self.rms_error,
            "fixed": list(self.fixed), "notes": list(self.notes),
        }


@dataclass(frozen=True)
class _Axis:
    """How one axis (workers or servers) enters the fit, decided from its distinct levels."""

    name: str  # "workers" or "servers"
    curvature: int  # index of its curvature in (b1, b2, b3, b4, b5)
    levels: tuple[float, ...]  # distinct levels observed, ascending
    curvature_free: bool  # False only for a flat (1-level) axis
    vertex: float | None  # the vertex when a rule sets it; None when fitted
    vertex_bounds: tuple[float, float]  # interval a fitted vertex must lie in, counts
    note: str | None  # the rule applied, if any

    @property
    def vertex_index(self) -> int:
        return self.curvature + 1


def check_observations(observations: Sequence[SpeedObservation]) -> list[SpeedObservation]:
    """The observations as a list, or ValueError naming the first bad one: every speed form refuses alike."""
    obs = list(observations)
    if not obs:
        raise ValueError("no speed observations to fit")
    for i, o in enumerate(obs):
        if not (isinstance(o.epochs_per_s, (int, float)) and math.isfinite(o.epochs_per_s) and o.epochs_per_s > 0):
            raise ValueError(f"observation {i}: epochs_per_s must be finite and > 0, got {o.epochs_per_s!r}")
        if not (isinstance(o.weight, (int, float)) and math.isfinite(o.weight) and o.weight > 0):
            raise ValueError(f"observation {i}: weight must be finite and > 0, got {o.weight!r}")
        if o.workers < 1 or o.servers < 1:
            raise ValueError(f"observation {i}: workers and servers must be >= 1, got {o.workers}, {o.servers}")
    return obs


def fit_speed(observations: Sequence[SpeedObservation]) -> SpeedFit:
    """Fit the speed surface to observed epochs; see the module docstring for the rules per axis.

    Raises ValueError on no observations, a speed or weight that is not finite and positive, or counts below 1.
    """
    obs = check_observations(observations)

    w = np.array([float(o.workers) for o in obs])
    s = np.array([float(o.servers) for o in obs])
    y = np.array([float(o.epochs_per_s) for o in obs])
    sqrt_weight = np.sqrt(np.array([float(o.weight) for o in obs]))

    # Fit in units of the fastest observation so that tolerances do not depend on the job's scale.
    scale = float(y.max())
    y_unit = y / scale

    # Differences within rounding of zero count as zero ("more does not help"), whatever their sign.
    d_workers, d_servers = (d if abs(d) > _NO_DIFFERENCE else 0.0
                            for d in _additive_differences(w, s, y_unit, sqrt_weight))
    axes = (_plan_axis("workers", 0, w, d_workers * scale), _plan_axis("servers", 2, s, d_servers * scale))

    params = _fit(axes, w, s, y_unit, sqrt_weight)
    params[[0, 2, 4]] *= scale

    residuals = _surface(params, w, s) - y
    weight = sqrt_weight**2
    rms_error = float(math.sqrt(float(np.sum(weight * residuals**2) / np.sum(weight))))

    fixed = []
    for axis in axes:
        if not axis.curvature_free:
            fixed.append(_COEFFICIENTS[axis.curvature])
        if axis.vertex is not None:
            fixed.append(_COEFFICIENTS[axis.vertex_index])
    notes = tuple(note for axis in axes for note in _notes(axis, params))
    b1, b2, b3, b4, b5 = (float(p) for p in params)
    return SpeedFit(b1=b1, b2=b2, b3=b3, b4=b4, b5=b5, observations=len(obs), rms_error=rms_error,
                    fixed=tuple(fixed), notes=notes)


def _surface(params: Sequence[float] | _Array, workers: _Counts, servers: _Counts) -> _Counts:
    b1, b2, b3, b4, b5 = params
    return -b1 * (workers - b2) ** 2 - b3 * (servers - b4) ** 2 + b5


def _additive_differences(w: _Array, s: _Array, y: _Array, sqrt_weight: _Array) -> tuple[float, float]:
    """Speed at the highest minus the lowest level of each axis, in the additive main-effects model.

    Each level of each axis gets its own effect (the lowest level is the reference), fitted by weighted least
    squares; the minimum-norm solution splits effects the design cannot tell apart (e.g. only w = s observed).
    """
    w_levels, s_levels = np.unique(w), np.unique(s)
    columns = [np.ones_like(y)]
    columns += [(w == level).astype(float) for level in w_levels[1:]]
    columns += [(s == level).astype(float) for level in s_levels[1:]]
    design = np.column_stack(columns) * sqrt_weight[:, None]
    effects = np.linalg.lstsq(design, y * sqrt_weight, rcond=None)[0]
    d_workers = float(effects[len(w_levels) - 1]) if len(w_levels) > 1 else 0.0
    d_servers = float(effects[-1]) if len(s_levels) > 1 else 0.0
    return d_workers, d_servers


def _plan_axis(name: str, curvature: int, counts: _Array, difference: float) -> _Axis:
    levels = tuple(float(level) for level in np.unique(counts))
    lo, hi = levels[0], levels[-1]
    bounds = (lo - VERTEX_BELOW, hi + VERTEX_ABOVE)
    b_c, b_v = _COEFFICIENTS[curvature], _COEFFICIENTS[curvature + 1]
    shown = ", ".join(_count(level) for level in levels)
    if len(levels) == 1:
        return _Axis(name, curvature, levels, curvature_free=False, vertex=lo, vertex_bounds=bounds,
                     note=f"{name}: 1 level ({shown}): flat, {b_c} = 0 and {b_v} = {_count(lo)}")
    if len(levels) == 2:
        if difference > 0:
            vertex = hi + VERTEX_STEP
            rule = f"more helps, {b_v} = highest + {_count(VERTEX_STEP)} = {_count(vertex)}"
        else:
            vertex = lo
            rule = f"more does not help, {b_v} = lowest = {_count(vertex)}"
        return _Axis(name, curvature, levels, curvature_free=True, vertex=vertex, vertex_bounds=bounds,
                     note=(f"{name}: 2 levels ({shown}), fitted difference {difference:+.6g} epochs/s: {rule}; "
                           f"{b_c} fitted; a third level would identify {b_v}"))
    return _Axis(name, curvature, levels, curvature_free=True, vertex=None, vertex_bounds=bounds, note=None)


def _notes(axis: _Axis, params: _Array) -> list[str]:
    notes = [axis.note] if axis.note else []
    if axis.vertex is not None:
        return notes
    b_c, b_v = _COEFFICIENTS[axis.curvature], _COEFFICIENTS[axis.vertex_index]
    curvature, vertex = params[axis.curvature], params[axis.vertex_index]
    lo, hi = axis.vertex_bounds
    if curvature == 0.0:
        notes.append(f"{axis.name}: {b_c} = 0 at its bound (the data are flat or convex along {axis.name}); "
                     f"{b_v} has no effect (set to the mean level)")
    elif vertex <= lo + _AT_BOUND:
        notes.append(f"{axis.name}: {b_v} at its lower bound {_count(lo)} (speed falls over the levels seen)")
    elif vertex >= hi - _AT_BOUND:
        notes.append(f"{axis.name}: {b_v} at its upper bound {_count(hi)} (speed still rises at the highest level)")
    return notes


def _count(value: float) -> str:
    return f"{value:g}"


def _fit(axes: tuple[_Axis, _Axis], w: _Array, s: _Array, y: _Array, sqrt_weight: _Array) -> _Array:
    """All five coefficients, in units of y: one bounded linear least-squares problem, solved exactly.

    An axis with a fixed vertex v contributes one column -(x - v)**2 with a coefficient >= 0. An axis with a
    free vertex in [L, H] contributes two, -(x - L)**2 and -(x - H)**2, with coefficients l1, l2 >= 0: their sum
    is -(l1 + l2) * (x - v)**2 + k with v = (l1 L + l2 H) / (l1 + l2) and k = (l1 + l2) v**2 - l1 L**2 - l2 H**2,
    which is every concave quadratic with its vertex in [L, H]. So the global least-squares optimum over
    b1, b3 >= 0 and vertices within their bounds needs no starting points and no search.
    """
    counts = {0: w, 2: s}
    columns, owners = [], []  # owners[i]: (axis, vertex of column i)
    for axis in axes:
        if not axis.curvature_free:
            continue
        for vertex in ((axis.vertex,) if axis.vertex is not None else axis.vertex_bounds):
            columns.append(-((counts[axis.curvature] - vertex) ** 2))
            owners.append((axis, vertex))
    columns.append(np.ones_like(y))
    design = np.column_stack(columns)
    # Scale columns to unit size for conditioning; positive scaling keeps the bounds as they are.
    column_scale = np.abs(design).max(axis=0)
    column_scale[column_scale == 0] = 1.0
    lower = [0.0] * len(owners) + [-np.inf]
    upper = [np.inf] * (len(owners) + 1)
    solution = lsq_linear(design / column_scale * sqrt_weight[:, None], y * sqrt_weight, bounds=(lower, upper),
                          method="bvls").x / column_scale

    params = np.zeros(5)
    params[4] = float(solution[-1])
    for axis in axes:
        mine = [(float(weight), vertex) for (owner, vertex), weight in zip(owners, solution) if owner is axis]
        curvature = sum(max(weight, 0.0) for weight, _ in mine)
        if axis.vertex is not None:
            vertex = axis.vertex
        elif curvature > 0:
            vertex = sum(max(weight, 0.0) * v for weight, v in mine) / curvature
            vertex = min(max(vertex, axis.vertex_bounds[0]), axis.vertex_bounds[1])
        else:
            vertex = float(np.mean(axis.levels))  # no curvature: the vertex has no effect
        params[axis.curvature] = curvature
        params[axis.vertex_index] = vertex
        # the constant k of the free-vertex form (0 for a fixed vertex: one column, curvature * (x - v)**2)
        params[4] += curvature * vertex**2 - sum(max(weight, 0.0) * v**2 for weight, v in mine)
    return params
