"""The learner's forward: log pi of each generated token of a micro-batch, at the sampling temperature, with the
output layer run in chunks so no [tokens x vocabulary] fp32 tensor lives for the whole batch.

Rows arrive right-padded (`grpo.pad_right`, `token_logprobs`) or packed into one sequence (`packed_token_logprobs`,
`learn_packing`). On a GPU, with the output layer frozen (LoRA), each chunk's input gradient is taken in the
forward pass (`ChosenLogprobs`), its softmax compiled (`FUSED_HEAD`); elsewhere the chunks run under activation
checkpointing. The objective that reads these log-probabilities is `grpo.py`'s.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from talktosolve.learning import learn_packing
from talktosolve.model.policy import base_model


class ChosenLogprobs(torch.autograd.Function):
    """log softmax(h W^T)[target] per row, chunk by chunk, with the input gradient taken in the forward pass.

    d logp_t / d h_t = W^T (onehot_t - softmax_t) needs the row's softmax, which the forward pass has in hand: it
    is multiplied by W there, once, and kept ([n, H], small), so the backward pass is a product by the incoming
    gradient. Checkpointed chunks (`chunk_logprobs`) run the output layer three times (forward, again in
    backward, and its input gradient) and the fp32 softmax's passes twice; this runs it twice and them once. The
    output layer must be frozen (no gradient for W is computed). docs/performance.md#learning times both."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk: int):
        logps, jacobians = [], []
        for i in range(0, hidden.shape[0], chunk):
            logits = F.linear(hidden[i:i + chunk], weight)  # [c, V]
            logp, p = _head_softmax(logits, targets[i:i + chunk, None])
            logps.append(logp)
            jacobians.append(-(p @ weight))  # [c, H]: d logp / d hidden
        ctx.save_for_backward(torch.cat(jacobians) if jacobians else hidden.new_zeros(hidden.shape))
        ctx.dtype = hidden.dtype
        return torch.cat(logps) if logps else hidden.new_zeros(0, dtype=torch.float32)

    @staticmethod
    def backward(ctx, grad):
        (jacobian,) = ctx.saved_tensors
        return (grad[:, None] * jacobian.float()).to(ctx.dtype), None, None, None


FUSED_HEAD = True
"""On CUDA, the output layer's softmax (`softmax_minus_onehot`) runs compiled: its passes over the [chunk x
vocabulary] logits fused into a few kernels that read them in bf16, not six fp32 passes; False runs it eagerly
(the benchmarks time both: docs/performance.md#learning)."""


def softmax_minus_onehot(logits: torch.Tensor, targets: torch.Tensor):
    """logits [c, V], targets [c, 1] -> (log softmax at the targets [c] fp32, softmax - onehot [c, V] in the
    logits' dtype), computed in fp32."""
    z = logits.float()
    lse = z.logsumexp(-1, keepdim=True)  # [c, 1]
    logp = (z.gather(1, targets) - lse).squeeze(1)
    minus_one = torch.full_like(targets, -1, dtype=z.dtype)
    p = z.sub_(lse).exp_().scatter_add_(1, targets, minus_one)  # in place of the fp32 logits
    return logp, p.to(logits.dtype)


@functools.cache
def compiled_softmax():
    """`softmax_minus_onehot` compiled once, for any chunk size."""
    return torch.compile(softmax_minus_onehot, dynamic=True)


def _head_softmax(logits: torch.Tensor, targets: torch.Tensor):
    if logits.is_cuda and FUSED_HEAD:
        return compiled_softmax()(logits, targets)
    return softmax_minus_onehot(logits, targets)


def chunk_logprobs(hidden: torch.Tensor, targets: torch.Tensor, head: torch.nn.Module,
                   temperature: float = 1.0) -> torch.Tensor:
    """Log-probabilities of `targets` [n] under the output layer `head` applied to `hidden` [n, H], at the
    sampling temperature: one chunk of the learner's rows."""
    logits = head(hidden).float() / temperature  # [n, V]
    return torch.gather(logits.log_softmax(-1), 1, targets[:, None]).squeeze(1)  # [n]


def token_logprobs(model, ids: torch.Tensor, comp: torch.Tensor, chunk: int = 1024,
                   temperature: float = 1.0) -> torch.Tensor:
    """log pi(token) of every generated token, flattened in row-major order: [n_generated]; pi is the sampler's
    distribution, softmax(logits / temperature).

    `ids` are right-padded rows (see `pad_right`: no attention mask is needed); `comp` [B, T] marks the
    trained tokens, best kept on the CPU: their positions are then found with no device synchronisation."""
    if bool(comp[:, 0].any()):
        raise ValueError("a trained token in column 0 has no token before it to be predicted from")
    base = base_model(model)
    backbone, head = base.get_decoder(), base.get_output_embeddings()
    where = learn_packing.upload(comp.flatten().nonzero().squeeze(1), ids.device)  # [n] flat positions
    # use_cache=False: a training pass has no use for a KV cache (it would cost memory, and guard compiled layers).
    hidden = backbone(input_ids=ids, use_cache=False).last_hidden_state  # [B, T, H]
    # The token at flat position p is predicted from the hidden state at p - 1 (same row: column 0 is never trained).
    h = hidden.flatten(0, 1).index_select(0, where - 1)  # [n, H]
    targets = ids.flatten().index_select(0, where)  # [n]
    return _chosen_logprobs(h, targets, head, chunk, temperature)


def packed_token_logprobs(model, packed, chunk: int = 1024, temperature: float = 1.0) -> torch.Tensor:
    """log pi(token) of every trained token of a packed micro-batch (`learn_packing.Packed`): [n], in its order."""
    base = base_model(model)
    backbone, head = base.get_decoder(), base.get_output_embeddings()
    with learn_packing.selected(base):
        hidden = backbone(input_ids=packed.ids[None], position_ids=packed.positions[None], use_cache=False,
                          packed=packed).last_hidden_state[0]  # [N, H]
    return _chosen_logprobs(hidden.index_select(0, packed.predict), packed.targets, head, chunk, temperature)


def _chosen_logprobs(h: torch.Tensor, targets: torch.Tensor, head, chunk: int,
                     temperature: float = 1.0) -> torch.Tensor:
    """h [n, H]: the states that predict `targets` [n] -> their log-probs [n] under softmax(logits / temperature),
    through the output layer in chunks."""
    if torch.is_grad_enabled() and h.is_cuda and _frozen_linear(head):
        # No bias: logits / T = W (h / T), and the division's gradient flows back through h.
        return ChosenLogprobs.apply(h / temperature if temperature != 1 else h, head.weight, targets, chunk)
    parts = []
    for i in range(0, h.shape[0], chunk):
        if torch.is_grad_enabled():
            parts.append(checkpoint(chunk_logprobs, h[i:i + chunk], targets[i:i + chunk], head, temperature,
                                    use_reentrant=False))
        else:
            parts.append(chunk_logprobs(h[i:i + chunk], targets[i:i + chunk], head, temperature))
    return torch.cat(parts) if parts else h.new_zeros(0)


def _frozen_linear(head) -> bool:
    return isinstance(head, torch.nn.Linear) and head.bias is None and not head.weight.requires_grad
