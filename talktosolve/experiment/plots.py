"""The report's plots, drawn from `results.json` with matplotlib's Agg canvas (no display, no pyplot state).

* `learning_curves.png`  team reward per training step, per arm; each seed a light raw line and a smoothed line.
* `accuracy.png`         accuracy with 95% intervals: base teams, each trained team, each arm, cross-play (both
  sides).
* `talk.png`             send, use, use given sent, ask, agree before (the base team) and after training.
* `cross_play.png`       per run: base team vs trained team vs cross-play vs its other side.
* `influence.png`        (when the influence stage ran) per arm: each message's influence on each listener (the
  drop in its accuracy under each ablation) before training (the base team) and after (trained, all seeds).
* `cross_seed.png`       (when results.json has the cross-seed matrix) a heat map per line of runs: run i in the
  first seat, run j in the others, each cell its accuracy and 95% interval; the diagonal is the trained teams.

Evaluations are found by their records (`results.find_eval`: arm, kind, run), never by their names.

Deterministic: the same results give byte-identical PNGs (no timestamps in the metadata). matplotlib is imported
only when a plot is drawn.
"""

from __future__ import annotations

import io
from typing import Any, Callable

from talktosolve.experiment.results import find_eval, run_names

PLOTS = ("learning_curves.png", "accuracy.png", "talk.png", "cross_play.png")
TALK_SHOWN = (("send", "send"), ("use", "use"), ("use_given_sent", "use | sent"), ("ask", "ask"), ("agree", "agree"))


def _arms(results: dict) -> list[str]:
    return list(results["run"]["arms"])


# --------------------------------------------------------------------------------------------------- plots

_ARM_COLOR = {"chat": "#1f77b4", "cut": "#ff7f0e", "full": "#9467bd"}
_BASE_COLOR = "#7f7f7f"
_CROSS_COLOR = "#2ca02c"
_OTHERS_COLOR = "#8c564b"


def _arm_color(arm: str) -> str:
    return _ARM_COLOR.get(arm, "#17becf")
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

    arms = _arms(results)
    fig, axes = _figure(5.0 * len(arms) + 1.0, 4.2, ncols=len(arms))
    for ax, arm in zip(axes, arms):
        drawn = False
        for k, run in enumerate(run_names(results, arm)):
            points = sorted(results["curves"].get(run, []), key=lambda p: p["step"])
            if not points:
                continue
            steps = [p["step"] for p in points]
            reward = [p["reward"] for p in points]
            color = _SEED_COLORS[k % len(_SEED_COLORS)]
            # A variant's runs share their arm's panel, dashed and named.
            variant = results["runs"][run].get("variant")
            style = "--" if variant else "-"
            label = f"{variant + ' ' if variant else ''}seed {results['runs'][run]['seed']}"
            ax.plot(steps, reward, color=color, alpha=0.25, linewidth=1.0, linestyle=style)
            ax.plot(steps, _smooth(reward), color=color, linewidth=2.0, linestyle=style, label=label)
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
    arms = _arms(results)
    n_runs = len(results["runs"])
    fig, (ax,) = _figure(max(6.0, 0.55 * (3 * n_runs + 2 * len(arms)) + 2.5), 4.6)
    labels: list[str] = []
    x = 0

    def put(found, color, marker="o", label=None) -> None:
        nonlocal x
        if found is None:
            return
        _errbar(ax, x, found[1], color, marker=marker)
        labels.append(label or found[0])
        x += 1

    for arm in arms:
        put(find_eval(results, arm, "base"), _BASE_COLOR)
    for arm in arms:
        for run in run_names(results, arm):
            put(find_eval(results, arm, "team", run), _arm_color(arm))
        put((arm, results["arms"][arm]), _arm_color(arm), marker="D", label=f"{arm} (all)")
    for kind, color in (("cross", _CROSS_COLOR), ("cross_others", _OTHERS_COLOR)):
        for arm in arms:
            for run in run_names(results, arm):
                put(find_eval(results, arm, kind, run), color, marker="s")
    ax.set_xticks(range(len(labels)), labels, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("accuracy (95% interval)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Held-out accuracy")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def plot_talk(results: dict) -> bytes:
    arms = _arms(results)
    series: list[tuple[str, dict, Any]] = []
    before = find_eval(results, "chat", "base") or find_eval(results, arms[0], "base")
    if before is not None:
        series.append((f"{before[0]} (before)", before[1], _BASE_COLOR))
    for arm in arms:
        found = [f for f in (find_eval(results, arm, "team", r) for r in run_names(results, arm)) if f]
        series += [(name, ev, _shade(_arm_color(arm), k, len(found))) for k, (name, ev) in enumerate(found)]
    fig, (ax,) = _figure(max(7.0, 1.0 + 0.3 * len(series) * len(TALK_SHOWN)), 4.4)
    width = 0.8 / max(1, len(series))
    for j, (name, ev, color) in enumerate(series):
        talk = ev["talk"]
        xs, ys = [], []
        for i, (key, _) in enumerate(TALK_SHOWN):
            if talk.get(key) is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(talk[key])
        ax.bar(xs, ys, width=width, color=color, label=name, edgecolor="white", linewidth=0.5)
    ax.set_xticks(range(len(TALK_SHOWN)), [label for _, label in TALK_SHOWN])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share")
    ax.set_title("Talk before (untrained team) and after training")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncols=2 if len(series) > 4 else 1, loc="upper right")
    return _png(fig)


