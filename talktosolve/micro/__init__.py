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
"""
