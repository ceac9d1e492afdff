"""The micro teams base (`micro-teams`): a second tiny Qwen2 base, pretrained on scripted chats of several team
shapes, for the micro world's teams of 2 to 4 seats.

It is built exactly as the two-seat `micro` base is (`base.pretrain`, `base.micro_base_path(TEAMS)`, the same
loss and number embeddings); what differs is in `TEAMS`:

* **Vocabulary**: the micro tokenizer's words plus `TEAM_WORDS` (the seat names C and D, and `and`, with which the
  prompts name several partners: `Your partner is B and C.`): 221 tokens. Its ids are not the `micro` base's.
* **Corpus** (`TEAMS_CORPUS`, `TeamsCorpus`), drawn afresh for every batch from a fixed seed. Each draw picks a
  protocol (`protocols`: turn order and weight; seats in order of first turn) and a train problem of the family
  with that many seats (`task.make_problems("train", n_problems, problem_seed, seats)`, never a test text).
  With probability `solo_draws` the draw is a solo problem (`base.solo_view`: every fact, then
  `script.solo_answer`). Otherwise it is a scripted chat (`script.team_chat` with `repertoire`) in an arm drawn
  from `arms` (`full` deals every seat every fact), giving one sequence per seat: the seat's view before its
  final turn (holding its own earlier messages as assistant parts), then that final and `<|end|>`. The loss is
  on assistant tokens only, sums' results weighted as in `base`. Of 20,000 sequences (`TeamsCorpus(tok).texts`),
  19.7% are solo, 14.6% from A,B,A,B, 9.2% A,B,A,B,A,B, 43.4% A,B,C,A,B,C and 13.1% A,B,C,D,A,B,C,D.
* **Model and training**: `base.MODEL`'s shape (3 layers, hidden 128: 669,312 parameters, 2.7 MB in fp32) and
  `base.TRAIN`'s schedule over 5,000 steps of 64 sequences instead of 800, 100 warm-up steps (`TEAMS_TRAIN`).

The repertoire takes a partner's numbers with probability 0.5 (the `micro` base: 0.3), so that a 3-seat team,
which needs every seat's numbers in every final, is right often enough for the team reward to teach something:
scripted seats themselves (`scripted_team_accuracy`, 1,000 test problems) score 0.150 in A,B,C,A,B,C (cut
0.002) and 0.364 in A,B,A,B.

The shipped checkpoint (`assets-teams/`) was pretrained on one H200 GPU by `python bench/micro_base.py --base
micro-teams --teams --problems 500 --device cuda --threads 1`: 158.7 s of training, final loss 0.090
(`assets-teams/micro.json`). The same command measured the untrained team on 500 test problems x 2 chats at
temperature 1 (team: the mean over seats of a boxed gold; takes: finals that take some partner's numbers):

| protocol    | arm  | team  | seats' accuracy      | takes            |
|-------------|------|-------|----------------------|------------------|
| A,B,C,A,B,C | chat | 0.149 | A 0.05 B 0.13 C 0.26 | 0.45, 0.68, 0.74 |
| A,B,C,A,B,C | cut  | 0.003 | A 0.00 B 0.01 C 0.00 | 0, 0, 0          |
| A,B,C,A,B,C | full | 0.983 | A 0.98 B 0.98 C 0.99 | 0, 0, 0          |
| A,B,A,B     | chat | 0.362 | A 0.24 B 0.49        | 0.26, 0.49       |
| A,B,A,B     | cut  | 0.015 | A 0.03 B 0.00        | 0, 0             |
| A,B,A,B,A,B | chat | 0.406 | A 0.32 B 0.49        | 0.38, 0.49       |
| A,B,A,B,A,B | cut  | 0.015 | A 0.03 B 0.00        | 0, 0             |

Solo accuracy on 3-seat problems: 0.996; at least 99% of every seat's finals had a running sum right step by
step. Each seat's final after partners that stated every number (the heard check of that command, 100
problems, sampled): in 3-seat views A boxed the gold (took and summed all it heard) 0.20 of the time and its own
hand's total 0.36 (B 0.28 / 0.21, C 0.28 / 0.29; the rest took some partners only); in 2-seat views A 0.32 / 0.68,
B 0.56 / 0.44. On a CPU, `python bench/micro_base.py --load talktosolve/micro/assets-teams --teams --heard-only
--problems 40` gave, sampled, A 0.28 / 0.25, B 0.30 / 0.28, C 0.30 / 0.30 (2 seats: A 0.42 / 0.57, B 0.55 /
0.45) and, greedy (transformers' `generate`), all-taken 0.00, 0.42, 0.12 for A, B, C (2 seats: 0.15, 0.38);
every running sum right. So the base states, asks, takes and sums what it heard, as a mixture in which a team
is usually wrong. In the same GPU call a repertoire taking with probability 0.6 gave A,B,C,A,B,C chat 0.202
(full 0.958) and A,B,A,B 0.419; in an earlier call (on a 3-seat family that still let some hands short of all
total the gold), 3,000 steps gave A,B,C,A,B,C chat 0.106 (full 0.927, solo 0.983) and 4 layers with 3,000
steps 0.084 (0.958, 0.977), against 0.140 (0.996, 1.000) with 5,000 steps.

`micro_base_path(TEAMS, rebuild=True)` pretrains one on the CPU instead: the same recipe, another
floating-point path, so not the same weights, and slow: the `micro` base's 800 steps took 958.6 s on 2 CPU cores
(`assets/micro.json`), and this recipe runs 5,000 steps of longer sequences.
"""

