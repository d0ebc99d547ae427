"""When a job stops: target loss held, epoch limit, or an unaffordable next epoch. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, overload

TARGET, MAX_EPOCHS, BUDGET = "target_loss", "max_epochs", "budget"


@dataclass(frozen=True)
class StopInputs:
    metrics: Sequence[float]  # stop metric of every epoch so far (validation loss if any, else training loss)
    target_loss: float  # stop when the metric is at or below this ...
    consecutive: int  # ... for this many epochs in a row
    max_epochs: int  # hard limit on epochs
    cumulative_cost: float  # money spent so far
    budget: float  # money the job may spend
    predicted_next_cost: float | None  # predicted cost of the next epoch; None when nothing predicts it yet


@overload
def stop_metric(loss: float, val_loss: float | None) -> float: ...
@overload
def stop_metric(loss: float | None, val_loss: float | None) -> float | None: ...
def stop_metric(loss: float | None, val_loss: float | None) -> float | None:
    """Validation loss when the model has validation data, else the training loss."""
    return val_loss if val_loss is not None else loss


def decide(inputs: StopInputs) -> str | None:
    """The reason to stop now, or None to run another epoch. Checked in the order the user cares about."""
    recent = list(inputs.metrics)[-inputs.consecutive :]
    if len(recent) == inputs.consecutive and all(m <= inputs.target_loss for m in recent):
        return TARGET
    if len(inputs.metrics) >= inputs.max_epochs:
        return MAX_EPOCHS
    if inputs.cumulative_cost >= inputs.budget:
        return BUDGET
    if inputs.predicted_next_cost is not None and inputs.cumulative_cost + inputs.predicted_next_cost > inputs.budget:
        return BUDGET
    return None
