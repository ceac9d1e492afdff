"""Time the README's main command (the micro recipe) stage by stage, on this machine's CPU.

    python bench/micro_recipe.py [--out runs/micro] [--pretrain] [--json micro_recipe.json]

Runs `talktosolve recipe` (preset micro) into `--out` if it is not finished there (a finished folder is only
read), then prints the time of every stage from the run's own records (each training run's summed step times,
each evaluation's and each influence replay's time) and the whole command's wall time. `--pretrain` also pretrains the micro base from
scratch into a temporary folder and times it (the shipped checkpoint makes that stage optional for users).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="runs/micro")
    ap.add_argument("--pretrain", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    out = Path(args.out)
    res: dict = {"stages": []}
    if args.pretrain:
        from talktosolve.micro.base import pretrain

        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            pretrain(Path(tmp) / "base", progress=False)
            res["stages"].append(["pretrain micro base", time.perf_counter() - t])
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "talktosolve.cli", "recipe", "--preset", "micro", "--out", str(out),
                    "--quiet"], check=True)
    res["recipe_command_seconds"] = time.perf_counter() - t
    for run in sorted((out / "runs").iterdir()):
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        res["stages"].append([f"train {run.name} ({len(rows)} steps)", sum(r["perf/seconds"] for r in rows)])
    for ev in sorted((out / "evals").iterdir()):
        res["stages"].append([f"eval {ev.name}", json.loads((ev / "summary.json").read_text())["seconds"]])
    for ev in sorted((out / "evals").iterdir()):
        if (ev / "influence" / "influence.json").is_file():
            seconds = json.loads((ev / "influence" / "influence.json").read_text())["seconds"]
            res["stages"].append([f"influence {ev.name}", seconds])
    res["influence_seconds"] = sum(s for name, s in res["stages"] if name.startswith("influence "))
    results = json.loads((out / "results.json").read_text())
    res["recorded_compute_seconds"] = results["run"]["wall_seconds"]
    width = max(len(name) for name, _ in res["stages"])
    for name, seconds in res["stages"]:
        print(f"{name:<{width}}  {seconds:8.1f} s")
    print(f"{'all stages (recorded)':<{width}}  {sum(s for _, s in res['stages']):8.1f} s")
    print(f"this command's wall time: {res['recipe_command_seconds']:.1f} s (a finished folder is only read)")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
