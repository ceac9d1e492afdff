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

The modules stand on floors, low to high. A module imports only from its own floor or a lower one, and no
imports go round in a circle (`tests/test_layers.py` checks both, module-level and function-level imports
alike). Names are modules of this package: `micro` is `micro/__init__.py`, `talktosolve` this file; a folder's
`__init__.py` (`task`, `team`, ...) only names its concern, so it stands on the lowest floor.

    rules:     arms protocol config_checks task.numbers task.magnitude task.grading task.split team.talk team.reward
               stats config_values config team.chat task.data team.influence experiment.diagnose experiment.crossplay
               experiment.results experiment.plan experiment.partners learning.informative sampling.prefixes store folders
               experiment.pages tracking learning.distributed cpu_pins task team model sampling learning
               experiment experiment.stopping
    worlds:    task.tasks micro.task micro.prompts micro.script micro.tokenizer
    kernels:   sampling.decode_attention sampling.decode_sampling sampling.fast_layers sampling.prefill_attention
               sampling.compaction learning.learn_packing
    model:     model.policy model.checkpoint
    bases:     micro micro.base micro.teams model.smollm2 talktosolve
    sampling:  sampling.engine sampling.weights sampling.fast_engine sampling.factory sampling.rollout
    play:      experiment.evaluate experiment.frozen experiment.seating experiment.replay
    learning:  learning.logprobs learning.grpo experiment.pool experiment.step experiment.train
    recipe:    experiment.recipe experiment.assemble experiment.report_options experiment.report experiment.summary
               experiment.plots
    entry:     cli inputs __main__

`rules` are pure records and functions (no torch); `worlds` the problems a config names; `kernels` the
attention, sampling and packing math the sampler and the learner share; `model` loading, fine-tuning and saving
weights; `bases` the built-in models, which plug into model loading (`policy.register_builtin`) when this
package is imported; `sampling` plays chats turn by turn; `play` evaluates teams and holds frozen partners;
`learning` the GRPO update and the loop; `recipe` the whole recipe and its report; `entry` the command line.
"""

__version__ = "0.2.0"

from talktosolve import micro  # noqa: F401  (registers the micro bases with model loading: `micro/__init__.py`)
from talktosolve.arms import ARMS, Arm
from talktosolve.protocol import Protocol
from talktosolve.stats import paired_delta
from talktosolve.task.grading import grade_answer
from talktosolve.task.split import Split, split_problem
from talktosolve.team.talk import talk_metrics, team_talk

__all__ = ["ARMS", "Arm", "Protocol", "Split", "grade_answer", "paired_delta", "split_problem", "talk_metrics",
           "team_talk", "__version__"]
