"""The plain-text summary the recipe prints at its end (`terminal_summary`): accuracy per evaluation and arm with
95% intervals, send and use, cross-play, each comparison and the verdict, and any failed check; read from
results.json alone, as the report (`report.py`) is.
"""

from __future__ import annotations

from talktosolve.experiment.report import eval_order, verdict
from talktosolve.experiment.report_options import SIDE_TEXT, influence_rows
from talktosolve.experiment.results import arm_names, check_interval, find_eval, run_names, seat_names, seed_names


def _t3(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]

    def line(cells):
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(headers), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def terminal_summary(results: dict) -> str:
    """Plain-text summary for the end of the recipe: accuracy per evaluation and arm with 95% intervals, send and
    use, cross-play, each comparison and the verdict, and any failed check. ASCII only; `-` marks an undefined
    figure."""
    evals, run = results["evals"], results["run"]
    rows = []
    for name in eval_order(results):
        ev = evals[name]
        rows.append([name, _t3(ev["accuracy"]), f"[{_t3(ev['lo'])}, {_t3(ev['hi'])}]",
                     _t3(ev["talk"].get("send")), _t3(ev["talk"].get("use"))])
    for arm in arm_names(results):
        a = results["arms"].get(arm)
        if a is not None:
            rows.append([f"{arm} (all seeds)", _t3(a["accuracy"]), f"[{_t3(a['lo'])}, {_t3(a['hi'])}]", "", ""])
    seats = seat_names(results)
    lines = [f"talktosolve: preset {results['preset']}, model {run['model']}, seats {', '.join(seats)} (turns "
             f"{','.join(run['protocol']['order'])}), seeds {', '.join(seed_names(results))}; {run['steps']} steps", ""]
    lines += _table(["evaluation", "accuracy", "95% interval", "send", "use"], rows)

    cross = []
    for arm in arm_names(results):
        for name in run_names(results, arm):
            team, cr = find_eval(results, arm, "team", name), find_eval(results, arm, "cross", name)
            others = find_eval(results, arm, "cross_others", name)
            if team is not None and cr is not None:
                cross.append([name, _t3(team[1]["accuracy"]), _t3(cr[1]["accuracy"]),
                              _t3(others[1]["accuracy"]) if others else "-",
                              f"{cr[1]['accuracy'] - team[1]['accuracy']:+.3f}"])
    if cross:
        lines += ["", *_table(["trained model", "team", f"cross-play ({seats[0]})", "other side", "cross - team"],
                              cross)]

    lines.append("")
    for key, comp in results["comparisons"].items():
        if comp is None:
            lines.append(f"delta {key}: - (an arm was not run)")
            continue
        lines.append(f"delta {comp['a']} - {comp['b']}: {comp['delta']:+.3f} [{comp['lo']:+.3f}, {comp['hi']:+.3f}] "
                     f"(95% interval, {comp['n_problems']} problems, {comp['method']})")
        if comp.get("warning"):
            lines.append(f"warning: {comp['warning']}")
    lines.append("verdict: " + verdict(results).replace("−", "-"))
    for line, m in results.get("cross_seed", {}).items():
        d = m["self_minus_cross"]
        lines.append(f"self - cross-seed {line}: {d['delta']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] "
                     f"(diagonal minus off-diagonal mean)")
    if "variant" in results:
        v = results["variant"]
        for side, d in v["against_arm"].items():
            lines.append(f"{v['name']} - {v['arm']}, {SIDE_TEXT[side].replace('−', '-')}: {d['delta']:+.3f} "
                         f"[{d['lo']:+.3f}, {d['hi']:+.3f}]")
    swapped = [(arm, results["arms"][arm]) for arm in arm_names(results)] + (
        [(results["variant"]["name"], results["variant"])] if "variant" in results else [])
    for name, entry in swapped:
        if "role_swap" in entry:
            d = entry["role_swap"]
            lines.append(f"{name}: team - role swap: {d['delta']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] "
                         f"(per-role weights played in each other's seats)")
    if results.get("influence"):
        rows = [[arm, f"turn {t['turn']} {t['writer']}->{t['listener']}", f"{b['drop']['mean']:+.3f}",
                 f"{t['drop']['mean']:+.3f} [{t['drop']['lo']:+.3f}, {t['drop']['hi']:+.3f}]",
                 f"{d['delta']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"]
                for arm in results["influence"]["arms"] for b, t, d in influence_rows(results, arm, ("remove",))]
        lines += ["", "influence: the listener's accuracy drop when a message is removed (before = base team, "
                      "after = trained, all seeds)",
                  *_table(["arm", "message", "before", "after", "after - before"], rows)]

    failed, total = [], 0
    for key, value in results["checks"].items():
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, v in items:
            if v is None:
                continue
            total += 1
            if not v:
                # A per-seed check is decided on an interval; show it, since the bare accuracies above may differ.
                d = check_interval(results, key, sub) if sub is not None else None
                why = "" if d is None else f" ({d['delta']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}])"
                failed.append((key if sub is None else f"{key}[{sub}]") + why)
    lines.append(f"checks: {total - len(failed)}/{total} passed" + (f"; failed: {', '.join(failed)}" if failed else ""))
    # A run on a CPU has no GPU time: saying "GPU - s" would suggest a figure that is missing.
    gpu = "" if run["gpu_seconds"] is None else f", GPU {_t3(run['gpu_seconds'])} s"
    lines.append(f"time of all stages: {_t3(run['wall_seconds'])} s{gpu}")
    return "\n".join(lines) + "\n"
