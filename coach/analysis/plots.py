"""PNG plots for `coach compare` and `coach report`, drawn with matplotlib's Agg backend (no display needed).

Why: a p-value says whether two schedulers differ, a picture says how. Each function takes plain data (samples,
log records), draws one figure on its own `Figure` (no pyplot global state, so it is safe in threads and tests)
and writes one PNG. Side effect: writes the file it is given; nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")

from matplotlib.axes import Axes  # noqa: E402 - after choosing the backend
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import LogFormatter, MaxNLocator  # noqa: E402

from coach.analysis.stats import epoch_times, mean_by_epoch, since_start_s  # noqa: E402

FIGSIZE_IN = (8.0, 5.0)  # width, height of every fixed-size figure, in inches
DPI = 100  # so a fixed-size PNG is 800 x 500 pixels
BAR_HEIGHT_IN = 0.25  # runtime bars: inches per bar
BARS_MARGIN_IN = 1.5  # runtime bars: room for the title and the axis
#: Most bars the runtime-bars figure draws (the slowest jobs): each is a labelled tick, and matplotlib's layout
#: time grows with them, so thousands of jobs (a simulated trace) took minutes for a figure nobody can read.
MAX_BARS = 60


def bars_height_in(bars: int) -> float:
    """Height of the runtime-bars figure: it grows with the number of jobs so labels never overlap."""
    return max(FIGSIZE_IN[1], BAR_HEIGHT_IN * bars + BARS_MARGIN_IN)


def _figure(height_in: float = FIGSIZE_IN[1], rows: int = 1) -> tuple[Figure, list]:
    figure = Figure(figsize=(FIGSIZE_IN[0], height_in), dpi=DPI, layout="constrained")
    axes = figure.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    return figure, list(axes)


#: Margins of the simulator's figures (fractions of the figure): their tick labels are short numbers whatever the
#: data, so fixed margins fit them, and skip the constrained layout's measuring of every label (half their time).
FIXED_MARGINS = {"left": 0.09, "right": 0.97, "bottom": 0.11, "top": 0.93}


def _fixed_figure() -> tuple[Figure, Axes]:
    figure = Figure(figsize=FIGSIZE_IN, dpi=DPI)
    figure.subplots_adjust(**FIXED_MARGINS)
    return figure, figure.subplots()


def _save(figure: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=DPI, format="png")
    return path


def _finish_per_epoch(figure, ax, path, ylabel: str, title: str):
    """Labels, integer epoch ticks, legend, and the PNG, for every plot against the epoch number."""
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    _legend(ax)
    return _save(figure, path)


MAX_LEGEND_ENTRIES = 16  # more (a simulated run's hundreds of jobs) would crowd out the axes: no legend then


def _legend(ax) -> None:
    if 0 < len(ax.get_legend_handles_labels()[0]) <= MAX_LEGEND_ENTRIES:
        ax.legend(fontsize="small")


def _nothing(ax, what: str) -> None:
    ax.text(0.5, 0.5, what, ha="center", va="center", transform=ax.transAxes)


# --------------------------------------------------------------------------- compare


def jct_boxplot(sides: Sequence[tuple[str, Sequence[float]]], path: Path, title: str = "Job completion time") -> Path:
    """One box per side (whiskers at 1.5 IQR, every sample drawn as a dot on top)."""
    figure, (ax,) = _figure()
    present = [(label, list(samples)) for label, samples in sides if len(samples)]
    if present:
        ax.boxplot([samples for _, samples in present], showmeans=True)
        for i, (_, samples) in enumerate(present, start=1):
            ax.plot([i] * len(samples), samples, "o", color=f"C{i - 1}", alpha=0.6, markersize=4)
        ax.set_xticks(range(1, len(present) + 1))
        ax.set_xticklabels([f"{label}\n(n={len(samples)})" for label, samples in present])
    else:
        _nothing(ax, "no job completion times")
    ax.set_ylabel("JCT (s)")
    ax.set_title(title)
    return _save(figure, path)


def epoch_time_plot(sides: Sequence[tuple[str, Sequence[Mapping]]], path: Path) -> Path:
    """Per-epoch time against epoch number: every training epoch as a dot, the mean per epoch as a line."""
    figure, (ax,) = _figure()
    drawn = False
    for i, (label, records) in enumerate(sides):
        points = epoch_times(records)
        if not points:
            continue
        drawn = True
        ax.plot([e for e, _ in points], [s for _, s in points], "o", color=f"C{i}", alpha=0.35, markersize=4)
        means = mean_by_epoch(points)
        ax.plot([e for e, _ in means], [s for _, s in means], "-", color=f"C{i}", label=f"{label} (mean)")
    if not drawn:
        _nothing(ax, "no training epochs")
    return _finish_per_epoch(figure, ax, path, "epoch time (s)", "Time per epoch")


def slowest(bars: Sequence[tuple], most: int) -> list[tuple]:
    """All `bars` in their order when there are at most `most`; else the `most` with the longest JCT (the last
    item), longest first: the jobs a reader of a large comparison looks for."""
    if len(bars) <= most:
        return list(bars)
    return sorted(bars, key=lambda bar: bar[-1], reverse=True)[:most]


def runtime_bars(sides: Sequence[tuple[str, Sequence[tuple[str, float]]]], path: Path, most: int = MAX_BARS) -> Path:
    """One horizontal bar per job (its JCT), coloured by side, labelled `run/job`; past `most` jobs, only the
    `most` slowest, and the title says so."""
    every = [(side_index, label, job, jct) for side_index, (label, jobs) in enumerate(sides) for job, jct in jobs]
    bars = slowest(every, most)
    figure, (ax,) = _figure(height_in=bars_height_in(len(bars)))
    if bars:
        ys = list(range(len(bars)))[::-1]  # first job on top
        ax.barh(ys, [jct for *_, jct in bars], color=[f"C{i}" for i, *_ in bars])
        ax.set_yticks(ys)
        ax.set_yticklabels([job for _, _, job, _ in bars], fontsize="small")
        ax.legend(handles=[Patch(color=f"C{i}", label=label) for i, (label, _) in enumerate(sides)],
                  fontsize="small")
    else:
        _nothing(ax, "no job completion times")
    ax.set_xlabel("JCT (s)")
    ax.set_title("Runtime per job" if len(bars) == len(every) else
                 f"Runtime per job: the {len(bars)} slowest of {len(every)} jobs")
    return _save(figure, path)


# --------------------------------------------------------------------------- report (one run)


#: Largest loss drawn: a diverged job may log any number, and matplotlib's axis overflows (a RuntimeWarning, or a
#: ValueError) near the largest float; losses beyond it are left out of the figure.
MAX_PLOTTED_LOSS = 1e100


def _plotted(value) -> bool:
    return value is not None and abs(value) <= MAX_PLOTTED_LOSS


def loss_plot(logs: Mapping[str, Sequence[Mapping]], path: Path) -> Path:
    """Training loss per epoch per job (solid), and validation loss (dashed) where the model validates; a loss
    beyond +-MAX_PLOTTED_LOSS is left out."""
    figure, (ax,) = _figure()
    values = []
    for i, (job, records) in enumerate(logs.items()):
        training = [r for r in records if r.get("phase") == "training" and _plotted(r.get("loss"))]
        if not training:
            continue
        epochs = [r["epoch"] for r in training]
        ax.plot(epochs, [r["loss"] for r in training], "o-", color=f"C{i}", label=f"{job} loss", markersize=3)
        values += [r["loss"] for r in training]
        validated = [r for r in records if r.get("phase") == "training" and _plotted(r.get("val_loss"))]
        if validated:
            ax.plot([r["epoch"] for r in validated], [r["val_loss"] for r in validated], "s--", color=f"C{i}",
                    label=f"{job} val_loss", markersize=3)
            values += [r["val_loss"] for r in validated]
    if not values:
        _nothing(ax, "no training epochs")
    elif min(values) > 0:
        ax.set_yscale("log")  # losses fall by decades; plain numbers on the axis, not 10^x
        ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
    return _finish_per_epoch(figure, ax, path, "loss", "Loss per epoch")


def _epoch_records(records: Sequence[Mapping]) -> list[Mapping]:
    return [r for r in records if r.get("phase") in ("calibration", "training", "simulated") and r.get("start")]


def allocation_plot(logs: Mapping[str, Sequence[Mapping]], started: str, path: Path) -> Path:
    """Workers and servers of every job over time: a step per epoch (calibration included), from its start."""
    figure, (workers_ax, servers_ax) = _figure(rows=2)
    drawn = False
    for i, (job, records) in enumerate(logs.items()):
        epochs = _epoch_records(records)
        if not epochs:
            continue
        drawn = True
        xs = [since_start_s(r["start"], started) for r in epochs] + [since_start_s(epochs[-1]["end"], started)]
        for ax, key in ((workers_ax, "workers"), (servers_ax, "servers")):
            ys = [r[key] for r in epochs] + [epochs[-1][key]]
            ax.step(xs, ys, where="post", color=f"C{i}", label=job, alpha=0.8)
    if not drawn:
        _nothing(workers_ax, "no epochs")
    for ax, key in ((workers_ax, "workers"), (servers_ax, "servers")):
        ax.set_ylabel(key)
        ax.set_ylim(0, max([1.0, *(line.get_ydata().max() for line in ax.get_lines())]) + 0.5)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    servers_ax.set_xlabel("seconds since the run started")
    workers_ax.set_title("Workers and servers over time")
    _legend(workers_ax)
    return _save(figure, path)


def cost_plot(logs: Mapping[str, Sequence[Mapping]], budgets: Mapping[str, float], started: str, path: Path) -> Path:
    """Cumulative cost of every job over time, against its budget (dashed, same colour)."""
    figure, (ax,) = _figure()
    drawn = False
    for i, (job, records) in enumerate(logs.items()):
        costed = [r for r in records if r.get("cumulative_cost") is not None and r.get("end")]
        if costed:
            drawn = True
            xs = [since_start_s(costed[0].get("start") or costed[0]["end"], started)]
            xs += [since_start_s(r["end"], started) for r in costed]
            ax.step(xs, [0.0] + [r["cumulative_cost"] for r in costed], where="post", color=f"C{i}",
                    label=f"{job} cost")
        if budgets.get(job) is not None:
            drawn = True
            ax.axhline(budgets[job], color=f"C{i}", linestyle="--", linewidth=1, label=f"{job} budget")
    if not drawn:
        _nothing(ax, "no costs logged")
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("money")
    ax.set_title("Cost against budget")
    _legend(ax)
    return _save(figure, path)


# --------------------------------------------------------------------------- simulate


def utilization_plot(samples: Sequence[tuple[float, float]], path: Path, title: str = "Cluster utilization") -> Path:
    """Share of the cluster's GPUs held by training jobs, a step per scheduling round, against hours."""
    figure, ax = _fixed_figure()
    if samples:
        ax.step([t_s / 3600 for t_s, _ in samples], [share * 100 for _, share in samples], where="post")
        ax.set_ylim(0, 105)
    else:
        _nothing(ax, "no rounds")
    return _labelled(figure, ax, path, ("hours since the first arrival", "GPUs training (%)", title))


