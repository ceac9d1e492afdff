"""talktosolve: train copies of a language model to solve problems together by talking, with GRPO on the
team's outcome, and measure honestly whether the talk made them better.

The public API (stable names; the CLI is built on them):

- `split_problem(text, seats=("A", "B")) -> Split`: facts and question, the facts dealt round-robin to the seats.
- `grade_answer(final_message, gold) -> bool`: last `\\boxed{}` only, bounded time.
- `talk_metrics(facts_a, facts_b, question, messages) -> dict`: send, use, ask, agree of a two-copy chat;
  `team_talk(hands, question, messages, protocol)` for any team.
- `paired_delta(chat, cut, *, seed=0) -> (delta, lo, hi)`: the paired comparison of two arms.
- `Protocol` (seats, turn order, limits, finals) and `ARMS` (`chat`, `cut`, `full`): the team's shape as data.

Heavier pieces (training, evaluation, the recipe) import torch and live in their modules.
"""

__version__ = "0.2.0"

from talktosolve.arms import ARMS, Arm
from talktosolve.grading import grade_answer
from talktosolve.protocol import Protocol
from talktosolve.split import Split, split_problem
from talktosolve.stats import paired_delta
from talktosolve.talk import talk_metrics, team_talk

__all__ = ["ARMS", "Arm", "Protocol", "Split", "grade_answer", "paired_delta", "split_problem", "talk_metrics",
           "team_talk", "__version__"]
