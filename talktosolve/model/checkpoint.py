"""A training run's checkpoints: its trainable weights and optimizer state at a step, written whole or not at all.

    checkpoints/step-N/
      trainable.safetensors    the trainable tensors, by parameter name
      optimizer.safetensors    AdamW's state tensors, `{param index}.{field}`
      state.json               the step and the optimizer's param groups
      {seat}/...               with per-role adapters: the same three files for each role's weights instead
      snapshot.safetensors     with a snapshot partner: its tensors (per role: {seat}/snapshot.safetensors)

A checkpoint is written under a temporary name and renamed, so a kill leaves either the whole checkpoint or
none; the two newest are kept (a run sharing a process with others may need the one before its newest).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from talktosolve.store import read_json, write_json

Parts = dict[str, tuple]
"""`{role: (model, optimizer)}`: the weights a checkpoint holds; one role `""` (files at the top) for the
shared adapter, one per seat for per-role adapters."""


def save(run_dir: Path, parts: Parts, step: int, snapshots: dict | None = None) -> None:
    """`parts` at `step` into `run_dir/checkpoints/step-N/` (atomically), dropping all but the two newest;
    `snapshots`: a snapshot partner's tensors by role (`frozen.FrozenPartner.tensors`)."""
    final = Path(run_dir) / "checkpoints" / f"step-{step:06d}"
    tmp = final.parent / f".tmp-step-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for role, (model, optimizer) in parts.items():
        _write(tmp / role, model, optimizer, step)
    for role, tensors in (snapshots or {}).items():
        save_file(tensors, str(tmp / role / "snapshot.safetensors"))
    if "" not in parts:
        write_json(tmp / "state.json", {"step": step, "roles": sorted(parts)})
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in sorted(final.parent.glob("step-*"))[:-2]:
        shutil.rmtree(old, ignore_errors=True)


def load(ckpt: Path, parts: Parts) -> int:
    """Load `parts` from the checkpoint folder `ckpt`; returns its step."""
    for role, (model, optimizer) in parts.items():
        if not (ckpt / role / "trainable.safetensors").exists():
            raise FileNotFoundError(f"{ckpt} holds no weights for role `{role or 'shared'}`")
        _read(ckpt / role, model, optimizer)
    return int(read_json(ckpt / "state.json")["step"])


def load_snapshots(ckpt: Path, roles) -> dict:
    """A checkpoint's snapshot-partner tensors, by role."""
    missing = [role for role in roles if not (ckpt / role / "snapshot.safetensors").exists()]
    if missing:
        raise FileNotFoundError(f"{ckpt} holds no snapshot partner for role `{missing[0] or 'shared'}`")
    return {role: load_file(str(ckpt / role / "snapshot.safetensors")) for role in roles}


def _write(where: Path, model, optimizer, step: int) -> None:
    where.mkdir(parents=True, exist_ok=True)
    names = {id(p): n for n, p in model.named_parameters()}
    params = [p for g in optimizer.param_groups for p in g["params"]]
    save_file({names[id(p)]: p.detach().cpu().contiguous() for p in params}, str(where / "trainable.safetensors"))
    opt = optimizer.state_dict()
    tensors = {}
    for idx, state in opt["state"].items():
        for key, value in state.items():
            tensors[f"{idx}.{key}"] = (value if torch.is_tensor(value) else torch.tensor(value)).cpu().contiguous()
    save_file(tensors, str(where / "optimizer.safetensors"))
    write_json(where / "state.json", {"step": step, "param_groups": opt["param_groups"]})


def _read(where: Path, model, optimizer) -> None:
    device = next(model.parameters()).device
    weights = load_file(str(where / "trainable.safetensors"), device=str(device))
    by_name = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in weights.items():
            by_name[name].copy_(value)
    state = read_json(where / "state.json")
    tensors = load_file(str(where / "optimizer.safetensors"), device=str(device))
    opt_state: dict = {}
    for key, value in tensors.items():
        idx, field = key.split(".", 1)
        opt_state.setdefault(int(idx), {})[field] = value.cpu() if field == "step" else value
    optimizer.load_state_dict({"state": opt_state, "param_groups": state["param_groups"]})


def checkpoints(run_dir: Path) -> dict[int, Path]:
    """A run folder's complete checkpoints, by step."""
    found = (p for p in (Path(run_dir) / "checkpoints").glob("step-*") if (p / "state.json").exists())
    return {int(p.name.split("-")[1]): p for p in found}


def latest(run_dir: Path) -> Path | None:
    ckpts = checkpoints(run_dir)
    return ckpts[max(ckpts)] if ckpts else None


def resume_points(run_dirs: list[Path]) -> list[Path | None]:
    """The checkpoint each run resumes from. Runs sharing a process resume together from the newest step they
    all hold a checkpoint of: a kill between two runs' checkpoints of one step leaves one run a checkpoint ahead
    (its previous one is kept), and replaying that step together makes the same chats as never stopping. Runs
    with no step in common (a group made of other runs before) each resume from their latest."""
    held = [checkpoints(d) for d in run_dirs]
    common = set.intersection(*(set(h) for h in held))
    if common:
        return [h[max(common)] for h in held]
    return [h[max(h)] if h else None for h in held]


def weights_checksum(*models) -> str:
    """A hash of the trained weights' bytes (every role's, in order): equal on every rank after data-parallel
    training."""
    h = hashlib.sha256()
    for model in models:
        for name, p in model.named_parameters():
            if p.requires_grad:
                h.update(name.encode())
                h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]