def plot_cross_play(results: dict) -> bytes:
    arms = _arms(results)
    seats = results["run"]["protocol"]["seats"]
    first = seats[0]
    groups = [(arm, run) for arm in arms for run in run_names(results, arm)
              if find_eval(results, arm, "team", run) and find_eval(results, arm, "cross", run)]
    fig, (ax,) = _figure(max(6.0, 1.5 * len(groups) + 2.0), 4.4)
    kinds = (("base team", lambda a, r: find_eval(results, a, "base"), _BASE_COLOR),
             ("trained team", lambda a, r: find_eval(results, a, "team", r), None),
             (f"cross-play (trained {first} + base)", lambda a, r: find_eval(results, a, "cross", r), _CROSS_COLOR),
             (f"other side (base {first} + trained)", lambda a, r: find_eval(results, a, "cross_others", r),
              _OTHERS_COLOR))
    width = 0.2
    for j, (label, get, color) in enumerate(kinds):
        for i, (arm, run) in enumerate(groups):
            found = get(arm, run)
            if found is None:
                continue
            ev = found[1]
            acc = ev["accuracy"]
            ax.bar(i + (j - 1.5) * width, acc, width=width, color=color or _arm_color(arm),
                   yerr=[[max(0.0, acc - ev["lo"])], [max(0.0, ev["hi"] - acc)]], capsize=3,
                   error_kw={"elinewidth": 1}, label=label if i == 0 and color else None)
    ax.set_xticks(range(len(groups)), [run for _, run in groups])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy (95% interval)")
    ax.set_title("Cross-play vs trained team vs base team")
    ax.grid(axis="y", alpha=0.3)
    from matplotlib.patches import Patch

    handles = [Patch(color=_BASE_COLOR, label="base team")]
    handles += [Patch(color=_arm_color(a), label=f"trained team ({a})") for a in arms]
    handles.append(Patch(color=_CROSS_COLOR, label=f"cross-play (trained {first} + base)"))
    handles.append(Patch(color=_OTHERS_COLOR, label=f"other side (base {first} + trained)"))
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, never on them
    return _png(fig)




_KIND_COLOR = {"remove": "#d62728", "replace": "#9467bd", "renumber": "#17becf"}


def plot_influence(results: dict) -> bytes:
    inf = results["influence"]
    arms = [a for a in _arms(results) if a in inf["arms"]]
    fig, axes = _figure(max(6.0, 4.2 * len(arms)), 4.4, ncols=len(arms))
    kinds = inf["kinds"]
    width = 0.8 / (2 * len(kinds))
    for ax, arm in zip(axes, arms):
        entries = inf["arms"][arm]
        keys = list(dict.fromkeys((e["turn"], e["writer"], e["listener"]) for e in entries["trained"]))
        for stage, (name, hollow) in enumerate((("base", True), ("trained", False))):
            for k, kind in enumerate(kinds):
                xs, ys, lo, hi = [], [], [], []
                for i, key in enumerate(keys):
                    e = next(e for e in entries[name] if (e["turn"], e["writer"], e["listener"]) == key
                             and e["kind"] == kind)
                    d = e["drop"]
                    xs.append(i + (2 * k + stage - len(kinds) + 0.5) * width)
                    ys.append(d["mean"])
                    lo.append(max(0.0, d["mean"] - d["lo"]))
                    hi.append(max(0.0, d["hi"] - d["mean"]))
                color = _KIND_COLOR.get(kind, "#7f7f7f")
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", color=color, ecolor=color, capsize=3, markersize=6,
                            markerfacecolor="white" if hollow else color,
                            label=f"{kind}, {'before' if hollow else 'after'} training")
        ax.axhline(0.0, color="#7f7f7f", linewidth=0.8)
        ax.set_xticks(range(len(keys)), [f"turn {t}\n{w} → {lis}" for t, w, lis in keys])
        ax.set_ylim(-0.3, 1.05)
        ax.set_ylabel("listener's accuracy drop (95% interval)")
        ax.set_title(f"{arm} arm: influence of each message")
        ax.grid(axis="y", alpha=0.3)
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig)


def plot_cross_seed(results: dict) -> bytes:
    first = results["run"]["protocol"]["seats"][0]
    lines = list(results["cross_seed"].items())
    fig, axes = _figure(4.6 * len(lines) + 0.8, 4.4, ncols=len(lines))
    for ax, (line, m) in zip(axes, lines):
        runs, acc = m["runs"], m["accuracy"]
        image = ax.imshow(acc, vmin=0.0, vmax=1.0, cmap="viridis")
        for i, row in enumerate(acc):
            for j, value in enumerate(row):
                ax.text(j, i, f"{value:.3f}\n[{m['lo'][i][j]:.2f}, {m['hi'][i][j]:.2f}]", ha="center", va="center",
                        fontsize=7, color="black" if value > 0.6 else "white")
        ax.set_xticks(range(len(runs)), runs, fontsize=8)
        ax.set_yticks(range(len(runs)), runs, fontsize=8)
        ax.set_xlabel("run in the other seats")
        ax.set_ylabel(f"run in seat {first}")
        d = m["self_minus_cross"]
        ax.set_title(f"{line}: self - cross-seed {d['delta']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label="accuracy")
    return _png(fig)


OPTIONAL_PLOTS: dict[str, tuple[str, Callable[[dict], bytes]]] = {
    "cross_seed.png": ("cross_seed", plot_cross_seed),
    "influence.png": ("influence", plot_influence),
}
"""Plots drawn only when results.json holds their section."""


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
        out = {name: _PLOTTERS[name](results) for name in PLOTS}
        out.update({name: draw(results) for name, (section, draw) in OPTIONAL_PLOTS.items() if results.get(section)})
        return out
