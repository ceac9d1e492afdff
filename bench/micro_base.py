"""Pretrain a micro base from scratch, then measure the untrained team it makes.

    python bench/micro_base.py [--base micro|micro-teams] [--steps N] [--out DIR] [--json FILE] [--problems 200]
                               [--load DIR] [--teams [--heard-only]]

Prints the pretraining time and, for the untrained pair on held-out micro problems (`--problems` x 2 chats,
temperature 1, each arm): team accuracy (mean of A's and B's correctness), A's and B's accuracy, send, use, ask,
agree; and solo accuracy (one copy that sees every fact). Writes every figure as JSON. Targets (micro issue):
team accuracy 0.05-0.35 in the chat arm and lower in the cut arm, send 0.3-0.8, use at most 0.5, solo >= 0.9.
`--load DIR` skips pretraining and measures a saved base.

`--teams` measures teams of any protocol instead (`team_figures`, its own turn loop over `chat.view`, so it needs
neither the rollout nor the talk metrics): for each protocol and arm of `TEAM_RUNS`, team accuracy, each seat's
accuracy, the share of its non-final messages that state numbers (`states`) or ask (`asks`), the share of its
finals that take a partner's numbers (`takes`: a group marked `yours` or with a seat name) and whose running sum
is right step by step (`sums_ok`), agreement and truncation; then `heard_check`: each seat's final, greedy and
sampled, after scripted partners that stated every number and took none: `all` (it boxes the gold: it took and
summed every number it heard), `own` (it boxes its own hand's total), `other`. `--teams --heard-only` runs the
heard check alone (on `--problems` problems: quick on a CPU).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from talktosolve.arms import ARMS  # noqa: E402
from talktosolve.micro import base_recipe, script  # noqa: E402
from talktosolve.micro.base import load_micro_base, pretrain, solo_view, task_facts  # noqa: E402
from talktosolve.micro.prompts import micro_chat_config  # noqa: E402
from talktosolve.micro.task import answer_from_facts, make_problems  # noqa: E402
from talktosolve.micro.teams import corpus_protocol  # noqa: E402
from talktosolve.sampling.engine import Engine  # noqa: E402
from talktosolve.task.grading import extract_answer, grade_many, numeric_value  # noqa: E402
from talktosolve.team.chat import Seat, render_view, view  # noqa: E402

TEAM_RUNS = (("A,B,C,A,B,C", "chat"), ("A,B,C,A,B,C", "cut"), ("A,B,C,A,B,C", "full"), ("A,B,A,B", "chat"),
             ("A,B,A,B", "cut"), ("A,B,A,B,A,B", "chat"), ("A,B,A,B,A,B", "cut"))
"""The (turn order, arm) pairs `--teams` measures."""
LABELS = ("yours", "A", "B", "C", "D")


def _engine(model, tok, chat) -> Engine:
    return Engine(model, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, temperature=chat.temperature)


def solo_accuracy(model, tok, problems, *, seed: int = 1234, batch: int = 200) -> float:
    chat = micro_chat_config()
    engine = _engine(model, tok, chat)
    gen = torch.Generator(device=engine.device).manual_seed(seed)
    finals = []
    for i in range(0, len(problems), batch):
        part = problems[i:i + batch]
        prompts = [tok(tok.apply_chat_template(solo_view(task_facts(p), p.question, chat), tokenize=False,
                                               add_generation_prompt=True), add_special_tokens=False)["input_ids"]
                   for p in part]
        outs = engine.generate(prompts, chat.max_final_tokens, gen)
        finals += [tok.decode(o, skip_special_tokens=True) for o in outs]
    return sum(grade_many(finals, [p.gold for p in problems])) / max(len(problems), 1)


def pair_figures(model, tok, problems, arm: str, *, chats: int = 2, seed: int = 1234) -> dict:
    """Team accuracy and talk metrics of the pair (two copies of `model`) in `arm`."""
    from talktosolve.sampling.rollout import Player, play_chats
    from talktosolve.team.talk import aggregate_talk, talk_metrics

    chat = micro_chat_config()
    player = Player(_engine(model, tok, chat), tok, "base")
    played = play_chats(problems, arm, (player, player), chat, chats_per_problem=chats, seed=seed)
    talk = aggregate_talk([talk_metrics(c.seats["A"].facts, c.seats["B"].facts, c.seats["A"].question, c.messages)
                           for c in played])
    n = len(played)
    return {"team": sum(c.reward for c in played) / n, "acc_a": sum(c.correct["A"] for c in played) / n,
            "acc_b": sum(c.correct["B"] for c in played) / n,
            "truncated": sum(t.truncated for c in played for t in c.turns) / (4 * n),
            **{k: talk[k] for k in ("send", "send_a", "send_b", "use", "use_a", "use_b", "ask", "agree")},
            "example": [t.text for t in played[0].turns]}


def measure(model, tok, *, n_problems: int = 200, chats: int = 2, seed: int = 1234) -> dict:
    problems = make_problems("test", n_problems, 0)
    model.eval()
    out = {"solo": solo_accuracy(model, tok, problems, seed=seed)}
    for arm in ("chat", "cut"):
        out[arm] = pair_figures(model, tok, problems, arm, chats=chats, seed=seed)
    return out


# ---- teams of any protocol ---------------------------------------------------------------------------------------

def _complete(engine, tok, texts: list[str], max_tokens: int, gen) -> tuple[list[str], list[bool]]:
    """Each prompt text's completion (decoded, the stop token dropped) and whether it ran out of tokens."""
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    outs = []
    for i in range(0, len(prompts), 256):
        outs += engine.generate(prompts[i:i + 256], max_tokens, gen)
    return ([tok.decode(o, skip_special_tokens=True) for o in outs],
            [not o or o[-1] != tok.eos_token_id for o in outs])


