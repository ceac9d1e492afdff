"""The command line's inputs, checked before any model loads or any file is written: the argument types (whole
numbers, seeds, folders, SEAT=FOLDER, SEAT=ROLE), the seats and roles a team is given, whether a Hub model can
be reached (in seconds, not after transformers' retries), the device and tokenizer, and the folder a failed
check must not leave behind. Each failure is one line a user can act on (`UsageError`, or the module's own).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import sys
from pathlib import Path

from talktosolve.folders import FolderError, check_player, holds_roles

HUB_TIMEOUT = 10
"""Seconds to wait for the Hub's answer about a model before saying it cannot be reached."""


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


class UsageError(Exception):
    """A command line that cannot run as given; the message says what to change."""


def seat_player(text: str) -> tuple[str, str]:
    """`--seat SEAT=FOLDER` as (seat, folder), the folder checked as `--a` checks its own."""
    seat, sep, path = text.partition("=")
    if not sep or not seat or not path:
        raise argparse.ArgumentTypeError(f"`{text}`: expected SEAT=FOLDER, e.g. --seat C=runs/micro-3/runs/chat-s0")
    return seat, checked(check_player)(path)


def seat_role(text: str) -> tuple[str, str]:
    """`--role SEAT=ROLE` as (seat, the seat whose per-role weights play it)."""
    seat, sep, role = text.partition("=")
    if not sep or not seat or not role:
        raise argparse.ArgumentTypeError(f"`{text}`: expected SEAT=ROLE, e.g. --role A=B --role B=A (a role swap)")
    return seat, role


def checked(check, **kwargs):
    """An argparse type: the path as given, once `check` (a `talktosolve.folders` check) accepts it."""
    def parse(text: str) -> str:
        try:
            check(text, **kwargs)
        except FolderError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text

    return parse


def whole(low: int, high: int | None = None):
    """An argparse type: a whole number in [low, high)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got `{text}`") from None
        if value < low or (high is not None and value >= high):
            raise argparse.ArgumentTypeError(f"{value} is out of range: give {low} or more"
                                             + (f", below {high}" if high is not None else ""))
        return value

    return parse


SEED = whole(0, 2**63)


@contextlib.contextmanager
def checking(out: Path):
    """The checks of a command that writes into `out`, from its data to its model: when one fails, the folder the
    checks made on the way (the problems built from `--gsm8k`) is removed, so a failed command leaves none."""
    made = Path(out)
    if made.exists():
        made = None
    else:
        while not made.parent.exists():
            made = made.parent
    try:
        yield
    except BaseException:
        if made is not None and made.exists():
            shutil.rmtree(made, ignore_errors=True)
        raise


def preflight(cfg) -> None:
    """Find the run's device and its model's tokenizer before anything is written: a mistyped model path or
    device then leaves no half-made folder behind."""
    from talktosolve.model.policy import load_tokenizer, resolve_device

    quiet_hub_bars()
    resolve_device(cfg.device)
    reach_hub(cfg.model.name_or_path)
    load_tokenizer(cfg.model)


def quiet_hub_bars() -> None:
    # transformers draws a bar for every weight load and save; ours (per run and evaluation) say more.
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def reach_hub(name: str) -> None:
    """Ask the Hub about a model named by its Hub id once, with a short timeout, before transformers asks for its
    files: where the Hub cannot be reached, transformers retries each file for about 50 s, then fails in many
    lines. A copy in the cache is then used offline; without one, a ModelError says what to do."""
    import os

    from talktosolve.model.policy import BUILTIN_MODELS, ModelError

    if (Path(name).expanduser().exists() or name.endswith(".gguf") or not _HUB_ID.fullmatch(name)
            or name in BUILTIN_MODELS):
        return
    from huggingface_hub import HfApi, constants, try_to_load_from_cache
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    if constants.HF_HUB_OFFLINE:  # the cache alone is read, at once
        return
    try:
        HfApi().model_info(name, timeout=HUB_TIMEOUT)
    except RepositoryNotFoundError:
        raise ModelError(f"`{name}` is no local folder, and the Hub has no model by that name (or it is private: "
                         "log in with `hf auth login`); give a Hub id or a folder with --set "
                         "model.name_or_path=...") from None
    except HfHubHTTPError:
        return  # the Hub answered: loading says the rest
    except Exception as e:  # no network, no name service, a timeout: all the same to the user
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            constants.HF_HUB_OFFLINE = True  # read at each call: the cached copy serves without the retries
            os.environ["HF_HUB_OFFLINE"] = "1"  # and in the processes this one starts
            print(f"note: the Hub cannot be reached ({type(e).__name__}); using the cached copy of {name}",
                  file=sys.stderr)
            return
        raise ModelError(f"`{name}` is no local folder, and the Hub cannot be reached to fetch it "
                         f"({type(e).__name__}: {e}) nor is a copy cached; connect and rerun, or give a local model "
                         "folder with --set model.name_or_path=PATH (offline, set HF_HUB_OFFLINE=1).") from None


def check_seats(cfg, seats: dict[str, str | None], roles: dict[str, str]) -> None:
    """Every seat named is the protocol's, and every role swapped is one the seat's player has weights for: a
    run with one shared adapter (or the base) plays every seat alike, so a role given for it would be ignored."""
    known = list(cfg.chat.seats)
    unknown = sorted((set(seats) | set(roles) | set(roles.values())) - set(known))
    if unknown:
        raise UsageError(f"no seat {', '.join(unknown)} in this protocol; its seats are {', '.join(known)}.")
    for seat, role in roles.items():
        if role == seat:
            continue
        player = seats.get(seat)
        if player is None:
            raise UsageError(f"--role {seat}={role}: seat {seat} is played by the untrained base, which has no "
                             f"roles to swap; seat a run trained with model.adapters=per_role (--a, --b, --seat).")
        if not holds_roles(player):
            raise UsageError(f"--role {seat}={role}: {player} trained one shared adapter for every seat, so it plays "
                             "them all alike; a role swap needs a run trained with --set model.adapters=per_role.")


def pin(cfg) -> None:
    """A CPU run's numeric path pinned (`cpu_pins`), before torch loads."""
    from talktosolve.cpu_pins import is_cpu_run, pin_cpu

    if is_cpu_run(cfg.device):
        pin_cpu()


def problems(cfg, out: Path):
    """(train, test, eligibility): read before any model is looked for, so a bad `--gsm8k` is named first."""
    from talktosolve.task.tasks import load_problems

    return load_problems(cfg, out / "data")
