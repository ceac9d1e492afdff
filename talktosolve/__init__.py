"""talktosolve: train copies of a language model to solve problems together by talking, with GRPO on the
team's outcome, and measure honestly whether the talk made them better.

The public API (stable names; the CLI is built on them):

- `split_problem(text) -> Split`: the split-fact rule (A gets facts 1, 3, 5, ..., B 2, 4, ...).
- `grade_answer(final_message, gold) -> bool`: last `\\boxed{}` only, bounded time.
- `talk_metrics(facts_a, facts_b, question, messages) -> dict`: send, use, ask, agree.
- `paired_delta(chat, cut, *, seed=0) -> (delta, lo, hi)`: the chat-vs-cut comparison.

Heavier pieces (training, evaluation, the recipe) import torch and live in their modules.
"""

__version__ = "0.1.0"

from talktosolve.grading import grade_answer
from talktosolve.split import Split, split_problem
from talktosolve.stats import paired_delta
from talktosolve.talk import talk_metrics

__all__ = ["Split", "grade_answer", "paired_delta", "split_problem", "talk_metrics", "__version__"]
