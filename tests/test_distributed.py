"""Data-parallel training on CPU with the gloo backend: 2 processes give the single-process update."""

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from talktosolve.learning.grpo import Sample, grpo_update

pytestmark = pytest.mark.slow


def make_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg)


def make_samples():
    g = torch.Generator().manual_seed(1)
    out = []
    for chat in range(8):  # 2 problems x 4 chats; one advantage per chat
        adv = (chat % 4 - 1.5) / 2
        for _ in range(4):
            prompt = torch.randint(1, 50, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g).tolist()
            out.append(Sample(prompt, torch.randint(1, 50, (5,), generator=g).tolist(), adv, chat))
    return out


def update(samples, n_tokens=None):
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    stats = grpo_update(model, opt, samples, pad_id=0, chats_per_microbatch=1, grad_clip=1.0, device="cpu",
                        n_tokens=n_tokens)
    return stats, {k: v.detach().clone() for k, v in model.state_dict().items()}


def worker(rank, world, port, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    samples = make_samples()
    mine = [s for s in samples if (s.group // 4) % world == rank]  # whole problems per rank
    stats, state = update(mine, n_tokens=sum(len(s.completion_ids) for s in samples))
    torch.save({"loss": stats.loss, "grad_norm": stats.grad_norm, "state": state}, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_equal_one_process(tmp_path):
    mp.spawn(worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    single_stats, single_state = update(make_samples())
    for r in ranks:
        assert r["loss"] == pytest.approx(single_stats.loss, abs=1e-6)
        assert r["grad_norm"] == pytest.approx(single_stats.grad_norm, rel=1e-5)
        for k, v in single_state.items():
            # Adam's first step moves each weight by about lr = 1e-2 whatever its gradient's size, so fp32
            # rounding (the ranks pad to other widths) can show as ~1e-6 on a near-zero gradient: 1e-5 is 0.1% of
            # a step, far below what a wrong gradient (a missed rank, a wrong normaliser) would show.
            torch.testing.assert_close(r["state"][k], v, atol=1e-5, rtol=1e-5)
    for k in single_state:  # and the two ranks hold exactly the same weights
        assert torch.equal(ranks[0]["state"][k], ranks[1]["state"][k])


def test_torchrun_train_cli(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "talktosolve.cli", "train", "--preset", "tiny", "--arm", "chat", "--seed", "0", "--out", str(out),
           "--quiet", "--set", f"model.name_or_path={tiny_model_dir}", "--set", "train.steps=2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    # A failing rank's own traceback comes first; torchrun's summary of the failure last.
    assert done.returncode == 0, f"{done.stderr[:4000]}\n...\n{done.stderr[-1500:]}"
    import json

    info = json.loads((out / "done.json").read_text())
    assert info["ranks"] == 2  # the run checked that both ranks ended with the same weights
    lines = (out / "transcripts.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 4 * 4  # steps x problems x chats, gathered from both ranks on rank 0
    assert done.stdout.count("trained chat seed 0") == 1  # rank 0 alone speaks