def sums_ok(text: str) -> bool:
    """Whether a final's running sum is right step by step (`27 - 3 = 24 + 5 = 29`, never below 0) and boxes its
    last total; a final with no sum at all is not."""
    words = text.replace("\\boxed{", " \\boxed{ ").replace("}", " } ").replace(",", " ").split()
    total, steps, i = None, 0, 0
    while i < len(words):
        w = words[i]
        if w in ("+", "-") and i + 3 < len(words) and words[i + 2] == "=":
            if total is None or not (words[i + 1].isdigit() and words[i + 3].isdigit()):
                return False
            v = int(words[i + 1])
            total = max(0, total + v if w == "+" else total - v)
            if int(words[i + 3]) != total:
                return False
            steps, i = steps + 1, i + 4
        elif w.isdigit() and total is None:
            total, i = int(w), i + 1
        elif w == "\\boxed{":
            return total is not None and i + 1 < len(words) and words[i + 1] == str(total)
        else:
            i += 1
    return False


def _takes(text: str) -> bool:
    words = text.replace(",", " , ").split()
    return any(w in LABELS and (j == 0 or words[j - 1] == ",") for j, w in enumerate(words))


def play_team(engine, tok, problems, order: str, arm_name: str, *, chats: int = 2, seed: int = 1234):
    """`chats` chats per problem of a team of copies of the engine's model: (hands, problem) per chat, the
    messages, and whether each ran out of tokens."""
    protocol, chat = corpus_protocol(order)
    arm = ARMS[arm_name]
    games = [(arm.hands(p.facts, protocol.seats), p) for p in problems for _ in range(chats)]
    messages: list[list[str]] = [[] for _ in games]
    cut: list[list[bool]] = [[] for _ in games]
    gen = torch.Generator(device=engine.device).manual_seed(seed)
    for turn in range(protocol.n_turns):
        seat = protocol.speaker(turn)
        texts = [render_view(tok, view(Seat(h[seat], p.question), turn, m, arm, protocol, chat))
                 for (h, p), m in zip(games, messages)]
        outs, over = _complete(engine, tok, texts, protocol.max_tokens(turn), gen)
        for m, c, o, x in zip(messages, cut, outs, over):
            m.append(o)
            c.append(x)
    return protocol, games, messages, cut


def team_figures(engine, tok, problems_by_seats: dict, order: str, arm: str, *, chats: int = 2,
                 seed: int = 1234) -> dict:
    """The figures of `--teams` (module doc) for one protocol and arm."""
    protocol, _ = corpus_protocol(order)
    problems = problems_by_seats[len(protocol.seats)]
    protocol, games, messages, cut = play_team(engine, tok, problems, order, arm, chats=chats, seed=seed)
    n = len(games)
    out: dict = {"order": order, "arm": arm, "chats": n}
    per_seat = {}
    correct_sum = 0.0
    for seat in protocol.seats:
        f = protocol.final_turn(seat)
        finals = [m[f] for m in messages]
        right = grade_many(finals, [p.gold for _, p in games])
        correct_sum += sum(right)
        talk = [m[t] for m in messages for t in protocol.turns_of(seat) if t != f]
        per_seat[seat] = {"acc": sum(right) / n,
                          "states": sum(t.startswith("my numbers") for t in talk) / max(len(talk), 1),
                          "asks": sum(t.rstrip().endswith("?") or t.startswith("tell") for t in talk)
                          / max(len(talk), 1),
                          "takes": sum(map(_takes, finals)) / n, "sums_ok": sum(map(sums_ok, finals)) / n}
    boxed = [[numeric_value(extract_answer(m[protocol.final_turn(s)]) or "") for s in protocol.seats]
             for m in messages]
    out.update(team=correct_sum / (n * len(protocol.seats)), seats=per_seat,
               agree=sum(b[0] is not None and len(set(b)) == 1 for b in boxed) / n,
               truncated=sum(map(sum, cut)) / (n * protocol.n_turns), example=messages[0])
    return out


