"""Where a recipe's time went when the lease ended before the recipe did, from what `real_weights.sh watch` kept.

    mkdir W && tar xzf watch.tgz -C W        # tar keeps each file's time as the GPU machine wrote it
    python bench/watched_timing.py W --started 08:15:00 --seen 08:40:59 --evaluations 38 --out timing.json

`bench/recipe_timing.py` times a recipe that ends; one that the lease cuts short leaves only the copies `watch`
made (each run's metrics, each played evaluation's summary). Their modification times date the stages, on the
GPU machine's clock (UTC): training ends when the last metrics row is written (the recipe evaluates only once
every run has trained); evaluations played together write their summaries within seconds of each other, so
summaries less than `--gap` seconds apart are one group, and a group's time runs from the end of the one before
(the first's from the end of training, loading its engines and capturing their graphs included). `--started` is
the recipe's start and `--seen` the last time the watch saw it running, both as that clock read them
(HH:MM:SS, the same day). With `--evaluations` (how many the recipe plans), those not played are projected at the
mean of the groups after the first, in groups as large as the largest played: the JSON's `projected` block,
a projection and named so, which leaves out what follows the evaluations (message influence where the preset
measures it, the comparisons and the report).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

from pair_figures import load as load_metrics
from pair_figures import seconds as step_seconds

from talktosolve.store import write_json


def clock(hhmmss: str, last: float) -> float:
    """HH:MM:SS (UTC) on the day of the time `last` (the last kept file's), as seconds since the epoch."""
    try:
        t = datetime.strptime(hhmmss, "%H:%M:%S").time()
    except ValueError:
        raise SystemExit(f"watched_timing: {hhmmss!r} is not a time as HH:MM:SS (UTC, the GPU machine's clock)")
    return datetime.combine(datetime.fromtimestamp(last, timezone.utc).date(), t, timezone.utc).timestamp()


def hhmmss(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S")


def groups(summaries: list[Path], gap: float) -> list[list[Path]]:
    """Summaries in the order written, cut where more than `gap` seconds pass between two."""
    out: list[list[Path]] = []
    last = None
    for p in sorted(summaries, key=lambda p: p.stat().st_mtime):
        t = p.stat().st_mtime
        if last is None or t - last > gap:
            out.append([])
        out[-1].append(p)
        last = t
    return out


def timing(folder: Path, started: float, seen: float, planned: int | None, gap: float) -> dict:
    runs = load_metrics(folder)
    trained = max(p.stat().st_mtime for p in folder.glob("runs/*/metrics.jsonl"))
    played = groups(sorted(folder.glob("evals/*/summary.json")), gap)
    ends = [trained] + [max(p.stat().st_mtime for p in g) for g in played]
    spans = [round(b - a) for a, b in zip(ends, ends[1:])]
    out = {
        "started": hhmmss(started),
        "seen": hhmmss(seen),
        "seconds_to_seen": round(seen - started),
        "training": {"runs": len(runs), "steps": len(next(iter(runs.values()))), "wall": round(trained - started),
                     **step_seconds(runs)},
        "evaluations": {"played": sum(len(g) for g in played), "groups": [len(g) for g in played],
                        "group_seconds": spans, "wall": round(ends[-1] - trained),
                        "played_in_order": [[p.parent.name for p in g] for g in played]},
    }
    if planned is not None and len(spans) > 1:
        left = planned - out["evaluations"]["played"]
        per_group = sum(spans[1:]) / len(spans[1:])
        more = math.ceil(left / max(len(g) for g in played)) if left > 0 else 0
        out["projected"] = {"evaluations": planned, "groups_left": more, "later_group_mean": round(per_group, 1),
                            "evaluations_wall": round(ends[-1] - trained + more * per_group),
                            "to_the_last_evaluation": round(ends[-1] - started + more * per_group)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="watch.tgz unpacked (runs/*/metrics.jsonl, evals/*/summary.json)")
    ap.add_argument("--started", required=True, help="the recipe's start, HH:MM:SS on the GPU machine's clock")
    ap.add_argument("--seen", required=True, help="the last time the watch saw the recipe running, HH:MM:SS")
    ap.add_argument("--evaluations", type=int, help="how many evaluations the recipe plans: project the rest")
    ap.add_argument("--gap", type=float, default=5.0, help="seconds between summaries that start a new group")
    ap.add_argument("--out", type=Path, help="write the JSON here (else print it)")
    args = ap.parse_args(argv)
    if not any(args.folder.glob("runs/*/metrics.jsonl")):
        raise SystemExit(f"watched_timing: {args.folder} holds no runs/*/metrics.jsonl; unpack watch.tgz into it")
    times = [p.stat().st_mtime for p in args.folder.rglob("*") if p.is_file()]
    started, seen = clock(args.started, max(times)), clock(args.seen, max(times))
    if not started <= min(times) <= max(times) <= seen + 1:  # the file times hold whole seconds
        raise SystemExit(f"watched_timing: the kept files were written from {hhmmss(min(times))} to "
                         f"{hhmmss(max(times))}, not between --started {args.started} and --seen {args.seen}")
    t = timing(args.folder, started, seen, args.evaluations, args.gap)
    if args.out is None:
        print(json.dumps(t, indent=1))
    else:
        write_json(args.out, t)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
