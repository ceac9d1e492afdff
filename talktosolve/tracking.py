"""Optional mirrors of the metrics to TensorBoard or Weights & Biases (`--log tensorboard|wandb`).

The run folder's `metrics.jsonl` stays the source of truth; these only copy each step's numbers. Neither
package is a dependency: asking for one that is not installed is a clear error before any training starts
(`check_logger`, called while a command checks its inputs, before it loads a model or writes a file).
"""

from __future__ import annotations

from pathlib import Path

LOGGERS = ("tensorboard", "wandb")


class TrackingError(RuntimeError):
    """The asked-for tracker is not installed."""


def check_logger(kind: str) -> None:
    """TrackingError unless `kind`'s package imports: found here, not when the first run starts (the recipe
    evaluates the untrained teams first)."""
    if kind not in LOGGERS:
        raise TrackingError(f"unknown logger `{kind}`; use {' or '.join(LOGGERS)}")
    try:
        if kind == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401
        else:
            import wandb  # noqa: F401
    except ImportError:
        raise TrackingError(f"--log {kind} needs the {kind} package: pip install {kind}") from None


def make_logger(kind: str, run_dir: Path):
    """A callable `log(row: dict, step: int)` for `kind` in {tensorboard, wandb}."""
    check_logger(kind)
    run_dir = Path(run_dir)
    if kind == "tensorboard":
        from torch.utils.tensorboard import SummaryWriter

        writer = None

        def log(row: dict, step: int) -> None:
            nonlocal writer
            if writer is None:  # made with the first metric: a run refused before its first step leaves no folder
                writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)):
                    writer.add_scalar(key, value, step)
            writer.flush()

        return log
    import wandb

    run = wandb.init(project="talktosolve", name=run_dir.name, dir=str(run_dir), resume="allow", id=run_dir.name)

    def log(row: dict, step: int) -> None:
        run.log({k: v for k, v in row.items() if k != "step" and v is not None}, step=step)

    return log
