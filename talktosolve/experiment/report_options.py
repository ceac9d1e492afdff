"""The report's sections that a recipe's options add: the cross-seed matrix (`eval.cross_seed`), the variant
against its arm (`variant`), the role swap (per-role weights) and message influence (`eval.influence`). Each
returns report blocks (`pages.py`), none when its option was off.
"""

from __future__ import annotations

from talktosolve.experiment.pages import NONE, f3, interval, mark, s3
from talktosolve.experiment.results import arm_names, find_evals, seat_names


def influence_rows(results: dict, arm: str, kinds) -> list[tuple[dict, dict, dict]]:
    """(base entry, trained entry, trained - base) of each message, listener and kind of `arm`."""
    a = results["influence"]["arms"][arm]
    out = []
    for t, d in zip(a["trained"], a["trained_minus_base"]):
        if t["kind"] in kinds:
            b = next(e for e in a["base"] if (e["turn"], e["listener"], e["kind"]) == (t["turn"], t["listener"], t["kind"]))
            out.append((b, t, d))
    return out


def influence_sections(results: dict) -> list[tuple]:
    inf = results.get("influence")
    if not inf:
        return []
    out = [("h2", "Message influence"),
           ("p", f"Each team evaluation's first {inf['n_problems']} problems replayed from their recorded chats with "
                 "one message changed for its listeners (the partners who answer after it) and the rest re-sampled "
                 "with the control replay's seeds: remove shows (no message), replace shows the same seat's message "
                 "of another problem, renumber swaps its own-only numbers for others of the same shape. drop: the "
                 "listener's accuracy lost against the unchanged replay; flip: the share of its answers that "
                 "changed; follow: the share of its final messages holding a planted number, over the control's. Before = the "
                 "untrained team; after = the trained teams, pooled over seeds (95% intervals over problems and "
                 "seeds); after − before is paired over problems.")]
    for arm in inf["arms"]:
        rows = []
        for b, t, d in influence_rows(results, arm, inf["kinds"]):
            rows.append([f"turn {t['turn']}: {t['writer']} → {t['listener']}", t["kind"],
                         f"{s3(b['drop']['mean'])} {interval(b['drop']['lo'], b['drop']['hi'], signed=True)}",
                         f"{s3(t['drop']['mean'])} {interval(t['drop']['lo'], t['drop']['hi'], signed=True)}",
                         f"{s3(d['delta'])} {interval(d['lo'], d['hi'], signed=True)}",
                         f3(t["flip"]["mean"]), f3(t["follow"]["mean"]) if t["follow"] else NONE,
                         f3(t["changed"]["mean"])])
        out.append(("p", f"{arm} arm:"))
        out.append(("table", ["message", "ablation", "drop before", "drop after", "after − before", "flip after",
                              "follow after", "changed"], rows))
    return out


SIDE_TEXT = {"team": "trained team", "cross": "cross-play (trained first seat + base)",
             "cross_others": "other side (base first seat + trained)", "both_sides": "cross-play, both sides (mean)"}


def cross_seed_blocks(results: dict) -> list[tuple]:
    """The cross-seed matrix of each line of runs, and its self-play minus cross-seed delta."""
    if "cross_seed" not in results:
        return []
    first = seat_names(results)[0]
    out: list[tuple] = [("h2", "Cross-seed matrix"),
                        ("p", f"Each trained run in seat {first} with another seed's run of the same line in the other "
                              "seats (zero-shot coordination); the diagonal is each trained team. Cells: accuracy "
                              "[95% interval over problems]. self − cross-seed: each run's own team minus the mean "
                              "of its meetings with the others, paired over problems, interval over problems and "
                              "seeds.")]
    for line, m in results["cross_seed"].items():
        rows = [[run] + [f"{f3(a)} {interval(lo, hi)}" for a, lo, hi in zip(m["accuracy"][i], m["lo"][i], m["hi"][i])]
                for i, run in enumerate(m["runs"])]
        out.append(("table", [f"{line}: seat {first} \\ others"] + m["runs"], rows))
        d = m["self_minus_cross"]
        out.append(("p", f"{line}: self − cross-seed = {s3(d['delta'])} {interval(d['lo'], d['hi'], signed=True)}."))
    return out


