"""Two runs of one seed that differ in one setting, step by step: up to which step they drew the same chats, and
how they went apart after it.

A step's chats are drawn with the weights its previous steps left, from the run's seed: two runs of one seed whose
settings differ only in how they learn (a learning-rate warm-up, a KL term) draw the same chats at step 0 and part
from step 1 on, when their first updates differ. This reads each run's `metrics.jsonl` and finds the last step up
to which every figure of the drawn chats (reward, talk rates, tokens generated, draws and the groups that carried a
signal) is equal in both, then gives each span of steps the two runs' means: team reward, tokens generated, send,
draws and the gradient norm. It reads logged figures only, so it says whether the runs drew the same chats, not
which chats they drew.

    python bench/first_steps.py A/metrics.jsonl B/metrics.jsonl --labels warm-up none --steps 20 --out first.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from talktosolve.store import read_jsonl, write_json

# The figures of a step's drawn chats, logged before its update: equal in both runs while their weights are.
DRAWN = ("train/reward", "train/acc_A", "train/acc_B", "talk/send", "talk/use", "talk/ask", "perf/tokens",
         "train/draws", "train/groups_drawn", "train/informative_share")
# What each span reports, by the name it takes in the JSON.
MEANS = {"reward": "train/reward", "tokens": "perf/tokens", "send": "talk/send", "draws": "train/draws",
         "grad_norm": "loss/grad_norm"}


def read_steps(path: Path) -> list[dict]:
    """A run's logged steps in order, one row a step (of a step logged twice, the later line)."""
    by_step = {row["step"]: row for row in read_jsonl(path)}
    return [by_step[s] for s in sorted(by_step)]


def same_through(a: list[dict], b: list[dict]) -> int:
    """The last step up to which the two runs' drawn chats agree in every logged figure (-1: not even step 0)."""
    last = -1
    for x, y in zip(a, b):
        if x["step"] != y["step"] or any(x.get(k) != y.get(k) for k in DRAWN):
            break
        last = x["step"]
    return last


def spans(a: list[dict], b: list[dict], width: int, labels: tuple[str, str]) -> list[dict]:
    """Each span of `width` steps: both runs' means of MEANS."""
    out = []
    for lo in range(0, len(a), width):
        part = {"steps": [a[lo]["step"], a[min(lo + width, len(a)) - 1]["step"]]}
        for label, rows in zip(labels, (a[lo:lo + width], b[lo:lo + width])):
            part[label] = {name: sum(r[key] for r in rows) / len(rows) for name, key in MEANS.items()}
        out.append(part)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("metrics", nargs=2, type=Path, help="the two runs' metrics.jsonl")
    ap.add_argument("--labels", nargs=2, default=["a", "b"], help="a name for each run, in the same order")
    ap.add_argument("--steps", type=int, default=0, help="compare the first this many steps (0: all both have)")
    ap.add_argument("--span", type=int, default=5, help="steps a span of the table averages")
    ap.add_argument("--out", type=Path, required=True, help="the JSON to write")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.metrics if not p.is_file()]
    if missing:
        print(f"error: no such metrics file: {', '.join(missing)} (a run folder's runs/RUN/metrics.jsonl)",
              file=sys.stderr)
        return 2
    if args.labels[0] == args.labels[1] or args.span < 1 or args.steps < 0:
        print("error: --labels must differ, --span be 1 or more and --steps 0 or more", file=sys.stderr)
        return 2
    a, b = (read_steps(p) for p in args.metrics)
    n = min(len(a), len(b)) if args.steps == 0 else args.steps
    if n == 0 or len(a) < n or len(b) < n or [r["step"] for r in a[:n]] != [r["step"] for r in b[:n]]:
        print(f"error: the runs do not both have steps 0-{max(n, 1) - 1} (they have {len(a)} and {len(b)} steps)",
              file=sys.stderr)
        return 2
    a, b = a[:n], b[:n]
    labels = tuple(args.labels)
    result = {
        "command": " ".join(["python bench/first_steps.py", *map(str, args.metrics), "--labels", *labels,
                             f"--steps {n} --span {args.span} --out {args.out}"]),
        "runs": dict(zip(labels, map(str, args.metrics))), "steps": n,
        "same_chats_through_step": same_through(a, b), "spans": spans(a, b, args.span, labels),
    }
    print(f"same drawn chats through step {result['same_chats_through_step']} of {n}")
    print(f"{'steps':>7}  " + "  ".join(f"{f'{m} ' + lab:>16}" for m in MEANS for lab in labels))
    for part in result["spans"]:
        cells = [f"{part[lab][m]:16.4g}" for m in MEANS for lab in labels]
        print(f"{part['steps'][0]:>3}-{part['steps'][1]:<3}  " + "  ".join(cells))
    write_json(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
