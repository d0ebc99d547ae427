"""The convergence curve: how many more epochs a job needs to reach its target loss. Pure, no side effects.

The policy spreads the remaining budget over the remaining epochs, so it needs a prediction of how many epochs
are left. Like Optimus, the loss after epoch k (1-based) follows

    loss(k) = 1 / (a * k + b) + c        (a, b, c >= 0; b kept above a tiny epsilon so a * k + b > 0)

fitted by bounded least squares from a few deterministic starting points. The fit needs MIN_EPOCHS_TO_FIT
finite, positive losses; before that, or when the fitted curve never reaches the target (target <= c), the
prediction falls back to the pessimistic bound max_epochs - done, so the budget per epoch is never
overestimated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

MIN_EPOCHS_TO_FIT = 3
FIT, FALLBACK = "fit", "fallback"

# Lower bound of b in units of the largest loss: keeps a * k + b > 0 when a = 0.
_B_MIN = 1e-9
# Starting values of c, as fractions of the smallest observed loss.
_C_STARTS = (0.0, 0.5, 0.9, 0.99)
# Whole-epoch rounding ignores this much floating-point excess (3.0000000001 epochs is 3).
_ROUNDING = 1e-9

_Array = npt.NDArray[np.float64]  # one value per epoch fitted, or the curve's (a, b, c)


@dataclass(frozen=True)
class ConvergenceFit:
    a: float  # how fast 1 / (loss - c) grows, per epoch
    b: float  # 1 / (loss - c) extrapolated to epoch 0
    c: float  # the loss the curve levels off at (unreachable below)
    epochs: int  # epochs fitted on (finite, positive losses)
    rms_error: float  # root mean square residual, loss units

    def loss_at(self, epoch: float) -> float:
        """Predicted loss after epoch `epoch` (1-based)."""
        return 1.0 / (self.a * epoch + self.b) + self.c

    def epochs_to_target(self, target_loss: float, done_epochs: int) -> float:
        """Further epochs after `done_epochs` until the predicted loss is <= target_loss (not rounded).

        The curve reaches the target at k = (1 / (target_loss - c) - b) / a; the answer is max(0, k - done).
        0 when the curve is already there; math.inf when target_loss <= c (the curve never gets there).
        """
        if target_loss <= self.c:
            return math.inf
        if self.loss_at(done_epochs) <= target_loss:
            return 0.0
        if self.a <= 0.0:
            return math.inf  # a flat curve above the target
        epoch = (1.0 / (target_loss - self.c) - self.b) / self.a
        return max(0.0, epoch - done_epochs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {"a": self.a, "b": self.b, "c": self.c, "epochs": self.epochs, "rms_error": self.rms_error}


@dataclass(frozen=True)
class RemainingEpochs:
    epochs: float  # predicted epochs still to run: >= 1 while done < max_epochs, <= max_epochs - done
    source: str  # FIT ("fit") or FALLBACK ("fallback": max_epochs - done)
    fit: ConvergenceFit | None  # the curve used, or None when there were too few epochs to fit


def fit_convergence(losses: Sequence[float]) -> ConvergenceFit | None:
    """Fit the curve to per-epoch losses (losses[i] is after epoch i + 1).

    Losses that are not finite and positive are left out (their epochs keep their numbers); None when fewer than
    MIN_EPOCHS_TO_FIT remain. Deterministic.
    """
    kept = [(i + 1, float(loss)) for i, loss in enumerate(losses)
            if isinstance(loss, (int, float)) and math.isfinite(loss) and loss > 0]
    if len(kept) < MIN_EPOCHS_TO_FIT:
        return None
    k = np.array([epoch for epoch, _ in kept], dtype=float)
    y = np.array([loss for _, loss in kept])

    # Fit in units of the largest loss so that tolerances do not depend on the loss's scale.
    scale = float(y.max())
    y_unit = y / scale

    def residual(x: _Array) -> _Array:
        a, b, c = x
        misfit: _Array = 1.0 / (a * k + b) + c - y_unit
        return misfit

    def jacobian(x: _Array) -> _Array:
        a, b, _ = x
        inverse_square = 1.0 / (a * k + b) ** 2
        return np.column_stack([-k * inverse_square, -inverse_square, np.ones_like(k)])

    lower, upper = np.array([0.0, _B_MIN, 0.0]), np.full(3, np.inf)
    best_cost, best = math.inf, None
    for fraction in _C_STARTS:
        x0 = _start(k, y_unit, fraction * float(y_unit.min()))
        result = least_squares(residual, x0, jac=jacobian, bounds=(lower, upper), method="trf",
                               ftol=1e-12, xtol=1e-12, gtol=1e-12, max_nfev=500)
        cost = float(result.cost)
        if math.isfinite(cost) and cost < best_cost:
            best_cost, best = cost, result.x
    assert best is not None  # the starts are finite, so at least one fit has a finite cost

    a, b, c = float(best[0]) / scale, float(best[1]) / scale, float(best[2]) * scale
    # in units of the largest loss too: squaring losses near 1e300 would overflow
    rms_error = scale * math.sqrt(float(np.mean(residual(best) ** 2)))
    return ConvergenceFit(a=a, b=b, c=c, epochs=len(kept), rms_error=rms_error)


def _start(k: _Array, y: _Array, c0: float) -> _Array:
    """A starting point with c = c0: 1 / (loss - c0) is linear in k, so a straight line gives a and b."""
    z = 1.0 / (y - c0)
    a, b = np.polyfit(k, z, 1)
    return np.array([max(float(a), 0.0), max(float(b), 1e-3), c0])


def remaining_epochs(losses: Sequence[float], target_loss: float, consecutive: int,
                     max_epochs: int) -> RemainingEpochs:
    """Predicted epochs still to run, counting the `consecutive` epochs the target must hold.

    With a fit: ceil(epochs_to_target) + consecutive - 1 (the first whole epoch at the target, then the rest of
    the streak). Fallback (fewer than MIN_EPOCHS_TO_FIT usable losses, or a target the curve never reaches):
    max_epochs - done. Always capped at max_epochs - done and, while done < max_epochs, at least 1; 0 once the
    epoch limit is reached. done = len(losses).
    """
    if consecutive < 1:
        raise ValueError(f"consecutive must be >= 1, got {consecutive}")
    if max_epochs < 1:
        raise ValueError(f"max_epochs must be >= 1, got {max_epochs}")
    done = len(losses)
    left = max(max_epochs - done, 0)
    fit = fit_convergence(losses)
    to_target = fit.epochs_to_target(target_loss, done) if fit is not None else math.inf
    if math.isinf(to_target):
        return RemainingEpochs(epochs=float(left), source=FALLBACK, fit=fit)
    predicted = math.ceil(to_target - _ROUNDING) + consecutive - 1
    epochs = min(max(predicted, 1), left)
    return RemainingEpochs(epochs=float(epochs), source=FIT, fit=fit)
