"""Held-out evaluation on a tiny random model: what its progress bar shows while it runs."""

import pytest

from talktosolve.config import make_config
from talktosolve.experiment.evaluate import evaluate
from talktosolve.micro.task import make_problems


@pytest.mark.slow
def test_the_progress_bar_moves_turn_by_turn_within_one_batch(tiny_model_dir, tmp_path, monkeypatch):
    import tqdm.auto

    updates = []

    class Recording(tqdm.auto.tqdm):
        def update(self, n=1):
            updates.append((self.total, n))
            return super().update(n)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recording)
    cfg = make_config("micro", {"model": {"name_or_path": str(tiny_model_dir)}, "data": {"n_test": 6},
                                "eval": {"n_problems": 6, "chats_per_problem": 2, "batch_chats": 12},
                                "chat": {"max_message_tokens": 4, "max_final_tokens": 4}})
    evaluate(cfg, make_problems("test", 6, 0), tmp_path / "ev", progress=True)
    # 6 problems x 2 chats in one batch: the bar counts 48 messages, 12 at each of the 4 turns.
    assert updates == [(48, 12)] * 4


def test_a_gpu_out_of_memory_in_an_evaluation_ends_in_one_line_naming_the_batch_to_lower(tmp_path, monkeypatch,
                                                                                           capsys):
    import torch

    import talktosolve.experiment.evaluate
    from talktosolve.cli import main

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(talktosolve.experiment.evaluate, "play_chats", out_of_memory)
    out = tmp_path / "ev"
    assert main(["eval", "--preset", "tiny", "--arm", "chat", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "eval.batch_chats=48" in err and "--set eval.batch_chats=24" in err
    assert not (out / "summary.json").exists()
