"""How far AdamW moves the weights in a run's first steps, per unit of learning rate, with and without a warm-up.

Two gradient streams through `torch.optim.AdamW` set up as the trainer sets it up (`train.betas`, `train.lr`,
no weight decay, torch's eps) on a vector of independent coordinates, the learning rate of each step from the
trainer's own `learning_rate(train, step)`:

- `noise`: every step's gradient is fresh standard normal noise (a step learning from a few groups whose
  direction does not repeat). Reported: the mean |update| per coordinate, in units of `train.lr`, at each step.
- `one_then_empty`: one gradient at step 0, then zero gradients (steps whose groups all scored alike: every
  advantage 0, so nothing is read, and the optimizer steps all the same). Reported: how far each coordinate has
  moved in the direction of that one gradient after each step, in units of `train.lr`.

Adam divides by a running estimate of the gradient's size that starts empty, so its first updates are about
`lr` per coordinate whatever the gradient's size or reliability; later a coordinate whose gradient is noise moves
less (its first moment averages out, its second does not). The figures say by how much, and what a warm-up of
`--warmup` steps changes.

    python bench/adam_early.py --out adam_early.json
"""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import torch

from talktosolve.config import TrainConfig
from talktosolve.experiment.step import learning_rate
from talktosolve.store import write_json


def trace(train, grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """The weights after each step of AdamW fed `grads` in turn, from zero; lr from the trainer's schedule."""
    w = torch.zeros_like(grads[0], requires_grad=True)
    opt = torch.optim.AdamW([w], lr=train.lr, betas=tuple(train.betas), weight_decay=0.0)
    out = []
    for step, g in enumerate(grads):
        for group in opt.param_groups:
            group["lr"] = learning_rate(train, step)
        w.grad = g.clone()
        opt.step()
        out.append(w.detach().clone())
    return out


def noise(train, steps: int, n: int, seed: int) -> list[float]:
    """Mean |update| per coordinate at each step, in units of train.lr, under pure-noise gradients."""
    gen = torch.Generator().manual_seed(seed)
    ws = trace(train, [torch.randn(n, generator=gen, dtype=torch.float64) for _ in range(steps)])
    prev = [torch.zeros(n, dtype=torch.float64), *ws[:-1]]
    return [float((w - p).abs().mean() / train.lr) for w, p in zip(ws, prev)]


def one_then_empty(train, steps: int, n: int, seed: int) -> list[float]:
    """Distance moved along sign(g0) after each step, in units of train.lr: g0 at step 0, then zeros."""
    g0 = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    ws = trace(train, [g0] + [torch.zeros(n, dtype=torch.float64)] * (steps - 1))
    return [float((-w * g0.sign()).mean() / train.lr) for w in ws]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=80, help="steps to trace (a run's length)")
    ap.add_argument("--warmup", type=int, default=10, help="the warm-up (train.warmup_steps) to compare with none")
    ap.add_argument("--coordinates", type=int, default=100_000, help="independent coordinates averaged over")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="the JSON to write")
    args = ap.parse_args(argv)
    if args.steps < 2 or args.warmup < 1 or args.coordinates < 1:
        ap.error("--steps must be 2 or more, --warmup and --coordinates 1 or more")
    base = TrainConfig()
    result = {"command": f"python bench/adam_early.py --steps {args.steps} --warmup {args.warmup} "
                         f"--coordinates {args.coordinates} --seed {args.seed} --out {args.out}",
              "lr": base.lr, "betas": list(base.betas), "schedules": {}}
    for name, warmup in (("no_warmup", 0), (f"warmup_{args.warmup}", args.warmup)):
        train = SimpleNamespace(lr=base.lr, betas=base.betas, warmup_steps=warmup)
        result["schedules"][name] = {
            "warmup_steps": warmup,
            "noise_update": noise(train, args.steps, args.coordinates, args.seed),
            "one_then_empty_moved": one_then_empty(train, args.steps, args.coordinates, args.seed),
        }
    print(f"{'schedule':>12}  {'noise: |update|/lr at step 0, 1, 4, 19, 79':>44}  "
          f"{'one gradient, then empty: moved/lr after 1, 5, 20':>52}")
    for name, s in result["schedules"].items():
        u, m = s["noise_update"], s["one_then_empty_moved"]
        pick = [i for i in (0, 1, 4, 19, 79) if i < len(u)]
        moved = [i for i in (0, 4, 19) if i < len(m)]
        noise_text, moved_text = ", ".join(f"{u[i]:.3f}" for i in pick), ", ".join(f"{m[i]:.2f}" for i in moved)
        print(f"{name:>12}  {noise_text:>44}  {moved_text:>52}")
    write_json(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
