"""The human report of a recipe run: `report.md`, `report.html` and PNG plots, all from `results.json`.

`write_report(results, out_dir)` validates `results` (docs/results.md) and writes, each file atomically
(`talktosolve.store.write_bytes`), the plots drawn by `talktosolve.experiment.plots` and the pages:

* `plots/learning_curves.png`  team reward per training step, per arm; each seed a light raw line and a smoothed
  line in the same colour.
* `plots/accuracy.png`         accuracy with 95% intervals: the base pair in each arm, each trained pair, each arm
  over all seeds, and cross-play (trained A + base B) per seed.
* `plots/talk.png`             send, use, use given sent, ask, agree before training (base-chat) and after (each
  trained pair of each arm), as grouped bars.
* `plots/cross_play.png`       per arm and seed: base pair vs trained pair vs cross-play, with 95% intervals.
* `plots/influence.png`        (influence stage on) each message's influence on its listeners, before and after
  training, per arm and ablation.
* `report.md`, `report.html`   headline (the chat-vs-cut delta, its interval, the verdict), the checks (✓/✗,
  per-seed maps expanded), accuracy, talk before/after, cross-play, run facts, the figures. `report.html` is one
  self-contained page (inline CSS) that shows the plots from `plots/*.png` next to it.

Every figure is printed to 3 decimals; an undefined one (None) as `–`. The output is deterministic: the same
results give byte-identical files (no timestamps in the PNGs, no clock read here).

The sections a recipe's options add (cross-seed matrix, variant, role swap, influence) are `report_options.py`'s;
the plain-text table printed at the end of the recipe is `summary.py`'s. matplotlib is imported only when plots
are drawn.
"""

from __future__ import annotations

from pathlib import Path

from talktosolve.experiment.pages import NONE, f3, html_page, interval, mark, markdown, s3
from talktosolve.experiment.plan import KINDS, eval_kind
from talktosolve.experiment.plots import PLOTS, TALK_SHOWN, render_plots
from talktosolve.experiment.report_options import (
    cross_seed_blocks,
    influence_sections,
    role_swap_blocks,
    variant_blocks,
)
from talktosolve.experiment.results import (
    CUT_MARGIN,
    arm_names,
    check_interval,
    find_eval,
    find_evals,
    run_names,
    seat_names,
    seed_names,
    validate_results,
)
from talktosolve.store import write_bytes, write_text

__all__ = ["write_report", "render_markdown", "render_html", "verdict", "PLOTS"]

CHECK_TEXT = {
    "hands_hold_numbers": "every eligible problem's hands each hold a number",
    "hands_disjoint_and_complete": "the seats' hands are disjoint and together are all the facts",
    "views_respect_arms": "no seat ever saw a fact or message its arm hides from it (transcripts)",
    "interval_excludes_zero": "the 95% interval of the comparison's delta excludes 0",
    "chat_beats_base": "the trained chat team beats the untrained base team: the 95% interval of team − base "
                       "(paired over problems) lies above 0",
    "cut_near_base": "the trained cut team stays near the base team or below: the 95% interval of team − base "
                     f"ends at or below +{CUT_MARGIN:.2f}",
    "cross_play_below_pair": "cross-play (trained first seat + base) scores below the trained team: the 95% "
                             "interval of team − cross-play lies above 0",
    "cut_influence_zero": "in the cut arm no message changed any listener (every influence interval holds 0)",
}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return NONE
    total = int(round(seconds))
    h, rem = divmod(total, 3600)
    m, s = divmod(rem, 60)
    return f"{seconds:.3f} s ({h}:{m:02d}:{s:02d})"


def _comparisons(results: dict) -> list[tuple[str, dict]]:
    return [(k, c) for k, c in results["comparisons"].items() if c is not None]


def verdict(results: dict) -> str:
    """One sentence on the first configured comparison: does its interval exclude 0, and which way."""
    if not results["comparisons"]:
        return "no comparison configured"
    key, comp = next(iter(results["comparisons"].items()))
    if comp is None:
        return f"no {key} comparison: this run has only the {' and '.join(results['run']['arms'])} arm"
    a, b = comp["a"], comp["b"]
    if comp["excludes_zero"]:
        winner, loser = (a, b) if comp["delta"] > 0 else (b, a)
        talk = ", talking helped" if (a, b) == ("chat", "cut") and comp["delta"] > 0 else ""
        return f"the interval excludes 0: the {winner} arm beats the {loser} arm{talk}"
    return f"the interval includes 0: no evidence that the {a} and {b} arms differ"


def _check_delta(results: dict, key: str, sub: str) -> str:
    """The difference and interval a check was decided on (a comparison's, or a seed's `minus_base` /
    `minus_cross_play`), or "" where it reads none (results written before the checks read intervals)."""
    d = results["comparisons"].get(sub) if key == "interval_excludes_zero" else check_interval(results, key, sub)
    return "" if d is None else f"{s3(d['delta'])} {interval(d['lo'], d['hi'], signed=True)}"


