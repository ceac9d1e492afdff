"""The report's plots, drawn from `results.json` with matplotlib's Agg canvas (no display, no pyplot state).

* `learning_curves.png`  team reward per training step, per arm; each seed a light raw line and a smoothed line.
* `accuracy.png`         accuracy with 95% intervals: base pairs, each trained pair, each arm, cross-play.
* `talk.png`             send, use, use given sent, ask, agree before (base-chat) and after training.
* `cross_play.png`       per arm and seed: base pair vs trained pair vs cross-play.

Deterministic: the same results give byte-identical PNGs (no timestamps in the metadata). matplotlib is imported
only when a plot is drawn.
"""

from __future__ import annotations

import io
from typing import Any, Callable

PLOTS = ("learning_curves.png", "accuracy.png", "talk.png", "cross_play.png")
TALK_SHOWN = (("send", "send"), ("use", "use"), ("use_given_sent", "use | sent"), ("ask", "ask"), ("agree", "agree"))


def _seeds(results: dict) -> list[str]:
    return [str(s) for s in results["run"]["seeds"]]


def _arms(results: dict) -> list[str]:
    return list(results["run"]["arms"])


# --------------------------------------------------------------------------------------------------- plots

_ARM_COLOR = {"chat": "#1f77b4", "cut": "#ff7f0e"}
_BASE_COLOR = "#7f7f7f"
_CROSS_COLOR = "#2ca02c"
_SEED_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def _smooth(values: list[float]) -> list[float]:
    """Trailing moving average over a window of about a tenth of the run (at least 1 point)."""
    n = len(values)
    w = max(1, round(n / 10))
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= w:
            total -= values[i - w]
        out.append(total / min(i + 1, w))
    return out


