"""Why a job ended, in words: green only for a job that reached its target; a budget or `max_epochs` ending in
a colour of its own, with the figures that made it (what the next epoch would have cost against what was left,
the best loss against the target). Pure.
"""

from __future__ import annotations

from typing import NamedTuple

#: stop reason -> (kind of ending, tone the page colours it with); anything else failed
ENDINGS = {
    "target_loss": ("target", "good"),
    "budget": ("budget", "budget"),
    "max_epochs": ("max_epochs", "limit"),
    "stopped_by_user": ("stopped", "neutral"),
    "interrupted": ("interrupted", "neutral"),
}


class EndFigures(NamedTuple):
    spent: float
    budget: float
    next_epoch_cost: float | None  # what the last training epoch cost: the estimate of the next
    best_loss: float | None  # best validation loss (training loss without validation data)
    loss_name: str  # "val loss" or "loss"
    target_loss: float
    epochs: int
    max_epochs: int


def _g(value: float | None) -> str:
    return "–" if value is None else f"{value:.2g}" if abs(value) < 0.01 else f"{value:.3g}"


def ending_view(reason: str | None, figures: EndFigures) -> dict | None:
    """{kind, tone, words} for a job that ended with `reason`; None while it runs."""
    if not reason:
        return None
    kind, tone = ENDINGS.get(reason, ("failed", "bad"))
    best = f"best {figures.loss_name} {_g(figures.best_loss)}, target {_g(figures.target_loss)}"
    words = {
        "target": f"reached its target: {best}",
        "budget": (f"budget spent: the next epoch would cost ≈{_g(figures.next_epoch_cost)}, "
                   f"{_g(max(0.0, figures.budget - figures.spent))} left; {best}"),
        "max_epochs": f"stopped at max_epochs ({figures.epochs} of {figures.max_epochs}); {best}",
        "stopped": f"stopped by its user after {figures.epochs} epochs; {best}",
        "interrupted": "interrupted: the server stopped; it resumes when the server starts again",
    }.get(kind, f"failed: {reason}")
    return {"kind": kind, "tone": tone, "reason": reason, "words": words}
