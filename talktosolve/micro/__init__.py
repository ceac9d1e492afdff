"""The micro world: a synthetic split-fact task, a word-level tokenizer and a tiny Qwen2 model the project
pretrains itself, so the whole recipe runs on a CPU in minutes with nothing downloaded.

* `task`: the problems (`make_problems(split, n, seed, seats)`: a family per team size), their gold, and the
  one-hand oracle.
* `tokenizer`: `build_tokenizer()` (word level, one token per number) and `load_tokenizer(path)`.
* `prompts`: `MICRO_PROMPTS` (a `PromptConfig` dict) and `MICRO_CHAT` (token limits).
* `script`: the scripted chats the bases imitate (their repertoire), for any protocol and arm.
* `base`: a base as a recipe record, the two-seat `micro` base, pretraining (`pretrain`) and the cached folder
  (`micro_base_path`).
* `teams`: the `micro-teams` base, pretrained on chats of 2, 3 and 4 seats.

This file plugs the two bases into model loading and the task into the problems: importing it registers `BASES`
with `policy.register_builtin` and the `micro` task with `tasks.register_task`,
so `model.name_or_path=micro` loads the cached base like any model folder (`talktosolve/__init__.py` imports
this package, so the names are known wherever talktosolve is). Only `base_folder` loads the bases' modules.
"""

from __future__ import annotations

from pathlib import Path

from talktosolve.model.policy import register_builtin
from talktosolve.task.tasks import register_task

BASES = ("micro", "micro-teams")
"""The micro bases, by the model name a config gives (`model.name_or_path`)."""


def base_recipe(name: str):
    """The recipe (`base.BaseRecipe`) of the base a config names: `micro` or `micro-teams`."""
    from talktosolve.micro.base import MICRO
    from talktosolve.micro.teams import TEAMS

    recipes = {MICRO.name: MICRO, TEAMS.name: TEAMS}
    if name not in recipes:
        raise ValueError(f"no micro base `{name}`; micro bases are {', '.join(recipes)}")
    return recipes[name]


def base_folder(name: str) -> Path:
    """The folder of the micro base `name`: cached, else copied from the shipped checkpoint, else pretrained
    once (`base.micro_base_path`)."""
    from talktosolve.micro.base import micro_base_path

    return micro_base_path(base_recipe(name))


def make_problems(split: str, n: int, seed: int, seats: tuple[str, ...]) -> list:
    """The micro task's problems for a team of `seats` (`task.make_problems`; two seats: the original stream)."""
    from talktosolve.micro.task import make_problems as make

    return make(split, n, seed, **({} if len(seats) == 2 else {"seats": len(seats)}))


for _name in BASES:
    register_builtin(_name, base_folder)
register_task("micro", make_problems)
