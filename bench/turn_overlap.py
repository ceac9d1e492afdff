"""Decode steps of real chats turn by turn, against an engine whose rows go on to their chat's next turn.

The sampler plays chats turn by turn: each turn is one engine call over every chat of a training step (all the
runs sharing the process) or of an evaluation pass, and a call decodes until its slowest row ends. So a step pays
for the sum over turns of the longest message of each turn, while each chat wrote only its own messages. An engine
in which a row, once its message ends, goes on with its chat's next turn (the other seat reading that message)
would pay for the longest chat instead: the most, over chats, of the sum of its own messages. This reads the token
counts of chats a recipe wrote (training transcripts, evaluation chats), groups them into the calls the recipe
made, and prints both counts, with the rows still writing on average: a measurement of real chats' lengths, not of
a GPU. The row-steps (tokens written) are the same under both; what changes is how many decode steps they take,
and so how many rows each step carries. Not counted: the prefill each turn switch needs (the message read into
the partner's cache), which the turn-by-turn engine pays once per turn for every row together.

    python bench/turn_overlap.py RECIPE_DIR --out overlap.json [--batch-chats 128 --batch-evals 3 --order A,B,...]

RECIPE_DIR holds runs/*/transcripts.jsonl and evals/*/chats.jsonl, as a recipe writes them.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from talktosolve.experiment.plan import pass_groups


def lengths(chat: dict) -> list[int]:
    """A chat's message lengths in tokens, in turn order."""
    return [m["tokens"] for m in sorted(chat["messages"], key=lambda m: m["turn"])]


def counts(calls: list[list[list[int]]]) -> dict:
    """Decode steps of `calls` (each a list of chats, each its message lengths) played turn by turn and carried
    on from turn to turn, the row-steps both pay for, and how many calls hold a chat as long as the turns' longest
    messages together (where carrying on saves nothing)."""
    each = [(sum(max(c[t] for c in chats) for t in range(len(chats[0]))), max(sum(c) for c in chats))
            for chats in calls]
    by_turn, carried = sum(b for b, _ in each), sum(c for _, c in each)
    written = sum(sum(sum(c) for c in chats) for chats in calls)
    return {"calls": len(calls), "rows_per_call": max(len(chats) for chats in calls),
            "calls_no_shorter": sum(b == c for b, c in each),
            "decode_steps_turn_by_turn": by_turn, "decode_steps_carried_on": carried,
            "carried_over_turn_by_turn": carried / by_turn, "row_steps": written,
            "rows_writing_turn_by_turn": written / by_turn, "rows_writing_carried_on": written / carried}


def training_calls(recipe: Path) -> list[list[list[int]]]:
    """One call per training step, holding every run's chats of that step (the runs shared one process)."""
    steps: dict[int, list[list[int]]] = defaultdict(list)
    for path in sorted(recipe.glob("runs/*/transcripts.jsonl")):
        for line in path.open():
            chat = json.loads(line)
            steps[chat["step"]].append(lengths(chat))
    return [steps[s] for s in sorted(steps)]


def evaluation_calls(recipe: Path, batch_chats: int, batch_evals: int,
                     order: list[str] | None = None) -> list[list[list[int]]]:
    """One call per pass: at most `batch_evals` evaluations played together, grouped as the recipe groups them
    (`plan.pass_groups`), `batch_chats` chats of each; the evaluations in `order` (their folder names, as the
    recipe played them), else in name order."""
    names = order or sorted(p.parent.name for p in recipe.glob("evals/*/chats.jsonl"))
    evals = [[lengths(json.loads(line)) for line in (recipe / "evals" / n / "chats.jsonl").open()] for n in names]
    calls = []
    for group in pass_groups(evals, batch_evals):
        for start in range(0, max(len(e) for e in group), batch_chats):
            calls.append([c for e in group for c in e[start:start + batch_chats]])
    return calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipe", type=Path, help="a recipe folder with runs/*/transcripts.jsonl, evals/*/chats.jsonl")
    ap.add_argument("--batch-chats", type=int, default=128, help="eval.batch_chats the evaluations ran with")
    ap.add_argument("--batch-evals", type=int, default=3, help="eval.batch_evals the evaluations ran with")
    ap.add_argument("--order", default="", help="the evaluations in the order the recipe played them, their folder "
                                                "names comma-separated (default: name order)")
    ap.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = ap.parse_args()
    order = [n for n in args.order.split(",") if n]
    missing = [n for n in order if not (args.recipe / "evals" / n / "chats.jsonl").is_file()]
    if missing:
        raise SystemExit(f"--order names {', '.join(missing)}, with no evals/NAME/chats.jsonl in {args.recipe}.")
    found = {"training steps": training_calls(args.recipe),
             "evaluation passes": evaluation_calls(args.recipe, args.batch_chats, args.batch_evals, order)}
    if not any(found.values()):
        raise SystemExit(f"{args.recipe}: no runs/*/transcripts.jsonl or evals/*/chats.jsonl to read.")
    out = {"recipe": str(args.recipe), "batch_chats": args.batch_chats, "batch_evals": args.batch_evals,
           "order": order or "by name",
           "kinds": {kind: counts(calls) for kind, calls in found.items() if calls}}
    print(f"{'calls':18} {'n':>5} {'rows':>5} {'steps, turn by turn':>20} {'carried on':>11} {'ratio':>6} "
          f"{'rows writing':>13}")
    for kind, c in out["kinds"].items():
        print(f"{kind:18} {c['calls']:5d} {c['rows_per_call']:5d} {c['decode_steps_turn_by_turn']:20d} "
              f"{c['decode_steps_carried_on']:11d} {c['carried_over_turn_by_turn']:6.2f} "
              f"{c['rows_writing_turn_by_turn']:6.0f} -> {c['rows_writing_carried_on']:.0f}")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