def _comparison_line(comp: dict) -> str:
    return f"{comp['a']} − {comp['b']} = {s3(comp['delta'])} {interval(comp['lo'], comp['hi'], signed=True)} (95% interval)"


# -------------------------------------------------------------------------------------------- the contents

def eval_order(results: dict) -> list[str]:
    """Evaluation names grouped by kind (base teams, trained teams, cross-play, its other side), arm by arm."""
    out = []
    for kind in KINDS:
        for arm in arm_names(results):
            runs = [None] if kind == "base" else run_names(results, arm)
            out += [name for r in runs for name, _ in find_evals(results, arm, kind, r)]
    return out


def _describe(entry: dict) -> str:
    kind, run = eval_kind(entry)
    arm, seats = entry["arm"], list(entry["seats"])
    if kind == "base":
        return f"untrained base team, {arm} arm"
    if kind == "team":
        return f"trained team {run}"
    if kind == "cross":
        return f"trained {seats[0]} ({run}) + base {', '.join(seats[1:])}"
    if kind == "cross_seed":
        return f"trained {seats[0]} ({run}) + trained {', '.join(seats[1:])} ({entry['seats'][seats[1]]})"
    if kind == "role_swap":
        return f"trained team {run}, roles swapped (" + ", ".join(
            f"{seat} plays {role}'s" for seat, role in entry["roles"].items()) + ")"
    return f"base {seats[0]} + trained {', '.join(seats[1:])} ({run})"


def _cpu_text(cpu: dict | None) -> str:
    if not cpu:
        return NONE
    pins = ", ".join(f"{k}={v}" for k, v in cpu["pins"].items() if v is not None) or "none"
    where = cpu.get("processor")  # newer results: the machine, since pinned figures can differ across makers
    machine = f"{where['vendor']} {where['model']}{', AVX-512' if where['avx512'] else ''}; " if where else ""
    return f"{machine}{cpu['threads']} thread(s); pins {pins} (set {cpu['pinned']})"


def _protocol_text(protocol: dict) -> str:
    return (f"seats {', '.join(protocol['seats'])}; turns {', '.join(protocol['order'])}; limits "
            f"{', '.join(map(str, protocol['limits']))}; final turns {', '.join(map(str, protocol['finals']))}")