def variant_blocks(results: dict) -> list[tuple]:
    """The variant's runs against its arm's, side by side: the paired deltas, then the figures themselves (talk
    and the role swap included)."""
    v = results.get("variant")
    if v is None:
        return []
    arm = results["arms"][v["arm"]]
    how = []
    if v["partners"] > 0:
        who = {"base": "the frozen untrained base", "snapshot": "a frozen snapshot of its own weights"}.get(
            v.get("partner", "base"), f"the frozen run {v.get('partner')}")
        how.append(f"with a share {f3(v['partners'])} of each step's problems seating {who} in one seat")
    if v.get("adapters") == "per_role":
        how.append("with one set of trained weights per seat (per-role), each trained on its seat's messages only")
    rows = []
    for side, d in v["against_arm"].items():
        rows.append([SIDE_TEXT[side], s3(d["delta"]), interval(d["lo"], d["hi"], signed=True), mark(d["excludes_zero"])])
    side_by_side = [["trained team", f"{f3(arm['accuracy'])} {interval(arm['lo'], arm['hi'])}",
                     f"{f3(v['accuracy'])} {interval(v['lo'], v['hi'])}"]]
    for key in ("send", "use"):
        side_by_side.append([f"{key} (trained teams, mean over seeds)", f3(_line_talk(results, v["arm"], v["arm"], key)),
                             f3(_line_talk(results, v["name"], v["arm"], key))])
    for name, entry in ((v["arm"], arm), (v["name"], v)):
        if "role_swap" in entry:
            d = entry["role_swap"]
            side_by_side.append([f"team − role swap ({name})", *([NONE] if name == v["name"] else []),
                                 f"{s3(d['delta'])} {interval(d['lo'], d['hi'], signed=True)}",
                                 *([NONE] if name == v["arm"] else [])])
    return [("h2", f"Variant {v['name']}"),
            ("p", f"The {v['arm']} arm trained {' and '.join(how) or 'as its arm'}; its trained teams "
                  f"{f3(v['accuracy'])} {interval(v['lo'], v['hi'])} against the {v['arm']} arm's "
                  f"{f3(arm['accuracy'])} {interval(arm['lo'], arm['hi'])}. Each delta: {v['name']} − {v['arm']}, "
                  "paired over problems, interval over problems and seeds."),
            ("table", ["figure", f"{v['name']} − {v['arm']}", "95% interval", "excludes 0"], rows),
            ("table", ["figure", v["arm"], v["name"]], side_by_side)]


def _line_talk(results: dict, line: str, arm: str, key: str) -> float | None:
    """A talk metric of a line's trained teams, averaged over its seeds (None where no team has it)."""
    runs = [name for name, r in results["runs"].items() if r.get("variant", r["arm"]) == line]
    values = [e["talk"].get(key) for name in runs for _, e in find_evals(results, arm, "team", name)]
    values = [x for x in values if x is not None]
    return sum(values) / len(values) if values else None


def role_swap_blocks(results: dict) -> list[tuple]:
    """Per-role lines: each trained team against the same weights with their seats' roles swapped."""
    lines = [(arm, results["arms"][arm]) for arm in arm_names(results)] + (
        [(results["variant"]["name"], results["variant"])] if "variant" in results else [])
    lines = [(name, entry) for name, entry in lines if "role_swap" in entry]
    if not lines:
        return []
    out: list[tuple] = [("h2", "Role swap"),
                        ("p", "Runs with per-role weights, played with each seat's weights in the next seat (with two "
                              "seats: A's in B's seat and B's in A's). Team − swap is paired over problems, interval "
                              "over problems and seeds.")]
    rows = []
    for name, entry in lines:
        for seed, e in entry["seeds"].items():
            rows.append([name, seed, f3(e["accuracy"]), f3(e["role_swap"]), s3(e["accuracy"] - e["role_swap"])])
        d = entry["role_swap"]
        rows.append([name, "all", f3(entry["accuracy"]), NONE,
                     f"{s3(d['delta'])} {interval(d['lo'], d['hi'], signed=True)}"])
    out.append(("table", ["line", "seed", "trained team", "roles swapped", "team − swap"], rows))
    return out
