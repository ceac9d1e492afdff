"""Data-parallel training across processes, launched by PyTorch's own `torchrun`.

    torchrun --nproc_per_node 2 -m talktosolve.cli train --arm chat --seed 0 --out runs/chat-s0
    torchrun --nnodes 2 --node_rank R --nproc_per_node 8 --rdzv_endpoint HOST:29500 -m talktosolve.cli train ...

Each rank plays its share of the step's problems (whole problems: a problem's chats never straddle ranks, so
its advantages are computed where its chats are), computes the gradient of its messages with the loss divided
by the step's *global* token count, and the gradients are summed across ranks: the sum is exactly the gradient
a single process would compute over all the messages. Every rank then applies the same clipped AdamW step, so
every rank holds the same weights after each step. Rank 0 alone writes files. Without torchrun's environment,
everything here is a no-op (world size 1).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) when not launched by torchrun."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init(device_kind: str) -> tuple[int, int]:
    """Join the process group torchrun describes (NCCL on GPUs, gloo on CPUs); returns (rank, world size)."""
    if "RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    if not dist.is_initialized():
        backend = "nccl" if device_kind == "cuda" else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    return world()


def local_device(device: torch.device) -> torch.device:
    """Each rank on a host takes its own GPU."""
    if device.type == "cuda" and world()[1] > 1:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def sum_scalar(value: float, device) -> float:
    if world()[1] == 1:
        return value
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item())


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """Sum every gradient across ranks (in place), one flat buffer per dtype to keep the calls few."""
    if world()[1] == 1:
        return
    grads = [p.grad for p in params if p.grad is not None]
    for dtype in {g.dtype for g in grads}:
        group = [g for g in grads if g.dtype == dtype]
        flat = torch.cat([g.reshape(-1) for g in group])
        dist.all_reduce(flat)
        offset = 0
        for g in group:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def gather(objects: list) -> list:
    """Every rank's list, concatenated in rank order (only rank 0 needs it; all ranks get it)."""
    if world()[1] == 1:
        return objects
    out: list = [None] * world()[1]
    dist.all_gather_object(out, objects)
    return [x for part in out for x in part]


def leave() -> None:
    """Close the process group, each rank once its work is done, as torch asks of a program that joined one
    (rather than leaving it to each process's exit, in no set order); nothing when not launched by torchrun."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if world()[1] > 1:
        dist.barrier()


def shard(items: list, rank: int, size: int) -> list:
    """Rank `rank`'s share: every `size`-th item starting at `rank` (whole problems per rank)."""
    return items[rank::size]
