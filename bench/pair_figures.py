"""The figures a real-weights pair's provenance records, from its runs' metrics: training reward and talk per span
of steps, a step's wall time and its parts, and what the steps that needed a second sampling pass cost.

A pair (one seed's chat and cut runs, sharing one process) writes one metrics row per run and step. Runs sharing a
process split a step's time between them (`perf/seconds` is each run's share), so a step's wall time is the sum
over the runs. Informative groups (`train.dynamic_sampling`) draw batches in passes of `train.draw_batches`; a
step's `train/draws` says how many each run drew, so steps group by how many passes they took.

    python bench/pair_figures.py bench/results/experiments/paper-stable-warmup-pairs-qwen2.5-coder-1.5b/seed-1

prints {"training": ..., "seconds": ..., "passes": ...} (`--out FILE` writes it). The folder holds the metrics
either as a recipe writes them (`runs/RUN/metrics.jsonl`) or as they are committed (`metrics/RUN.jsonl`).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


def load(folder: Path) -> dict[str, list[dict]]:
    """Each run's metrics rows, by run name, from either layout."""
    files = sorted(folder.glob("runs/*/metrics.jsonl")) or sorted(folder.glob("metrics/*.jsonl"))
    runs = {(f.parent.name if f.name == "metrics.jsonl" else f.stem):
            [json.loads(line) for line in f.read_text().splitlines() if line.strip()] for f in files}
    if not runs:
        raise SystemExit(f"pair_figures: {folder} holds no runs/*/metrics.jsonl or metrics/*.jsonl")
    steps = {name: [r["step"] for r in rows] for name, rows in runs.items()}
    first = next(iter(steps.values()))
    if any(s != first for s in steps.values()) or first != list(range(len(first))):
        raise SystemExit(f"pair_figures: the runs of {folder} do not all hold steps 0 to N once each")
    return runs


def _mean(rows: list[dict], key: str, a: int, b: int, digits: int) -> float:
    xs = [r[key] for r in rows[a:b + 1]]
    return round(sum(xs) / len(xs), digits)


def spans(n: int, width: int) -> list[tuple[int, int]]:
    """Steps 0..n-1 cut into spans of `width` (the last may be shorter)."""
    return [(a, min(a + width, n) - 1) for a in range(0, n, width)]


def training(runs: dict[str, list[dict]], width: int = 20) -> dict:
    """Per run: reward per span; draws, informative share, send and use in the first and last span; tokens."""
    out = {}
    for name, rows in runs.items():
        cut = spans(len(rows), width)
        t = {f"reward_steps_{a}_{b}": _mean(rows, "train/reward", a, b, 4) for a, b in cut}
        for a, b in (cut[0], cut[-1]):
            for key, label, digits in (("train/draws", "draws", 2), ("train/informative_share", "informative_share", 4),
                                       ("talk/send", "send", 4), ("talk/use", "use", 4)):
                if key in rows[a]:
                    t[f"{label}_steps_{a}_{b}"] = _mean(rows, key, a, b, digits)
        t["tokens_step_0"] = rows[0]["perf/tokens"]
        t[f"tokens_steps_{cut[-1][0]}_{cut[-1][1]}"] = round(_mean(rows, "perf/tokens", *cut[-1], 1))
        out[name] = t
    return out


def _summed(runs: dict[str, list[dict]], keys: tuple[str, ...]) -> list[dict]:
    """Per step, each of `keys` summed over the runs (runs sharing a process each log their share of a step)."""
    rows = list(runs.values())
    return [{key: sum(r[i][key] for r in rows) for key in keys} for i in range(len(rows[0]))]


def seconds(runs: dict[str, list[dict]]) -> dict:
    """A step's wall time (the runs' shares summed), its sampling and learning parts, the peak GPU memory."""
    per = _summed(runs, ("perf/seconds", "perf/sample_seconds", "perf/learn_seconds"))
    last = len(per) - 1
    out = {"step_0": round(per[0]["perf/seconds"], 1),
           f"step_mean_steps_1_{last}": _mean(per, "perf/seconds", 1, last, 2),
           f"sample_mean_steps_1_{last}": _mean(per, "perf/sample_seconds", 1, last, 2),
           f"learn_mean_steps_1_{last}": _mean(per, "perf/learn_seconds", 1, last, 2),
           "training": round(sum(r["perf/seconds"] for r in per), 1)}
    peaks = [r["perf/peak_gpu_gb"] for run in runs.values() for r in run if "perf/peak_gpu_gb" in r]
    if peaks:
        out["peak_gpu_gb"] = round(max(peaks), 1)
    return out


def passes(runs: dict[str, list[dict]]) -> dict:
    """Steps 1.. grouped by each run's `train/draws`: how many, which, their mean sampling time and tokens."""
    rows = list(runs.values())
    if any("train/draws" not in r[0] for r in rows):
        return {}
    per = _summed(runs, ("perf/sample_seconds", "perf/tokens"))
    steps = range(1, len(per))
    key = {i: tuple(r[i]["train/draws"] for r in rows) for i in steps}
    out = {"runs": list(runs)}
    for draws, count in sorted(Counter(key.values()).items()):
        mine = [i for i in steps if key[i] == draws]
        out["draws_" + "_".join(map(str, draws))] = {
            "steps": count, "first": mine[0], "last": mine[-1],
            "sample_seconds_mean": round(sum(per[i]["perf/sample_seconds"] for i in mine) / count, 2),
            "tokens_mean": round(sum(per[i]["perf/tokens"] for i in mine) / count)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="the pair's folder (a recipe's, or its committed copy)")
    ap.add_argument("--span", type=int, default=20, help="steps a span of the training figures holds (default 20)")
    ap.add_argument("--out", type=Path, help="write the JSON here too")
    args = ap.parse_args(argv)
    if args.span < 1:
        ap.error(f"--span is {args.span}; give 1 or more steps")
    runs = load(args.folder)
    result = {"training": training(runs, args.span), "seconds": seconds(runs), "passes": passes(runs)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
