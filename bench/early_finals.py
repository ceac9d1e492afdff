"""How long a run's finals were in its first steps, against how the run ended: over the diagnoses of finished runs.

`talktosolve diagnose` cuts each run's training into spans and gives, per span, the mean length of every message
of the protocol and the team reward over every chat drawn. This reads those `diagnosis.json` files (from recipe
folders or committed copies) and, per run, puts the mean length of its finals (the graded messages) in its first
span beside its reward in its last span and its verdict. Then, over the chat runs only (a cut run has no partner
to learn from), how many ended at `--bar` or above among those whose first-span finals averaged under
`--short` tokens and among the rest, with a one-sided Fisher exact test of that split. The split is descriptive:
`--short` is a reading of the runs, not a constant of the method. A run's arm is read from its folder's records:
results.json's `runs`, or else the recipe's config.json (the runs its arms and seeds plan).

    python bench/early_finals.py RUN_FOLDER... --out early_finals.json
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from talktosolve.store import read_json, write_json


def run_arms(folder: Path) -> dict[str, str] | None:
    """{run: arm} from the folder's results.json, or else from the runs its config.json plans; None without either
    (a recipe stopped before its results has only its config)."""
    if (folder / "results.json").is_file():
        return {name: run["arm"] for name, run in read_json(folder / "results.json")["runs"].items()}
    if (folder / "config.json").is_file():
        from talktosolve.config import make_config
        from talktosolve.experiment.plan import trained_lines

        values = read_json(folder / "config.json")
        values.pop("preset", None)
        cfg = make_config(overrides=values)
        return {name: line.arm for line in trained_lines(cfg) for name in line.runs(cfg.seeds)}
    return None


def rows(folder: Path, diagnosis: dict, arms: dict[str, str]) -> list[dict]:
    """One row per run of a folder's diagnosis.json: first-span finals, last-span reward, verdict."""
    out = []
    for name, run in diagnosis["runs"].items():
        bins = run["bins"]
        finals = run.get("finals", [2, 3])  # diagnoses older than the field had the two-seat protocol's finals
        out.append({
            "folder": str(folder), "run": name, "arm": arms[name],
            "steps_first": bins[0]["steps"], "steps_last": bins[-1]["steps"],
            "finals_tokens_first": sum(bins[0]["tokens"][i] for i in finals) / len(finals),
            "reward_first": bins[0]["reward"], "reward_last": bins[-1]["reward"],
            "verdict": run.get("verdict"),
            "held_out": diagnosis.get("evals", {}).get(name, {}).get("reward"),
        })
    return out


def fisher_one_sided(a: int, b: int, c: int, d: int) -> float:
    """P(X <= a) for the 2x2 table [[a, b], [c, d]] with its margins fixed (hypergeometric)."""
    n, row, col = a + b + c + d, a + b, a + c
    def p(x: int) -> float:
        return math.comb(col, x) * math.comb(n - col, row - x) / math.comb(n, row)
    return sum(p(x) for x in range(max(0, row + col - n), a + 1))


def split(runs: list[dict], short: float, bar: float) -> dict:
    """The chat runs cut at `short` first-span finals tokens: how many of each part ended at `bar` or above."""
    chat = [r for r in runs if r["arm"] == "chat"]
    parts = {"short": [r for r in chat if r["finals_tokens_first"] < short],
             "longer": [r for r in chat if r["finals_tokens_first"] >= short]}
    counts = {k: {"runs": len(v), "reached_bar": sum(r["reward_last"] >= bar for r in v)} for k, v in parts.items()}
    s, lo = counts["short"], counts["longer"]
    p = fisher_one_sided(s["reached_bar"], s["runs"] - s["reached_bar"],
                         lo["reached_bar"], lo["runs"] - lo["reached_bar"])
    return {"short_tokens": short, "bar": bar, **counts, "fisher_one_sided_p": p}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="recipe folders (or copies) holding diagnosis.json")
    ap.add_argument("--short", type=float, default=30.0, help="first-span finals under this many tokens are short")
    ap.add_argument("--bar", type=float, default=0.20, help="the last-span training reward a chat run must reach")
    ap.add_argument("--out", type=Path, required=True, help="the JSON to write")
    args = ap.parse_args(argv)
    missing = [str(f) for f in args.folders if not (f / "diagnosis.json").is_file()]
    if missing:
        print(f"error: no diagnosis.json in {', '.join(missing)} (run `talktosolve diagnose FOLDER` first)",
              file=sys.stderr)
        return 2
    arms = {f: run_arms(f) for f in args.folders}
    unknown = [str(f) for f, a in arms.items() if a is None]
    if unknown:
        print(f"error: neither results.json nor config.json in {', '.join(unknown)}: a run's arm is read from them",
              file=sys.stderr)
        return 2
    diagnoses = {f: read_json(f / "diagnosis.json") for f in args.folders}
    strays = [f"{f}/{name}" for f, d in diagnoses.items() for name in d["runs"] if name not in arms[f]]
    if strays:
        print(f"error: {', '.join(strays)} diagnosed but not among its folder's planned runs", file=sys.stderr)
        return 2
    runs = sorted((r for f in args.folders for r in rows(f, diagnoses[f], arms[f])),
                  key=lambda r: r["finals_tokens_first"])
    result = {"command": " ".join(["python bench/early_finals.py", *map(str, args.folders),
                                   f"--short {args.short:g} --bar {args.bar:g} --out {args.out}"]),
              "runs": runs, "split": split(runs, args.short, args.bar)}
    print(f"{'finals, first span':>18}  {'reward, last span':>17}  {'held out':>8}  run")
    for r in runs:
        held = "" if r["held_out"] is None else f"{r['held_out']:.3f}"
        print(f"{r['finals_tokens_first']:18.1f}  {r['reward_last']:17.3f}  {held:>8}  {r['folder']} {r['run']}"
              f" ({r['verdict'] or 'no verdict'})")
    sp = result["split"]
    print(f"chat runs with first-span finals under {args.short:g} tokens: {sp['short']['reached_bar']} of "
          f"{sp['short']['runs']} reached {args.bar:g}; the rest: {sp['longer']['reached_bar']} of "
          f"{sp['longer']['runs']} (one-sided Fisher p = {sp['fisher_one_sided_p']:.3f})")
    write_json(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