def utilization_overlay_plot(sides: Sequence[tuple[str, Sequence[tuple[float, float]]]], path: Path,
                             title: str = "Cluster utilization") -> Path:
    """Share of GPUs training against hours, one step line per side (a sweep's runs in one figure)."""
    figure, ax = _fixed_figure()
    drawn = False
    for label, samples in sides:
        if samples:
            drawn = True
            ax.step([t_s / 3600 for t_s, _ in samples], [share * 100 for _, share in samples], where="post",
                    label=label, linewidth=1.0)
    if drawn:
        ax.set_ylim(0, 105)
        _legend(ax)
    else:
        _nothing(ax, "no rounds")
    return _labelled(figure, ax, path, ("hours since the first arrival", "GPUs training (%)", title))


def jct_cdf_plot(sides: Sequence[tuple[str, Sequence[float]]], path: Path, title: str = "JCT distribution") -> Path:
    """Empirical CDF of job completion times (hours, log axis), one line per side."""
    figure, ax = _fixed_figure()
    drawn = False
    for label, samples in sides:
        ordered = sorted(s / 3600 for s in samples if s > 0)
        if ordered:
            drawn = True
            ys = [(i + 1) / len(ordered) for i in range(len(ordered))]
            ax.step(ordered, ys, where="post", label=f"{label} (n={len(ordered)})")
    if drawn:
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
    else:
        _nothing(ax, "no job completed")
    _legend(ax)
    return _labelled(figure, ax, path, ("JCT (hours)", "share of jobs", title))


def _labelled(figure, ax, path: Path, labels: tuple[str, str, str]) -> Path:
    """x label, y label and title, then the PNG."""
    xlabel, ylabel, title = labels
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return _save(figure, path)
