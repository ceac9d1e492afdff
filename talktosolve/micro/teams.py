"""The micro teams base (`micro-teams`): a second tiny Qwen2 base, pretrained on scripted chats of several team
shapes, for the micro world's teams of 2 to 4 seats.

It is built exactly as the two-seat `micro` base is (`base.pretrain`, `base.micro_base_path(name="micro-teams")`,
the same loss and number embeddings); what differs is in `TEAMS`:

* **Vocabulary**: the micro tokenizer's words plus `TEAM_WORDS` (the seat names C and D, and `and`, with which the
  prompts name several partners: `Your partner is B and C.`). So its token ids are not the `micro` base's.
* **Corpus** (`TEAMS_CORPUS`, `TeamsCorpus`), drawn afresh for every batch from a fixed seed. Each draw picks a
  protocol (`protocols`: its turn order and weight; seats in order of first turn) and a train problem of the
  family with that many seats (`task.make_problems("train", n_problems, problem_seed, seats)`, never a test
  text). With probability `solo_draws` the draw is a solo problem (`base.solo_view`: every fact, then
  `script.solo_answer`). Otherwise it is a scripted chat (`script.team_chat` with `repertoire`) in an arm drawn
  from `arms` (`full` deals every seat every fact), giving one sequence per seat: the seat's view before its
  final turn (holding its own earlier messages as assistant parts), then that final and `<|end|>`. The loss is
  on assistant tokens only, sums' results weighted as in `base`.
* **Model and training** (`TEAMS_MODEL` on top of `base.MODEL`, `TEAMS_TRAIN`): see the tables below.

The repertoire takes a partner's numbers with probability 0.5 (the `micro` base: 0.3), so that a 3-seat team
of scripted seats, which needs every seat's numbers in every final, is right often enough for the team reward to
teach something: scripted teams (`team_chat` itself, not the model) score 0.156 in A,B,C,A,B,C and 0.364 in
A,B,A,B on 1,000 test problems (see `tests/test_micro_teams.py` for how that is computed).

The shipped checkpoint (`assets-teams/`) was pretrained on a GPU (`base.pretrain(out, recipe=TEAMS,
device="cuda")`); `micro_base_path(name="micro-teams", rebuild=True)` pretrains one on the CPU instead (the same
recipe, another floating-point path, so not the same weights).
"""

from __future__ import annotations

import random
from pathlib import Path

from talktosolve.arms import ARMS
from talktosolve.chat import Seat, render_view, view
from talktosolve.micro import script, task
from talktosolve.micro.base import MODEL, BaseRecipe, Corpus, solo_view
from talktosolve.micro.prompts import micro_chat_config
from talktosolve.micro.tokenizer import END
from talktosolve.protocol import protocol_of

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
TEAMS_TRAIN = dict(steps=3000, batch=64, lr=3e-3, warmup=100, min_lr_ratio=0.05, weight_decay=0.1, grad_clip=1.0,
                   number_init=0.1, result_weight=3.0)
TEAMS_VERSION = 1
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
    from talktosolve.grading import grade_answer

    protocol, _ = corpus_protocol(order)
    rep = rep or script.Repertoire(**TEAMS_CORPUS["repertoire"])
    rng = random.Random(seed)
    total = 0.0
    for p in task.make_problems("test", n, 0, seats=len(protocol.seats)):
        hands = ARMS[arm].hands(p.facts, protocol.seats)
        messages = script.team_chat(hands, protocol, ARMS[arm], rng, rep)
        total += sum(grade_answer(messages[protocol.final_turn(s)], p.gold) for s in protocol.seats) / len(hands)
    return total / max(n, 1)
