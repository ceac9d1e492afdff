"""The learner: advantages on hand-made numbers, micro-batching, and the loss's gradient."""

import os

import pytest
import torch

from talktosolve.learning.grpo import Sample, group_advantages, grpo_update, microbatches, to_sequences
from talktosolve.learning.logprobs import token_logprobs


def test_advantage_is_group_centred_without_std_scaling():
    adv = group_advantages([[1.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    assert adv[0] == [0.5, -0.5, 0.0, 0.0]
    assert adv[1] == [0.0] * 4  # no signal, no update (and no division by a zero std)
    assert adv[2] == pytest.approx([0.25, 0.25, 0.25, -0.75])


def test_microbatches_hold_two_chats_worth_of_messages_grouped_by_length():
    samples = [Sample([1] * (3 * t + g), [2], 0.0, g) for g in range(5) for t in range(4)]
    batches = microbatches(to_sequences(samples), 2)
    assert [sum(len(r.spans) for r in b) for b in batches] == [8, 8, 4]
    lengths = [len(r.ids) for b in batches for r in b]
    assert lengths == sorted(lengths)


def test_microbatches_hold_chats_of_the_protocols_length():
    """A three-seat chat of 6 messages: two chats' worth is 12 messages, not 8."""
    samples = [Sample([1] * (3 * t + g), [2], 0.0, g) for g in range(5) for t in range(6)]
    batches = microbatches(to_sequences(samples), 2, messages_per_chat=6)
    assert [sum(len(r.spans) for r in b) for b in batches] == [12, 12, 6]
    lengths = [len(r.ids) for b in batches for r in b]
    assert lengths == sorted(lengths)


def test_token_budget_microbatches_stay_within_it_and_keep_every_row_once():
    samples = [Sample([1] * n, [2] * 3, 0.0, g) for g, n in enumerate([5, 40, 12, 90, 7, 33, 64, 18])]
    rows = to_sequences(samples)
    batches = microbatches(rows, 2, max_tokens=100, pad_multiple=8)
    assert sorted(len(r.ids) for b in batches for r in b) == sorted(len(r.ids) for r in rows)
    for b in batches:
        width = -(-max(len(r.ids) for r in b) // 8) * 8
        assert len(b) == 1 or len(b) * width <= 100  # a row longer than the budget goes alone
    assert [len(b) for b in batches] == [4, 2, 1, 1]  # widths 24, 48, 72, 96 (shortest first)
    # No budget: by chats, as before.
    assert microbatches(rows, 2) == microbatches(rows, 2, max_tokens=0)


def test_a_message_inside_a_later_view_shares_its_row():
    first = Sample([1, 2], [3, 4], 0.5, 0)
    final = Sample([1, 2, 3, 4, 9], [5, 6], 0.5, 0)  # the final view begins with the first message, exactly
    other = Sample([1, 2, 7], [8], 0.5, 0)  # not a prefix of anything: its own row
    elsewhere = Sample([1, 2], [3, 4], -0.5, 1)  # same tokens, another chat: never merged across chats
    rows = to_sequences([first, final, other, elsewhere])
    assert len(rows) == 3
    merged = next(r for r in rows if len(r.spans) == 2)
    assert merged.ids == [1, 2, 3, 4, 9, 5, 6] and merged.spans == [(2, 4, 0.5), (5, 7, 0.5)]


class Toy(torch.nn.Module):
    """A tiny causal LM with the two methods the learner needs."""

    def __init__(self, vocab=11, hidden=8):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def get_decoder(self):
        emb = self.emb

        class Dec(torch.nn.Module):
            def forward(self, input_ids, use_cache=None):
                from types import SimpleNamespace

                return SimpleNamespace(last_hidden_state=emb(input_ids).cumsum(1))

        return Dec()

    def get_output_embeddings(self):
        return self.head


def reference_logprobs(model, s: Sample) -> torch.Tensor:
    seq = torch.tensor([s.prompt_ids + s.completion_ids])
    h = model.emb(seq).cumsum(1)
    logp = model.head(h).log_softmax(-1)[0]
    n = len(s.prompt_ids)
    return torch.stack([logp[n - 1 + t, tok] for t, tok in enumerate(s.completion_ids)])


def reference_gradient(model, samples: list[Sample]) -> torch.Tensor:
    """The output layer's gradient of the loss as the docstring of grpo writes it, computed directly (the model's
    gradients are left at zero)."""
    n_tok = sum(len(s.completion_ids) for s in samples)
    want = -sum(s.advantage * reference_logprobs(model, s).sum() for s in samples) / n_tok
    want.backward()
    expected = model.head.weight.grad.clone()
    model.zero_grad()
    return expected


def test_token_logprobs_match_a_direct_computation():
    torch.manual_seed(0)
    model = Toy()
    samples = [Sample([1, 2, 3], [4, 5], 1.0, 0), Sample([6], [7, 8, 9, 10], -1.0, 0)]
    from talktosolve.learning.grpo import pad_right

    ids, comp, _ = pad_right(samples, 0, "cpu")
    got = token_logprobs(model, ids, comp, chunk=3)
    want = torch.cat([reference_logprobs(model, s) for s in samples])
    torch.testing.assert_close(got, want)


def check_chosen_logprobs(device, dtype, atol):
    """`ChosenLogprobs` (input gradient in the forward pass) against checkpointed chunks of the output layer:
    the same log-probs and the same gradient with respect to the hidden states, over chunks of uneven length."""
    from torch.utils.checkpoint import checkpoint

    from talktosolve.learning.logprobs import ChosenLogprobs, chunk_logprobs

    g = torch.Generator().manual_seed(0)
    n, H, V, chunk = 300, 64, 1000, 128
    head = torch.nn.Linear(H, V, bias=False).requires_grad_(False).to(device, dtype)
    head.weight.copy_(torch.randn(V, H, generator=g).to(device, dtype) * 0.2)
    hidden = torch.randn(n, H, generator=g).to(device, dtype).requires_grad_()
    targets = torch.randint(0, V, (n,), generator=g).to(device)
    weights = torch.randn(n, generator=g).to(device)  # any incoming gradient, not only a policy gradient's
    got = ChosenLogprobs.apply(hidden, head.weight, targets, chunk)
    (got * weights).sum().backward()
    got_grad, hidden.grad = hidden.grad, None
    want = torch.cat([checkpoint(chunk_logprobs, hidden[i:i + chunk], targets[i:i + chunk], head, use_reentrant=False)
                      for i in range(0, n, chunk)])
    (want * weights).sum().backward()
    torch.testing.assert_close(got, want, atol=atol, rtol=0)
    torch.testing.assert_close(got_grad.float(), hidden.grad.float(), atol=atol, rtol=0)


def test_logprobs_with_the_gradient_taken_forward_equal_checkpointed_chunks():
    check_chosen_logprobs("cpu", torch.float32, atol=1e-5)


@pytest.mark.gpu
def test_logprobs_with_the_gradient_taken_forward_equal_checkpointed_chunks_on_gpu_in_bf16():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        check_chosen_logprobs("cuda", torch.bfloat16, atol=2e-2)


@pytest.mark.gpu
def test_the_compiled_head_softmax_gives_the_eager_passes_log_probs_and_softmax_minus_onehot_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from talktosolve.learning.logprobs import compiled_softmax, softmax_minus_onehot

    g = torch.Generator().manual_seed(0)
    for n in (1024, 300):  # a whole chunk, then a shorter last one (one dynamic-shape compilation serves both)
        logits = (torch.randn(n, 5003, generator=g) * 4).to("cuda", torch.bfloat16)
        targets = torch.randint(0, 5003, (n, 1), generator=g).to("cuda")
        got_logp, got_p = compiled_softmax()(logits, targets)
        want_logp, want_p = softmax_minus_onehot(logits, targets)
        assert got_p.dtype == torch.bfloat16
        torch.testing.assert_close(got_logp, want_logp, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got_p, want_p)


def test_update_gradient_is_the_token_normalised_policy_gradient():
    torch.manual_seed(0)
    model = Toy()
    samples = [Sample([1, 2], [3, 4, 5], 0.5, 0), Sample([2, 1], [6], -0.5, 0), Sample([3], [7, 8], 0.25, 1),
               Sample([4], [9], -0.25, 1), Sample([1, 2, 3, 4, 5, 6], [10], 0.5, 0)]  # the last holds the first
    n_tok = sum(len(s.completion_ids) for s in samples)
    expected = reference_gradient(model, samples)
    # lr 0 keeps the weights, so the gradient the update computed can be read back.
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    stats = grpo_update(model, opt, samples, pad_id=0, chats_per_microbatch=1, grad_clip=0, device="cpu")
    by_chats = model.head.weight.grad.clone()
    grpo_update(model, opt, samples, pad_id=0, chats_per_microbatch=1, grad_clip=0, device="cpu", microbatch_tokens=9)
    torch.testing.assert_close(model.head.weight.grad, by_chats)  # any micro-batching, the same update
    # The loss's value is the surrogate at ratio 1: -(1/N) sum_m A_m |y_m| (its gradient is what matters).
    assert stats.loss == pytest.approx(-sum(s.advantage * len(s.completion_ids) for s in samples) / n_tok)
    torch.testing.assert_close(model.head.weight.grad, expected)
    assert stats.tokens == n_tok and stats.samples == 5


def check_compiled_layers_against_eager() -> None:
    """The body of the test below, run in a process of its own (`python -c`)."""
    from helpers import prompts, tiny

    from talktosolve.config import ModelConfig
    from talktosolve.learning.grpo import pad_right
    from talktosolve.model.policy import compile_layers

    samples = [Sample(p, [5, 6, 7], 0.0, i) for i, p in enumerate(prompts(97, [6, 13, 21]))]
    ids, comp, _ = pad_right(samples, 0, "cpu")
    eager, compiled = tiny(), tiny()
    names = list(compiled.state_dict())
    assert compile_layers(compiled, ModelConfig(compile="on"), torch.device("cpu"), static_sampler=True)
    assert not compile_layers(tiny(), ModelConfig(compile="auto"), torch.device("cpu"), static_sampler=True), \
        "auto is GPU-only"
    want, got = token_logprobs(eager, ids, comp), token_logprobs(compiled, ids, comp)
    torch.testing.assert_close(got, want)
    want.sum().backward()
    got.sum().backward()
    for (n, a), b in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(b.grad, a.grad, msg=n)
    assert list(compiled.state_dict()) == names, "checkpoints keep their parameter names"


def test_compiled_layers_give_the_learner_the_same_logprobs_and_names(tmp_path):
    """model.compile=on (the GPU default): same log-probs and gradients as eager, same parameter names.

    Run in a fresh interpreter with an inductor cache of its own: CPU inductor kernels are the one thing in the
    suite that has taken a test worker down (an abort inside torch's operator registry, after other files had run
    in the same worker). There, a recipe run earlier in the process had pinned the CPU (`cpu_pins`) after torch
    had chosen its AVX-512 kernels, so inductor compiled for AVX2 beside them; the child is pinned from its start,
    so torch and inductor agree whatever ran before. A crash here is this test's failure, with the child's last
    words, and the compilation never shares a process or a cache with other tests."""
    import subprocess
    import sys
    from pathlib import Path

    from talktosolve.cpu_pins import pins

    env = {**os.environ, **pins(), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    child = subprocess.run([sys.executable, "-c", "import test_grpo; test_grpo.check_compiled_layers_against_eager()"],
                           cwd=Path(__file__).parent, env=env, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, f"exit {child.returncode}:\n{child.stderr[-4000:]}"


def test_zero_advantage_messages_are_skipped_and_the_update_is_unchanged():
    """A message with advantage 0 adds nothing to the loss or its gradient: leaving it out gives the same update
    (N still counts its tokens), and a step of nothing but such messages is AdamW's step on zero gradients."""
    samples = [Sample([1, 2], [3, 4, 5], 0.5, 0), Sample([2, 1], [6], 0.0, 1), Sample([3], [7, 8], -0.5, 2),
               Sample([4], [9, 9, 9], 0.0, 1)]
    n_tok = sum(len(s.completion_ids) for s in samples)
    torch.manual_seed(0)
    model = Toy()
    expected = reference_gradient(model, samples)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    stats = grpo_update(model, opt, samples, pad_id=0, chats_per_microbatch=1, grad_clip=0, device="cpu")
    torch.testing.assert_close(model.head.weight.grad, expected)
    assert stats.skipped == 2 and stats.tokens == n_tok and stats.row_tokens == 5 + 3
    assert stats.loss == pytest.approx(-(0.5 * 3 - 0.5 * 2) / n_tok)

    # Nothing to read: AdamW still steps, and its momentum from the step before still moves the weights.
    stepped = []
    for skip_all in (False, True):
        torch.manual_seed(0)
        model = Toy()
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
        grpo_update(model, opt, samples, pad_id=0, chats_per_microbatch=1, grad_clip=0, device="cpu")
        zero = [Sample(s.prompt_ids, s.completion_ids, 0.0, s.group) for s in samples]
        if skip_all:
            grpo_update(model, opt, zero, pad_id=0, chats_per_microbatch=1, grad_clip=0, device="cpu")
        else:  # the same second step, with every gradient computed (and zero)
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
            opt.step()
        stepped.append([p.detach().clone() for p in model.parameters()])
    for a, b in zip(*stepped):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert opt.state[next(iter(model.parameters()))]["step"] == 2


def test_kl_penalty_adds_beta_times_the_k3_gradient_over_every_token():
    """With kl_coef: the gradient is the policy gradient plus beta * (1/N) grad sum_t k3(logp_t, ref_t), over
    every message (zero advantages included), with the reference a frozen copy; stats.kl is the mean k3."""
    import copy

    from talktosolve.learning.grpo import kl_k3

    torch.manual_seed(0)
    samples = [Sample([1, 2], [3, 4, 5], 0.5, 0), Sample([2, 1], [6], 0.0, 1), Sample([3], [7, 8], -0.5, 2)]
    model, beta = Toy(), 0.3
    reference = copy.deepcopy(model)
    with torch.no_grad():  # the policy has moved away from its reference
        model.head.weight.add_(0.5 * torch.randn_like(model.head.weight))
    n_tok = sum(len(s.completion_ids) for s in samples)
    policy = -sum(s.advantage * reference_logprobs(model, s).sum() for s in samples) / n_tok
    k3 = torch.cat([kl_k3(reference_logprobs(model, s), reference_logprobs(reference, s).detach()) for s in samples])
    (policy + beta * k3.sum() / n_tok).backward()
    expected = model.head.weight.grad.clone()
    model.zero_grad()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    stats = grpo_update(model, opt, samples, pad_id=0, chats_per_microbatch=1, grad_clip=0, device="cpu",
                        kl_coef=beta, reference=reference)
    torch.testing.assert_close(model.head.weight.grad, expected)
    assert stats.skipped == 0, "the penalty reads zero-advantage messages too"
    assert stats.kl == pytest.approx(float(k3.detach().mean()))
    assert float(k3.detach().min()) >= 0 and float(k3.detach().max()) > 0


def test_kl_penalty_is_zero_at_the_reference_and_off_by_default():
    """At the reference the k3 term and its gradient vanish (the update equals the plain one); without kl_coef
    no reference is read and stats.kl is None."""
    import copy

    torch.manual_seed(0)
    samples = [Sample([1, 2], [3, 4, 5], 0.5, 0), Sample([3], [7, 8], -0.5, 1)]
    model = Toy()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    plain = grpo_update(model, opt, samples, pad_id=0, chats_per_microbatch=1, grad_clip=0, device="cpu")
    want = model.head.weight.grad.clone()
    assert plain.kl is None
    stats = grpo_update(model, opt, samples, pad_id=0, chats_per_microbatch=1, grad_clip=0, device="cpu",
                        kl_coef=1.0, reference=copy.deepcopy(model))
    torch.testing.assert_close(model.head.weight.grad, want)
    assert stats.kl == pytest.approx(0.0, abs=1e-7)


def test_kl_penalty_under_lora_reads_the_reference_with_the_adapter_off(tiny_model_dir):
    """Under LoRA, no reference model: the adapter switched off is the base. A trained-away adapter gives a
    positive KL; a fresh one (B = 0) gives 0."""
    import functools

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from talktosolve.learning.grpo import pad_right, reference_logprobs

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=4, target_modules="all-linear"))
    samples = [Sample([1, 2, 3], [4, 5], 1.0, 0)]
    ids, comp, _ = pad_right(samples, 0, "cpu")
    read = functools.partial(token_logprobs, ids=ids, comp=comp)
    with torch.no_grad():
        torch.testing.assert_close(reference_logprobs(model, None, read), read(model))  # B = 0: same policy
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)
        assert not torch.allclose(reference_logprobs(model, None, read), read(model))
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    stats = grpo_update(model, opt, samples, pad_id=0, chats_per_microbatch=1, grad_clip=0, device="cpu", kl_coef=0.1)
    assert stats.kl > 0


def test_the_learner_reads_the_samplers_distribution_at_its_temperature():
    """The sampler draws from softmax(logits / T): the learner's log-probs, and so the update, are of that same
    distribution (at T = 1 the plain log-softmax)."""
    torch.manual_seed(0)
    model = Toy()
    s = Sample([1, 2, 3], [4, 5, 6], 1.0, 0)
    from talktosolve.learning.grpo import pad_right

    ids, comp, _ = pad_right([s], 0, "cpu")
    h = model.emb(torch.tensor([s.prompt_ids + s.completion_ids])).cumsum(1)
    for t in (1.0, 0.5, 1.7):
        want = (model.head(h)[0] / t).log_softmax(-1)
        want = torch.stack([want[2 + i, tok] for i, tok in enumerate(s.completion_ids)])
        torch.testing.assert_close(token_logprobs(model, ids, comp, temperature=t), want)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    grpo_update(model, opt, [s], pad_id=0, chats_per_microbatch=1, grad_clip=0, device="cpu", temperature=1.7)
    got = model.head.weight.grad.clone()
    model.zero_grad()
    want = (model.head(h)[0] / 1.7).log_softmax(-1)
    (-sum(want[2 + i, tok] for i, tok in enumerate(s.completion_ids)) / 3).backward()
    torch.testing.assert_close(got, model.head.weight.grad)