from __future__ import annotations

import random
from pathlib import Path

from talktosolve.arms import ARMS
from talktosolve.micro import script, task
from talktosolve.micro.base import MODEL, BaseRecipe, Corpus, solo_view
from talktosolve.micro.prompts import micro_chat_config
from talktosolve.micro.tokenizer import END
from talktosolve.protocol import protocol_of
from talktosolve.team.chat import Seat, render_view, view

TEAM_WORDS = ("C D", "and")
"""The words the teams' chats write that the two-seat micro world never does."""

TEAMS_MODEL = dict(MODEL)
"""The model: `base.MODEL`'s shape (3 layers, hidden 128)."""
TEAMS_CORPUS = dict(
    problem_seed=7, n_problems=20_000,
    protocols={"A,B,A,B": 0.25, "A,B,A,B,A,B": 0.15, "A,B,C,A,B,C": 0.5, "A,B,C,D,A,B,C,D": 0.1},
    arms={"chat": 0.75, "cut": 0.15, "full": 0.1},
    solo_draws=0.4,
    repertoire=dict(p_state=0.6, p_ask=0.2, p_keep=0.7, p_use=0.5),
)
TEAMS_TRAIN = dict(steps=5000, batch=64, lr=3e-3, warmup=100, min_lr_ratio=0.05, weight_decay=0.1, grad_clip=1.0,
                   number_init=0.1, result_weight=3.0)
TEAMS_VERSION = 2
"""Bump when the corpus or training code changes in a way the settings above do not show."""

ASSETS_TEAMS = Path(__file__).parent / "assets-teams"


def corpus_protocol(order: str):
    """The protocol (and its micro chat config) of a corpus entry such as `A,B,C,A,B,C`."""
    turns = tuple(order.split(","))
    seats = tuple(dict.fromkeys(turns))
    chat = micro_chat_config(seats=seats, order=turns)
    return protocol_of(chat), chat


class TeamsCorpus(Corpus):
    """Batches of (ids, loss mask) from the teams corpus (module doc): the same batches for the same seed."""

    stream = "micro-teams-corpus"

    def setup(self) -> None:
        c = TEAMS_CORPUS
        self.protocols = {order: corpus_protocol(order) for order in c["protocols"]}
        sizes = sorted({len(p.seats) for p, _ in self.protocols.values()})
        self.families = {n: task.make_problems("train", c["n_problems"], c["problem_seed"], seats=n) for n in sizes}
        self.chat = micro_chat_config()
        self.rep = script.Repertoire(**c["repertoire"])

    def _pick(self, weights: dict) -> str:
        return self.rng.choices(list(weights), list(weights.values()))[0]

    def texts(self, n: int) -> list[str]:
        """`n` training texts (each a view plus the message written after it)."""
        out: list[str] = []
        while len(out) < n:
            protocol, chat = self.protocols[self._pick(TEAMS_CORPUS["protocols"])]
            p = self.rng.choice(self.families[len(protocol.seats)])
            if self.rng.random() < TEAMS_CORPUS["solo_draws"]:
                facts = list(p.facts)
                out.append(render_view(self.tok, solo_view(facts, p.question, self.chat))
                           + script.solo_answer(facts) + END)
                continue
            arm = ARMS[self._pick(TEAMS_CORPUS["arms"])]
            hands = arm.hands(p.facts, protocol.seats)
            messages = script.team_chat(hands, protocol, arm, self.rng, self.rep)
            for seat in protocol.seats:
                final = protocol.final_turn(seat)
                seen = view(Seat(hands[seat], p.question), final, messages[:final], arm, protocol, chat)
                out.append(render_view(self.tok, seen) + messages[final] + END)
        return out[:n]


TEAMS = BaseRecipe("micro-teams", TEAMS_MODEL, TEAMS_CORPUS, TEAMS_TRAIN, TEAMS_VERSION, TEAM_WORDS, TeamsCorpus,
                   ASSETS_TEAMS)
"""The teams base, the `micro-teams` model."""


def scripted_team_accuracy(order: str, n: int = 1000, seed: int = 0, rep=None, arm: str = "chat") -> float:
    """Team accuracy of scripted seats (`script.team_chat` with the teams repertoire) on `n` test problems of the
    protocol `order`: the mean over problems of the share of seats whose final boxes the gold."""
    from talktosolve.task.grading import grade_answer

    protocol, _ = corpus_protocol(order)
    rep = rep or script.Repertoire(**TEAMS_CORPUS["repertoire"])
    rng = random.Random(seed)
    total = 0.0
    for p in task.make_problems("test", n, 0, seats=len(protocol.seats)):
        hands = ARMS[arm].hands(p.facts, protocol.seats)
        messages = script.team_chat(hands, protocol, ARMS[arm], rng, rep)
        total += sum(grade_answer(messages[protocol.final_turn(s)], p.gold) for s in protocol.seats) / len(hands)
    return total / max(n, 1)
