"""The micro world: a synthetic split-fact task, a word-level tokenizer and a tiny Qwen2 model the project
pretrains itself, so the whole recipe runs on a CPU in minutes with nothing downloaded.

* `task`: the problems (`make_problems(split, n, seed)`), their gold, and the one-half oracle.
* `tokenizer`: `build_tokenizer()` (word level, one token per number) and `load_tokenizer(path)`.
* `prompts`: `MICRO_PROMPTS` (a `PromptConfig` dict) and `MICRO_CHAT` (token limits).
* `script`: the scripted chats the base imitates (its repertoire).
* `base`: the model, its pretraining (`pretrain`) and the cached folder (`micro_base_path`).
"""