def _shade(color: str, k: int, n: int) -> tuple:
    """The k-th of n shades of `color`, from darker to lighter."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    t = 0.0 if n <= 1 else 0.55 * k / (n - 1) - 0.15
    if t < 0:
        return (r * (1 + t), g * (1 + t), b * (1 + t))
    return (r + (1 - r) * t, g + (1 - g) * t, b + (1 - b) * t)


def _figure(width: float, height: float, ncols: int = 1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def _errbar(ax, x, ev: dict, color, label=None, marker="o") -> None:
    acc = ev["accuracy"]
    ax.errorbar([x], [acc], yerr=[[max(0.0, acc - ev["lo"])], [max(0.0, ev["hi"] - acc)]], fmt=marker,
                color=color, ecolor=color, capsize=4, markersize=7, label=label)


def plot_learning_curves(results: dict) -> bytes:
    from matplotlib.ticker import MaxNLocator

    arms, seeds = _arms(results), _seeds(results)
    fig, axes = _figure(5.0 * len(arms) + 1.0, 4.2, ncols=len(arms))
    for ax, arm in zip(axes, arms):
        drawn = False
        for k, seed in enumerate(seeds):
            points = sorted(results["curves"].get(f"{arm}-s{seed}", []), key=lambda p: p["step"])
            if not points:
                continue
            steps = [p["step"] for p in points]
            reward = [p["reward"] for p in points]
            color = _SEED_COLORS[k % len(_SEED_COLORS)]
            ax.plot(steps, reward, color=color, alpha=0.25, linewidth=1.0)
            ax.plot(steps, _smooth(reward), color=color, linewidth=2.0, label=f"seed {seed}")
            drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "no training steps", ha="center", va="center", transform=ax.transAxes)
        else:
            ax.legend(loc="upper left", fontsize=8)
        ax.set_title(f"{arm} arm")
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("team reward (light: per step, bold: smoothed)")
    return _png(fig)


def plot_accuracy(results: dict) -> bytes:
    evals, arms, seeds = results["evals"], _arms(results), _seeds(results)
    fig, (ax,) = _figure(max(6.0, 0.55 * (len(arms) * (2 * len(seeds) + 2)) + 2.5), 4.6)
    labels: list[str] = []
    x = 0

    def put(ev: dict, label: str, color, marker="o") -> None:
        nonlocal x
        _errbar(ax, x, ev, color, marker=marker)
        labels.append(label)
        x += 1

    for arm in arms:
        if f"base-{arm}" in evals:
            put(evals[f"base-{arm}"], f"base ({arm})", _BASE_COLOR)
    for arm in arms:
        for seed in seeds:
            if f"{arm}-s{seed}" in evals:
                put(evals[f"{arm}-s{seed}"], f"{arm}-s{seed}", _ARM_COLOR[arm])
        put(results["arms"][arm], f"{arm} (all)", _ARM_COLOR[arm], marker="D")
    for arm in arms:
        for seed in seeds:
            if f"cross-{arm}-s{seed}" in evals:
                put(evals[f"cross-{arm}-s{seed}"], f"cross-{arm}-s{seed}", _CROSS_COLOR, marker="s")
    ax.set_xticks(range(len(labels)), labels, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("accuracy (95% interval)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Held-out accuracy")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def plot_talk(results: dict) -> bytes:
    evals, arms, seeds = results["evals"], _arms(results), _seeds(results)
    series: list[tuple[str, Any]] = []
    if "base-chat" in evals:
        series.append(("base-chat (before)", _BASE_COLOR))
    for arm in arms:
        names = [f"{arm}-s{s}" for s in seeds if f"{arm}-s{s}" in evals]
        series += [(n, _shade(_ARM_COLOR[arm], k, len(names))) for k, n in enumerate(names)]
    fig, (ax,) = _figure(max(7.0, 1.0 + 0.3 * len(series) * len(TALK_SHOWN)), 4.4)
    width = 0.8 / max(1, len(series))
    for j, (name, color) in enumerate(series):
        talk = evals[name.split(" ")[0]]["talk"]
        xs, ys = [], []
        for i, (key, _) in enumerate(TALK_SHOWN):
            if talk.get(key) is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(talk[key])
        ax.bar(xs, ys, width=width, color=color, label=name, edgecolor="white", linewidth=0.5)
    ax.set_xticks(range(len(TALK_SHOWN)), [label for _, label in TALK_SHOWN])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share")
    ax.set_title("Talk before (untrained pair) and after training")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncols=2 if len(series) > 4 else 1, loc="upper right")
    return _png(fig)


def plot_cross_play(results: dict) -> bytes:
    evals, arms, seeds = results["evals"], _arms(results), _seeds(results)
    groups = [(arm, seed) for arm in arms for seed in seeds
              if f"{arm}-s{seed}" in evals and f"cross-{arm}-s{seed}" in evals]
    fig, (ax,) = _figure(max(6.0, 1.2 * len(groups) + 2.0), 4.4)
    kinds = (("base pair", lambda a, s: evals.get(f"base-{a}"), _BASE_COLOR),
             ("trained pair", lambda a, s: evals.get(f"{a}-s{s}"), None),
             ("cross-play (trained A + base B)", lambda a, s: evals.get(f"cross-{a}-s{s}"), _CROSS_COLOR))
    width = 0.26
    for j, (label, get, color) in enumerate(kinds):
        for i, (arm, seed) in enumerate(groups):
            ev = get(arm, seed)
            if ev is None:
                continue
            acc = ev["accuracy"]
            ax.bar(i + (j - 1) * width, acc, width=width, color=color or _ARM_COLOR[arm],
                   yerr=[[max(0.0, acc - ev["lo"])], [max(0.0, ev["hi"] - acc)]], capsize=3,
                   error_kw={"elinewidth": 1}, label=label if i == 0 and color else None)
    ax.set_xticks(range(len(groups)), [f"{a}-s{s}" for a, s in groups])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy (95% interval)")
    ax.set_title("Cross-play vs trained pair vs base pair")
    ax.grid(axis="y", alpha=0.3)
    from matplotlib.patches import Patch

    handles = [Patch(color=_BASE_COLOR, label="base pair")]
    handles += [Patch(color=_ARM_COLOR[a], label=f"trained pair ({a})") for a in arms]
    handles.append(Patch(color=_CROSS_COLOR, label="cross-play (trained A + base B)"))
    ax.legend(handles=handles, fontsize=8, loc="upper right")
    return _png(fig)


_PLOTTERS: dict[str, Callable[[dict], bytes]] = {
    "learning_curves.png": plot_learning_curves,
    "accuracy.png": plot_accuracy,
    "talk.png": plot_talk,
    "cross_play.png": plot_cross_play,
}


def render_plots(results: dict) -> dict[str, bytes]:
    """Every plot as PNG bytes, keyed by file name (drawn with the Agg canvas and matplotlib's default style)."""
    import matplotlib
    import matplotlib.style

    with matplotlib.style.context("default"):
        return {name: _PLOTTERS[name](results) for name in PLOTS}
