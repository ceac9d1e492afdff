"""Partner-mixture training: which chats seat the frozen base (a function of seed and step), and a learner step
in which the frozen seats get no gradient and do not count in the token normaliser."""

import pytest

from talktosolve.experiment.partners import lineups, partner_seats


def test_partner_problems_are_the_share_drawn_from_seed_and_step():
    drawn = partner_seats(3, 7, 16, 0.5, ("A", "B"))
    assert sum(f is not None for f in drawn) == 8 and set(drawn) == {None, "A", "B"}
    assert drawn == partner_seats(3, 7, 16, 0.5, ("A", "B"))
    assert drawn != partner_seats(3, 8, 16, 0.5, ("A", "B")) and drawn != partner_seats(4, 7, 16, 0.5, ("A", "B"))
    assert partner_seats(3, 7, 16, 0.0, ("A", "B")) == [None] * 16
    assert None not in partner_seats(0, 0, 5, 1.0, ("A", "B", "C"))


def test_a_problems_chats_all_seat_its_partner_in_the_same_seat():
    chats = lineups(["B", None], 3, ("A", "B"), "learner", "base")
    assert chats == [{"A": "learner", "B": "base"}] * 3 + [{"A": "learner", "B": "learner"}] * 3


@pytest.mark.slow
def test_frozen_seats_get_no_gradient_and_are_not_counted_in_the_normaliser(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    from talktosolve.arms import ARMS
    from talktosolve.config import make_config
    from talktosolve.experiment.step import learn_role
    from talktosolve.micro.task import make_problems
    from talktosolve.model.policy import load_tokenizer
    from talktosolve.protocol import protocol_of
    from talktosolve.sampling.factory import make_engine
    from talktosolve.sampling.rollout import Player, play_chats

    cfg = make_config("micro", {"model": {"name_or_path": str(tiny_model_dir)},
                                "chat": {"max_message_tokens": 6, "max_final_tokens": 8},
                                "train": {"chats_per_problem": 2, "lr": 0.01}})
    tok = load_tokenizer(cfg.model)
    learner = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval().requires_grad_(False)

    def player(model, name):
        return Player(make_engine(model, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id), tok, name)

    protocol = protocol_of(cfg.chat)
    frozen = ["B", "A", "B"]
    chats = play_chats(make_problems("train", 3, seed=0), ARMS["chat"],
                       lineups(frozen, 2, protocol.seats, player(learner, "policy"), player(base, "base")),
                       protocol, cfg.chat, chats_per_problem=2, seed=5)
    for i, c in enumerate(chats):  # one chat of each group right: every advantage is +-0.5
        c.reward = float(i % 2)
    before_base = {n: p.clone() for n, p in base.named_parameters()}
    before_learner = {n: p.clone() for n, p in learner.named_parameters()}
    optimizer = torch.optim.AdamW(learner.parameters(), lr=cfg.train.lr)
    per_chat = [f for f in frozen for _ in range(2)]
    stats = learn_role(learner, optimizer, chats, cfg.train, tok.pad_token_id, "cpu", protocol.n_turns, per_chat)
    trained = [t for c, f in zip(chats, per_chat) for t in c.turns if t.speaker != f]
    assert stats.samples == len(trained) == 2 * len(chats)
    assert stats.tokens == sum(len(t.completion_ids) for t in trained)
    assert all(torch.equal(p, before_base[n]) for n, p in base.named_parameters())
    assert all(p.grad is None for p in base.parameters())
    assert any(not torch.equal(p, before_learner[n]) for n, p in learner.named_parameters())


def test_a_run_without_partners_keeps_the_key_it_had_before_partners_existed():
    from talktosolve.config import make_config
    from talktosolve.experiment.train import run_config

    assert "partners" not in run_config(make_config("micro"), "chat", 0)["train"]
    assert run_config(make_config("micro", {"train": {"partners": 0.5}}), "chat", 0)["train"]["partners"] == 0.5
