"""How many seconds a running recipe folder still needs: its training steps left at the pace of its last steps,
then its evaluations. `bench/pairs.sh` asks it when a pair reaches its deadline: a pair that would end before
the lease does (`FINISH_BY`) goes on, one that would not stops there and is kept for the next lease.

The pace is a step's wall time, the runs' `perf/seconds` summed (runs sharing a process each log their share of
a step), over the last steps done (step 0, which compiles, only while it is the one step done); the steps left
are the config's `train.steps` less the steps every run has logged. Evaluations are not projected from anything
the folder holds: their time is given (`--eval-seconds`), less the time since training ended once it has.

    python bench/pair_eta.py /tmp/real/warm-s3 --eval-seconds 180

prints the seconds left as a whole number; with no step logged yet it says so on stderr and exits 1.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

PACE_STEPS = 10
"""The last steps a pace is the mean of: enough to smooth a step's noise, few enough to follow a run whose
messages grow longer."""


def seconds_left(rows: list[list[dict]], steps: int, eval_seconds: float, since_trained: float | None = None,
                 pace_steps: int = PACE_STEPS) -> float | None:
    """Seconds a recipe still needs: `rows`, each run's metrics rows so far; `steps`, a run's steps in all;
    `since_trained`, seconds since every run finished training (None while one still trains). None when no
    step is logged by every run yet (no pace)."""
    if since_trained is not None:
        return max(eval_seconds - since_trained, 0.0)
    done = min(len(r) for r in rows) if rows else 0
    if done == 0:
        return None
    wall = [sum(r[i]["perf/seconds"] for r in rows) for i in range(done)]
    recent = wall[max(1, done - pace_steps):] or wall
    return (steps - done) * sum(recent) / len(recent) + eval_seconds


def folder_left(folder: Path, eval_seconds: float, now: float | None = None) -> float | None:
    """`seconds_left` for a recipe folder as it is being written (`runs/*/metrics.jsonl`, `done.json`)."""
    config = json.loads((folder / "config.json").read_text())
    runs = sorted(p for p in (folder / "runs").glob("*") if p.is_dir()) if (folder / "runs").is_dir() else []
    done = [r / "done.json" for r in runs]
    if runs and all(d.exists() for d in done):
        return seconds_left([], config["train"]["steps"], eval_seconds,
                            (time.time() if now is None else now) - max(d.stat().st_mtime for d in done))
    rows = [[json.loads(line) for line in (r / "metrics.jsonl").read_text().splitlines() if line.strip()]
            if (r / "metrics.jsonl").exists() else [] for r in runs]
    return seconds_left(rows, config["train"]["steps"], eval_seconds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="the recipe's folder, as it runs")
    ap.add_argument("--eval-seconds", type=float, required=True,
                    help="what the recipe's evaluations take once training ends")
    args = ap.parse_args(argv)
    if not (args.folder / "config.json").is_file():
        print(f"pair_eta: {args.folder} holds no config.json yet: the recipe has not started there", file=sys.stderr)
        return 1
    left = folder_left(args.folder, args.eval_seconds)
    if left is None:
        print(f"pair_eta: no step of {args.folder} is logged by every run yet: no pace to project", file=sys.stderr)
        return 1
    print(round(left))
    return 0


if __name__ == "__main__":
    sys.exit(main())
