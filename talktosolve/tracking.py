"""Optional mirrors of the metrics to TensorBoard or Weights & Biases (`--log tensorboard|wandb`).

The run folder's `metrics.jsonl` stays the source of truth; these only copy each step's numbers. Neither
package is a dependency: asking for one that is not installed is a clear error before any training starts.
"""

from __future__ import annotations

from pathlib import Path


class TrackingError(RuntimeError):
    """The asked-for tracker is not installed."""


def make_logger(kind: str, run_dir: Path):
    """A callable `log(row: dict, step: int)` for `kind` in {tensorboard, wandb}."""
    run_dir = Path(run_dir)
    if kind == "tensorboard":
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise TrackingError("--log tensorboard needs the tensorboard package: pip install tensorboard") from e
        writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

        def log(row: dict, step: int) -> None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)):
                    writer.add_scalar(key, value, step)
            writer.flush()

        return log
    if kind == "wandb":
        try:
            import wandb
        except ImportError as e:
            raise TrackingError("--log wandb needs the wandb package: pip install wandb") from e
        run = wandb.init(project="talktosolve", name=run_dir.name, dir=str(run_dir), resume="allow",
                         id=run_dir.name)

        def log(row: dict, step: int) -> None:
            run.log({k: v for k, v in row.items() if k != "step" and v is not None}, step=step)

        return log
    raise ValueError(f"unknown logger `{kind}`; use tensorboard or wandb")
