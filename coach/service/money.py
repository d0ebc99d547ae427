"""Money in view: what a job's epochs cost, what the money left still buys, where `max_epochs` would take it.

Pure: plain numbers in, a plain dict out. Rates come from finished training epochs only (a calibration step is
a fraction of an epoch); the meter's level turns `warn` at WARN_SHARE of the budget and `over` once the next
epoch would not fit, so the page can colour it before the budget stops the job.
"""

from __future__ import annotations

import math
from typing import Sequence

WARN_SHARE = 0.75  # spent / budget from which the meter is amber
S_PER_HOUR = 3600.0


def money_view(spent: float, budget: float, epoch_costs: Sequence[float], epoch_times_s: Sequence[float],
               epochs_done: int, max_epochs: int | None) -> dict:
    """Cost per epoch and per hour, epochs the money left buys, projected cost at max_epochs, the meter's level."""
    left = max(0.0, budget - spent)
    per_epoch = sum(epoch_costs) / len(epoch_costs) if epoch_costs else None
    wall_s = sum(epoch_times_s)
    per_hour = sum(epoch_costs) / wall_s * S_PER_HOUR if epoch_costs and wall_s > 0 else None
    affordable = math.floor(left / per_epoch + 1e-9) if per_epoch else None
    projected = None
    if per_epoch is not None and max_epochs is not None:
        projected = spent + max(0, max_epochs - epochs_done) * per_epoch
    share = spent / budget if budget > 0 else 1.0
    if (per_epoch is not None and per_epoch > left) or share >= 1.0:
        level = "over"
    elif share >= WARN_SHARE:
        level = "warn"
    else:
        level = "ok"
    return {"spent": spent, "budget": budget, "left": left, "share": min(1.0, share), "per_epoch": per_epoch,
            "per_hour": per_hour, "epochs_affordable": affordable, "projected_at_max": projected,
            "projected_over_budget": projected is not None and projected > budget, "level": level}