def _sections(results: dict) -> list[tuple]:
    """The report as a list of blocks: ("h1"|"h2"|"p"|"note", text), ("table", headers, rows), ("img", file, alt)."""
    run, evals = results["run"], results["evals"]
    arms, seeds, seats = arm_names(results), seed_names(results), seat_names(results)
    out: list[tuple] = [("h1", f"talktosolve report: preset {results['preset']}")]
    out.append(("p", f"{run['model']} · {len(seats)} seats · arms {', '.join(arms)} · seeds {', '.join(seeds)} · "
                     f"{run['steps']} steps"))

    out.append(("h2", "Headline"))
    comps = _comparisons(results)
    for key, comp in comps:
        out.append(("headline", _comparison_line(comp)))
    out.append(("p", "Verdict: " + verdict(results) + "."))
    for key, comp in comps:
        out.append(("p", f"{key}: paired over the same {comp['n_problems']} held-out problems; {comp['n_seeds_a']} "
                         f"{comp['a']} and {comp['n_seeds_b']} {comp['b']} training seeds; method {comp['method']} "
                         f"(se problems {f3(comp['se_problem'])}, se seeds {f3(comp['se_seed'])}, "
                         f"df {f3(comp['df'])})."))
        if comp.get("warning"):
            out.append(("note", "Warning: " + comp["warning"]))

    out.append(("h2", "Checks"))
    rows = []
    for key, value in results["checks"].items():
        text = CHECK_TEXT.get(key, "")
        if isinstance(value, dict):
            if not value:
                rows.append([key, NONE, NONE, "", text + " (does not apply)"])
            for sub, v in value.items():
                rows.append([key, sub, mark(v), _check_delta(results, key, sub), text])
        else:
            rows.append([key, "", mark(value), "", text])
    out.append(("table", ["check", "seed / comparison", "result", "decided on (95% interval)", "what it means"],
                rows))

    out.append(("h2", "Accuracy"))
    out.append(("p", "Mean of the graded answers per problem (every seat, every chat), over the held-out problems; "
                     "95% intervals over problems (per evaluation) and over problems and seeds (per arm)."))
    rows = []
    for name in eval_order(results):
        ev = evals[name]
        rows.append([name, _describe(ev), f3(ev["accuracy"]), interval(ev["lo"], ev["hi"])]
                    + [f3(ev["acc"][s]) for s in seats] + [str(ev["n_problems"])])
    for arm in arms:
        a = results["arms"][arm]
        rows.append([f"{arm} (all seeds)", f"trained teams, {arm} arm, {len(a['seeds'])} seeds", f3(a["accuracy"]),
                     interval(a["lo"], a["hi"])] + [NONE] * len(seats) + [""])
    out.append(("table", ["evaluation", "who", "accuracy", "95% interval"] + seats + ["problems"], rows))

    out.append(("h2", "Talk before and after training"))
    out.append(("p", "Shares of a seat's own-only numbers it sent (send) and of its partners' it used in its final "
                     "answer (use; use | sent: among those sent to it), pooled over seats; ask: its first message "
                     "asks something; agree: every boxed answer is the same number. Before = the untrained team; "
                     "after = each trained team. Per seat: send / use."))
    talk_names = [n for n in eval_order(results) if eval_kind(evals[n])[0] in ("base", "team")]
    rows = []
    for name in talk_names:
        t = evals[name]["talk"]
        stage = "before" if eval_kind(evals[name])[0] == "base" else "after"
        rows.append([name, stage] + [f3(t.get(k)) for k, _ in TALK_SHOWN]
                    + [f"{f3(t['seats'][s]['send'])} / {f3(t['seats'][s]['use'])}" for s in seats]
                    + [f3(evals[name]["tokens_per_message"])])
    out.append(("table", ["evaluation", "stage"] + [label for _, label in TALK_SHOWN]
                + [f"{s} send / use" for s in seats] + ["tokens / message"], rows))

    out.append(("h2", "Cross-play"))
    out.append(("p", f"Each trained model plays seat {seats[0]} with the untrained base in the other seats "
                     f"(cross-play), and the other side: the base in seat {seats[0]}, the trained model in the others; "
                     "each in its own arm."))
    rows = []
    for arm in arms:
        base = find_eval(results, arm, "base")
        for name in run_names(results, arm):
            team, cross = find_eval(results, arm, "team", name), find_eval(results, arm, "cross", name)
            others = find_eval(results, arm, "cross_others", name)
            if team is None or cross is None:
                continue
            rows.append([arm, str(results["runs"][name]["seed"]), f3(base[1]["accuracy"]) if base else NONE,
                         f3(team[1]["accuracy"]), f3(cross[1]["accuracy"]),
                         f3(others[1]["accuracy"]) if others else NONE,
                         s3(cross[1]["accuracy"] - team[1]["accuracy"])])
    out.append(("table", ["arm", "seed", "base team", "trained team", "cross-play", "other side", "cross − team"],
                rows))
    out += cross_seed_blocks(results) + variant_blocks(results) + role_swap_blocks(results)
    out += influence_sections(results)

    out.append(("h2", "Run"))
    data = results["data"]
    versions = ", ".join(f"{k} {v if v is not None else NONE}" for k, v in run["versions"].items())
    rows = [["preset", results["preset"]], ["model", run["model"]], ["versions", versions],
            ["protocol", _protocol_text(run["protocol"])],
            ["arms", ", ".join(arms)], ["seeds", ", ".join(seeds)], ["steps", str(run["steps"])],
            ["device", run["device"]], ["GPU", run["gpu"] or NONE], ["CPU", _cpu_text(run.get("cpu"))],
            ["time of all stages", _duration(run["wall_seconds"])],
            ["GPU time", _duration(run["gpu_seconds"])], ["last invocation started", run["started"]],
            ["last invocation finished", run["finished"]],
            ["train problems", str(data["n_train"])], ["test problems", str(data["n_test"])]]
    if data.get("eligibility"):
        for split, reasons in data["eligibility"].items():
            rows.append([f"eligibility ({split})", ", ".join(f"{k}: {v}" for k, v in reasons.items()) or NONE])
    out.append(("table", ["", ""], rows))

    out.append(("h2", "Figures"))
    for file, alt in (("learning_curves.png", "Learning curves: team reward per step, per arm and seed"),
                      ("accuracy.png", "Accuracy with 95% intervals"),
                      ("talk.png", "Talk metrics before and after training"),
                      ("cross_play.png", "Cross-play vs trained team vs base team")):
        out.append(("img", f"plots/{file}", alt))
    if "cross_seed" in results:
        out.append(("img", "plots/cross_seed.png", "Cross-seed matrix: run in the first seat x run in the others"))
    if results.get("influence"):
        out.append(("img", "plots/influence.png", "Influence of each message before and after training"))
    return out


# ----------------------------------------------------------------------------------------------- renderers

def render_markdown(results: dict) -> str:
    return markdown(_sections(results))


def render_html(results: dict) -> str:
    return html_page(_sections(results))


# ------------------------------------------------------------------------------------------------ writing

def write_report(results: dict, out_dir: Path) -> list[Path]:
    """Validate `results`, then write `plots/*.png`, `report.md` and `report.html` into `out_dir` (atomically,
    file by file); returns the paths written."""
    validate_results(results)
    out_dir = Path(out_dir)
    written: list[Path] = []
    for name, data in render_plots(results).items():
        path = out_dir / "plots" / name
        write_bytes(path, data)
        written.append(path)
    for name, text in (("report.md", render_markdown(results)), ("report.html", render_html(results))):
        path = out_dir / name
        write_text(path, text)
        written.append(path)
    return written
