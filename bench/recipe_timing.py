"""Time a whole recipe as a user runs it: the command's wall clock from its start to its results, and where it went.

    python bench/recipe_timing.py --out timing.json -- --preset paper --gsm8k GSM8K_DIR --out RUN_DIR \\
        --set model.name_or_path=MODEL_DIR --set seeds=0,1,2,3,4,5 --set train.runs_per_process=12 \\
        --set eval.batch_evals=6

runs `python -m talktosolve.cli recipe ARGS` (everything after `--`) in a process of its own, so that starting
Python, loading the model, compiling and every stage are counted, then reads the folder it wrote and writes
{"runs", "evaluations", "wall_seconds", "gpu_minutes", "stages", "training", ...}: `gpu_minutes` is the command's
wall clock in minutes where the recipe ran on a GPU (None on a CPU; `minutes` holds it either way). `stages`
splits it: training, evaluations and message influence as the recipe's results.json counts them (each run's,
evaluation's and influence measurement's own seconds), and the rest (starting Python, loading the model, splitting
the data, writing the report, and what an unfinished invocation did and lost). `training` is a step's
time as `bench/pair_figures.py` reads it from the runs' metrics: the runs' shares of a step summed, which is a
step's wall time when every run shares one process (`train.runs_per_process` at least the number of runs).

The folder must not exist yet: a recipe resumed from finished stages would time only what was left. A recipe
that stops before its results (out of memory at its evaluations, say) still has its time written, as one
unfinished invocation; run the script again with `--after` that file and the recipe's arguments, changed as the
error said, and the recipe resumes its folder while the new file counts every invocation's wall clock (its
`wall_seconds` and `gpu_minutes` are their sum):

    python bench/recipe_timing.py --out timing.json --after timing-1.json -- ... --set eval.batch_evals=3
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from pair_figures import load as load_metrics
from pair_figures import seconds as step_seconds

from talktosolve.cli import build_parser
from talktosolve.inputs import UsageError
from talktosolve.store import read_json, write_json


def out_dir(recipe_args: list[str]) -> Path:
    """The recipe's --out folder, as the CLI's own parser reads its arguments (which it checks on the way)."""
    try:
        out = build_parser().parse_args(["recipe", *recipe_args]).out
    except UsageError as e:
        raise SystemExit(f"recipe_timing: the recipe's arguments: {e}") from None
    if out is None:
        raise SystemExit("recipe_timing: give the recipe's arguments after `--`, with its --out folder")
    return Path(out)


def timing(folder: Path, invocations: list[dict]) -> dict:
    """What a finished recipe folder says about where its commands' wall clock went (`invocations`: each
    {"command", "wall_seconds", "returncode"}, the last the one that finished)."""
    wall_seconds = sum(i["wall_seconds"] for i in invocations)
    results = read_json(folder / "results.json")
    run = results["run"]
    influence = (results.get("influence") or {}).get("evals") or {}
    in_stages = {"training": run["train_seconds"],
                 "evaluations": sum(e["seconds"] for e in results["evals"].values()),
                 "influence": sum(e["seconds"] for e in influence.values())}
    in_stages["rest"] = wall_seconds - sum(in_stages.values())
    return {
        "command": invocations[-1]["command"],
        "invocations": invocations,
        "runs": len(results["runs"]),
        "evaluations": len(results["evals"]),
        "wall_seconds": round(wall_seconds, 1),
        "minutes": round(wall_seconds / 60, 2),
        "gpu_minutes": round(wall_seconds / 60, 2) if run["gpu"] else None,
        "stages": {k: round(v, 1) for k, v in in_stages.items()},
        "training": step_seconds(load_metrics(folder)),
        "device": {"device": run["device"], "gpu": run["gpu"], "cpu": run["cpu"], "versions": run["versions"]},
        "steps": run["steps"],
    }


def table(t: dict) -> str:
    rows = [("runs", t["runs"]), ("evaluations", t["evaluations"]), ("wall, s", t["wall_seconds"]),
            ("minutes" if t["gpu_minutes"] is None else "GPU minutes", t["minutes"]),
            *((f"  {k}, s", v) for k, v in t["stages"].items()),
            *((f"  {k}", v) for k, v in t["training"].items())]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def earlier(after: Path | None, folder: Path) -> list[dict]:
    """The unfinished invocations `--after` names, checked to be this folder's."""
    if after is None:
        return []
    if not after.is_file():
        raise SystemExit(f"recipe_timing: --after {after}: no such file; give the timing JSON an unfinished run wrote")
    t = read_json(after)
    if t.get("finished", True) or Path(t["folder"]).resolve() != folder.resolve():
        raise SystemExit(f"recipe_timing: --after {after} is not an unfinished timing of {folder}")
    return t["invocations"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="write the timing JSON here")
    ap.add_argument("--after", type=Path,
                    help="the timing JSON of this folder's unfinished invocations: resume the folder, count them too")
    ap.add_argument("recipe_args", nargs="*", metavar="-- RECIPE_ARGS",
                    help="the recipe's arguments, after `--` (`--preset ... --out RUN_DIR ...`)")
    args = ap.parse_args(argv)
    recipe_args = [a for i, a in enumerate(args.recipe_args) if not (i == 0 and a == "--")]
    folder = out_dir(recipe_args)
    before = earlier(args.after, folder)
    if folder.exists() and not before:
        raise SystemExit(f"recipe_timing: {folder} exists; a resumed recipe would time only its unfinished stages. "
                         "Give a new --out folder, or --after the timing JSON of its earlier invocations.")
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "talktosolve.cli", "recipe", *recipe_args])
    this = {"command": " ".join(["talktosolve", "recipe", *recipe_args]),
            "wall_seconds": round(time.perf_counter() - began, 1), "returncode": done.returncode}
    if done.returncode != 0:
        write_json(args.out, {"folder": str(folder), "finished": False, "invocations": before + [this]})
        raise SystemExit(f"recipe_timing: the recipe exited with {done.returncode} after {this['wall_seconds']:.0f} "
                         f"s; its time is in {args.out}: mend what the recipe said and rerun with --after {args.out}")
    t = {"folder": str(folder), "finished": True, **timing(folder, before + [this])}
    print(table(t))
    write_json(args.out, t)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