def _greedy(model, tok, texts: list[str], max_tokens: int) -> list[str]:
    """Greedy completions through transformers' own `generate` (left-padded batches)."""
    out = []
    for i in range(0, len(texts), 64):
        batch = tok(texts[i:i + 64], add_special_tokens=False, padding=True, return_tensors="pt").to(model.device)
        with torch.no_grad():
            ids = model.generate(**batch, max_new_tokens=max_tokens, do_sample=False, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.pad_token_id)
        out += tok.batch_decode(ids[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    return out


def heard_check(model, tok, problems, order: str, *, seed: int = 1234) -> dict:
    """Each seat's final after scripted partners that stated every number (and took none): greedy and sampled,
    the share boxing the gold (`all`), its own hand's total (`own`), or something else (`other`)."""
    protocol, chat = corpus_protocol(order)
    arm = ARMS["chat"]
    rep = script.Repertoire(p_state=1.0, p_ask=0.0, p_keep=1.0, p_use=0.0)
    rng = random.Random(seed)
    engine = Engine(model, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, temperature=1.0)
    gen = torch.Generator(device=engine.device).manual_seed(seed)
    out: dict = {}
    for mode in ("greedy", "sampled"):
        rows = {}
        for seat in protocol.seats:
            f = protocol.final_turn(seat)
            cases = []
            for p in problems:
                hands = arm.hands(p.facts, protocol.seats)
                messages = script.team_chat(hands, protocol, arm, rng, rep)
                cases.append((render_view(tok, view(Seat(hands[seat], p.question), f, messages[:f], arm, protocol,
                                                    chat)), p.gold, str(answer_from_facts(hands[seat]))))
            texts, limit = [c[0] for c in cases], protocol.max_tokens(f)
            finals = _greedy(model, tok, texts, limit) if mode == "greedy" else _complete(engine, tok, texts, limit,
                                                                                         gen)[0]
            boxed = [numeric_value(extract_answer(x) or "") for x in finals]
            n = len(cases)
            rows[seat] = {"all": sum(b == c[1] for b, c in zip(boxed, cases)) / n,
                          "own": sum(b == c[2] != c[1] for b, c in zip(boxed, cases)) / n,
                          "sums_ok": sum(map(sums_ok, finals)) / n, "example": finals[0]}
            rows[seat]["other"] = round(1 - rows[seat]["all"] - rows[seat]["own"], 9)
        out[mode] = rows
    return out


def measure_teams(model, tok, *, n_problems: int = 200, chats: int = 2, seed: int = 1234) -> dict:
    model.eval()
    problems = {n: make_problems("test", n_problems, 0, seats=n) for n in (2, 3)}
    engine = _engine(model, tok, micro_chat_config())
    out = {"solo3": solo_accuracy(model, tok, problems[3], seed=seed), "runs": []}
    for order, arm in TEAM_RUNS:
        out["runs"].append(team_figures(engine, tok, problems, order, arm, chats=chats, seed=seed))
    out["heard"] = heard_checks(model, tok, problems, n=100, seed=seed)
    return out


def heard_checks(model, tok, problems: dict, *, n: int, seed: int = 1234) -> dict:
    """`heard_check` on the first `n` problems, for A,B,C,A,B,C and A,B,A,B."""
    return {order: heard_check(model, tok, problems[k][:n], order, seed=seed)
            for order, k in (("A,B,C,A,B,C", 3), ("A,B,A,B", 2))}


def teams_table(fig: dict) -> str:
    lines = []
    if fig.get("runs"):
        lines.append(f"{'protocol':16s}{'arm':6s}{'team':>7s}{'agree':>7s}{'trunc':>7s}  per seat: "
                     "acc/states/asks/takes/sums_ok")
    for r in fig.get("runs", []):
        seats = "  ".join(f"{s} {v['acc']:.2f}/{v['states']:.2f}/{v['asks']:.2f}/{v['takes']:.2f}/{v['sums_ok']:.2f}"
                          for s, v in r["seats"].items())
        lines.append(f"{r['order']:16s}{r['arm']:6s}{r['team']:7.3f}{r['agree']:7.3f}{r['truncated']:7.3f}  {seats}")
    if "solo3" in fig:
        lines.append(f"solo accuracy on 3-seat problems (all facts): {fig['solo3']:.3f}")
    for order, modes in fig["heard"].items():
        for mode, rows in modes.items():
            lines.append(f"heard check {order} {mode}: " + "  ".join(
                f"{s} all {v['all']:.2f} own {v['own']:.2f} other {v['other']:.2f} sums_ok {v['sums_ok']:.2f}"
                for s, v in rows.items()))
    return "\n".join(lines)



def table(fig: dict) -> str:
    keys = ("team", "acc_a", "acc_b", "send", "send_a", "send_b", "use", "use_a", "use_b", "ask", "agree",
            "truncated")
    lines = [f"{'arm':6s}" + "".join(f"{k:>8s}" for k in keys)]
    for arm in ("chat", "cut"):
        row = fig[arm]
        lines.append(f"{arm:6s}" + "".join(f"{row[k]:8.3f}" if row[k] is not None else f"{'-':>8s}" for k in keys))
    lines.append(f"solo accuracy (all facts): {fig['solo']:.3f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="micro", help="which micro base to pretrain: micro or micro-teams")
    ap.add_argument("--teams", action="store_true", help="measure teams of several protocols (module doc)")
    ap.add_argument("--heard-only", action="store_true", help="with --teams: only the heard check (quick on a CPU)")
    ap.add_argument("--steps", type=int, default=None, help="pretraining steps (default: the recipe's)")
    ap.add_argument("--out", default=None, help="where to save the base (default: a temporary folder)")
    ap.add_argument("--load", default=None, help="measure this saved base instead of pretraining")
    ap.add_argument("--json", default="micro_base.json", help="where to write the figures")
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="pretrain and measure here (cpu; cuda for quick studies)")
    ap.add_argument("--train", nargs="*", default=[], metavar="KEY=VALUE",
                    help="override a pretraining setting of talktosolve.micro.base.TRAIN (studies)")
    ap.add_argument("--model", nargs="*", default=[], metavar="KEY=VALUE",
                    help="override a model setting of talktosolve.micro.base.MODEL (studies)")
    ap.add_argument("--corpus", nargs="*", default=[], metavar="KEY=VALUE",
                    help="override a corpus setting of talktosolve.micro.base.CORPUS (studies)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    result: dict = {}
    recipe = base_recipe(args.base)
    for flag, table_ in (("train", recipe.train), ("corpus", recipe.corpus), ("model", recipe.model)):
        for pair in getattr(args, flag):
            key, value = pair.split("=", 1)
            if key not in table_ or not isinstance(table_[key], (int, float)):
                raise SystemExit(f"--{flag} {pair}: no numeric setting `{key}`; settings: {', '.join(table_)}")
            table_[key] = type(table_[key])(float(value))
            result.setdefault(f"{flag}_overrides", {})[key] = table_[key]
    if args.load:
        path = Path(args.load)
    else:
        path = Path(args.out or tempfile.mkdtemp(prefix="micro-base-"))
        start = time.time()
        pretrain(path, steps=args.steps, threads=args.threads, device=args.device, progress=sys.stderr.isatty(),
                 recipe=recipe)
        result["pretrain_seconds"] = round(time.time() - start, 1)
        print(f"pretraining: {result['pretrain_seconds']} s -> {path}")
    model, tok = load_micro_base(path)
    model.to(args.device)
    result["parameters"] = sum(p.numel() for p in model.parameters())
    start = time.time()
    if args.teams and args.heard_only:
        model.eval()
        problems = {k: make_problems("test", args.problems, 0, seats=k) for k in (2, 3)}
        result["heard"] = heard_checks(model, tok, problems, n=args.problems)
    else:
        result.update((measure_teams if args.teams else measure)(model, tok, n_problems=args.problems))
    result["measure_seconds"] = round(time.time() - start, 1)
    result["path"] = str(path)
    if args.teams:
        print(teams_table(result))
        for r in result.get("runs", []):
            print(f"example {r['order']} {r['arm']}:", *r["example"], sep="\n  ")
    else:
        print(table(result))
        for arm in ("chat", "cut"):
            print(f"example {arm} chat:", *result[arm]["example"], sep="\n  ")
    Path(args.json).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
