"""The command line: `talktosolve data | train | eval | compare | influence | recipe | diagnose | micro-base`.

Every command that runs models takes `--preset NAME` (data in talktosolve/presets/) and any number of
`--set section.field=value` overrides; the resolved config is written into the output folder.

A user's mistake ends in one line on stderr and exit status 2, with nothing written: every path argument says
what it must be (`talktosolve.folders`) and is checked as the command line is parsed; then the config, the inputs
it would ignore, the loggers, the seats and roles; then the data (a bad `--gsm8k` is named before any model is
looked for), then the model and device; only then does the work begin, and a folder made while checking is
removed when a check fails. `main` is the one place where these errors (`user_errors()`) are turned into that
line.

torch and transformers are imported inside the commands that run a model, so `--help` answers at once.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from talktosolve import __version__
from talktosolve.arms import ARMS
from talktosolve.config import ConfigError, make_config, parse_overrides, preset_names
from talktosolve.folders import (
    FolderError,
    check_diagnosable,
    check_evaluation,
    check_output,
    check_player,
    check_source,
)
from talktosolve.inputs import (
    SEED,
    UsageError,
    check_seats,
    checked,
    checking,
    pin,
    preflight,
    problems,
    quiet_hub_bars,
    seat_player,
    seat_role,
    whole,
)
from talktosolve.tracking import LOGGERS

DEFAULT_PRESET = "micro"
"""The preset of `train`, `eval` and `recipe` when none is given: the micro world, on a CPU, nothing downloaded."""


class _Parser(argparse.ArgumentParser):
    """argparse, whose complaints end like every other user error instead of printing the usage and exiting."""

    def error(self, message):
        raise UsageError(f"{message.rstrip('.')} (see `{self.prog} --help`)")


def command_config(args):
    """The config of a command that runs a model: preset, `--set`, `--gsm8k`; refused where the task it sets would
    not read the GSM8K it names. A CPU run is pinned to one numeric path here, before torch loads (`cpu_pins`)."""
    overrides = parse_overrides(args.set or [])
    if args.gsm8k is not None:
        overrides.setdefault("data", {})["gsm8k"] = args.gsm8k
    cfg = make_config(args.preset, overrides)
    if cfg.data.task == "micro" and cfg.data.gsm8k:
        given = f"--gsm8k {args.gsm8k}" if args.gsm8k else f"data.gsm8k={cfg.data.gsm8k}"
        raise UsageError(f"preset {args.preset} makes its own problems (data.task=micro) and reads no GSM8K, so "
                         f"{given} would be ignored; leave it out, or use a GSM8K preset (--preset paper).")
    if getattr(args, "log", None):
        from talktosolve.tracking import check_logger

        check_logger(args.log)
    pin(cfg)
    return cfg


def _common(p, *, log: bool = True):
    p.add_argument("--preset", default=DEFAULT_PRESET,
                   help=f"config preset: one of {', '.join(preset_names())} or a .json file (default: "
                        f"{DEFAULT_PRESET}, the micro world on a CPU)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field, e.g. --set train.lr=3e-4 (repeatable)")
    p.add_argument("--gsm8k", type=checked(check_source, built=True),
                   help="GSM8K folder, or one written by `talktosolve data`, for a preset whose data.task is gsm8k "
                        "(paper; default: the Hub, when online)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    if log:
        p.add_argument("--log", choices=LOGGERS, help="also send metrics to TensorBoard or W&B")


def cmd_data(args) -> int:
    from talktosolve.task.data import build_datasets, format_summary

    summary = build_datasets(args.gsm8k, args.out, n_train=args.n_train, n_test=args.n_test, seed=args.seed,
                             strict=args.strict)
    print(format_summary(summary))
    print(f"wrote {args.out}/train.jsonl, test.jsonl, eligibility_train.jsonl, eligibility_test.jsonl")
    return 0


def cmd_train(args) -> int:
    cfg = command_config(args)
    if cfg.train.runs_per_process > 1:
        raise ConfigError("train.runs_per_process groups the recipe's runs (`talktosolve recipe`); `talktosolve "
                          "train` trains one run: leave it at 1 here.")
    out = Path(args.out)
    with checking(out):
        train_set, _, _ = problems(cfg, out)
        preflight(cfg)
        loggers = _loggers(args, out)
    from talktosolve.experiment.train import train

    train(cfg, args.arm, args.seed, out, train_set, progress=not args.quiet, loggers=loggers, pool_dir=args.pool)
    from talktosolve.learning.distributed import leave, world

    if world()[0] == 0:
        print(f"trained {args.arm} seed {args.seed}: {out}/final (metrics in {out}/metrics.jsonl)")
    leave()
    return 0


def cmd_eval(args) -> int:
    cfg = command_config(args)
    seats = {"A": args.a, "B": args.b, **dict(args.seat or [])}
    seats = {seat: path for seat, path in seats.items() if path is not None}
    roles = dict(args.role or [])
    check_seats(cfg, seats, roles)
    out = Path(args.out)
    with checking(out):
        _, test_set, _ = problems(cfg, out)
        preflight(cfg)
    from talktosolve.experiment.evaluate import evaluate

    summary = evaluate(cfg, test_set, out, arm=args.arm, seats=seats, roles=roles or None, progress=not args.quiet)
    talk = summary["talk"]
    by_seat = ", ".join(f"{seat} {acc:.3f}" for seat, acc in summary["acc"].items())
    print(f"accuracy {summary['accuracy']:.3f} ({by_seat}) over "
          f"{summary['n_problems']} problems; send {_f(talk['send'])} use {_f(talk['use'])} ask {_f(talk['ask'])} "
          f"agree {_f(talk['agree'])}\nwrote {out}/summary.json and {out}/chats.jsonl")
    return 0


def cmd_compare(args) -> int:
    import numpy as np

    from talktosolve.stats import paired_delta_report
    from talktosolve.store import read_json

    both = sorted({Path(f).resolve() for f in args.chat} & {Path(f).resolve() for f in args.cut})
    if both:
        raise UsageError(f"{both[0]} is given as both --chat and --cut; compare needs each arm's own evaluations "
                         "(one folder against itself differs by 0).")
    for option, folders in (("--chat", args.chat), ("--cut", args.cut)):
        resolved = [Path(f).resolve() for f in folders]
        twice = next((f for i, f in enumerate(resolved) if f in resolved[:i]), None)
        if twice is not None:
            raise UsageError(f"{twice} is given twice in {option}; each evaluation is one seed: give it once.")

    def scores(folders):
        rows = [read_json(Path(f) / "summary.json") for f in folders]
        ids = rows[0]["problem_ids"]
        for f, r in zip(folders, rows):
            if r["problem_ids"] != ids:
                raise UsageError(f"{f} was evaluated on other problems than {folders[0]}; compare needs the same "
                                 "ones (evaluations of one config).")
        return np.array([r["scores"] for r in rows]), ids

    chat, ids = scores(args.chat)
    cut, ids_cut = scores(args.cut)
    if ids != ids_cut:
        raise UsageError("the chat and cut evaluations cover different problems; compare needs the same ones "
                         "(evaluations of one config).")
    rep = paired_delta_report(chat, cut)
    print(f"chat - cut = {rep['delta']:+.3f} [{rep['lo']:+.3f}, {rep['hi']:+.3f}] (95%, {rep['method']}; "
          f"{rep['n_seeds_a']} vs {rep['n_seeds_b']} seeds, {rep['n_problems']} problems)"
          f"{' -- ' + rep['warning'] if rep.get('warning') else ''}")
    if args.json:
        print(json.dumps(rep, indent=2))
    return 0


def cmd_influence(args) -> int:
    folder = Path(args.eval)
    preset = args.preset
    if preset is None:
        if not (folder / "config.json").is_file():
            raise UsageError(f"{folder} holds no config.json (an evaluation written before evaluations kept their "
                             "config); give the --preset and --set values it was evaluated with.")
        preset = str(folder / "config.json")
    cfg = make_config(preset, parse_overrides(args.set or []))
    pin(cfg)
    quiet_hub_bars()
    from talktosolve.experiment.replay import replay_influence  # torch loads here, after the pins

    def announce(messages: int, seconds: float) -> None:
        print(f"influence: {messages} replayed messages, about {seconds:.0f} s at the evaluation's own pace",
              file=sys.stderr)

    result = replay_influence(cfg, folder, turns=args.turns, progress=not args.quiet, announce=announce)
    for e in result["figures"]:
        d = e["drop"]
        follow = f", follow {e['follow']['mean']:.3f}" if e["follow"] else ""
        print(f"turn {e['turn']} {e['writer']} -> {e['listener']} {e['kind']:<8} drop {d['mean']:+.3f} "
              f"[{d['lo']:+.3f}, {d['hi']:+.3f}], flip {e['flip']['mean']:.3f}{follow}")
    print(f"{result['n_problems']} problems; control replays repeating the recorded chat: "
          f"{result['reproduced']:.3f}\nwrote {folder}/influence/influence.json and replays.jsonl")
    return 0


def _turns(text: str) -> list[int]:
    try:
        turns = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected turn numbers separated by commas, e.g. 1,2; got `{text}`") from None
    if not turns:
        raise argparse.ArgumentTypeError("expected at least one turn number, e.g. 1")
    return turns


def cmd_recipe(args) -> int:
    cfg = command_config(args)
    out = check_output(args.out or f"runs/{Path(args.preset).stem}", "recipe")
    with checking(out):
        problems(cfg, out)  # built into out/data once; the recipe reads them there
        preflight(cfg)
    from talktosolve.experiment.recipe import run_recipe
    from talktosolve.experiment.summary import terminal_summary

    results = run_recipe(cfg, out, preset=args.preset, progress=not args.quiet,
                         loggers_for=(lambda name: _loggers(args, out / "runs" / name)) if args.log else None)
    print(terminal_summary(results))
    print(f"\nwrote {out}/results.json, {out}/report.md, {out}/report.html")
    return 0


def cmd_diagnose(args) -> int:
    from talktosolve.experiment.diagnose import diagnose, table, write_diagnosis

    found = diagnose(Path(args.folder), bins=args.bins)
    if not found["runs"] and not found["evals"]:
        raise UsageError(f"{args.folder} holds no training transcripts or evaluation chats yet; give a run, an "
                         "evaluation or a recipe folder that has run.")
    print(table(found))
    print(f"wrote {write_diagnosis(Path(args.folder), found)}")
    return 0


def cmd_micro_base(args) -> int:
    from talktosolve.micro.base import micro_base_path, pretrain

    quiet_hub_bars()
    if args.out:
        path = pretrain(Path(args.out), seed=args.seed)
    else:
        path = micro_base_path(rebuild=args.rebuild)
    print(f"micro base model: {path}")
    return 0


def _loggers(args, out: Path) -> tuple:
    if not getattr(args, "log", None):
        return ()
    from talktosolve.tracking import make_logger

    return (make_logger(args.log, out),)


def _f(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="talktosolve", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("data", help="build split-fact GSM8K problems (train.jsonl, test.jsonl, eligibility)")
    p.add_argument("--gsm8k", type=checked(check_source, built=False),
                   help="GSM8K folder holding train/test .jsonl or .parquet (default: the Hub)")
    p.add_argument("--out", required=True, type=checked(check_output, kind="data"), help="output folder")
    p.add_argument("--n-train", type=whole(0), default=1024,
                   help="training problems to draw from the train split (default: %(default)s)")
    p.add_argument("--n-test", type=whole(0), default=300,
                   help="held-out problems to draw from the test split (default: %(default)s)")
    p.add_argument("--seed", type=SEED, default=0, help="seed that chooses the problems (default: %(default)s)")
    p.add_argument("--strict", action="store_true", help="stop at the first malformed row instead of skipping it")
    p.set_defaults(fn=cmd_data)

    p = sub.add_parser("train", help="train one arm and seed into a run folder (resumes if it exists)")
    _common(p)
    p.add_argument("--arm", choices=list(ARMS), required=True,
                   help="what each seat is dealt and shown: chat (messages delivered), cut (each message replaced "
                        "by `(no message)`), full (every seat holds every fact)")
    p.add_argument("--seed", type=SEED, default=0,
                   help="training seed: which problems each step plays and the sampler's random numbers "
                        "(default: %(default)s)")
    p.add_argument("--out", required=True, type=checked(check_output, kind="run"), help="run folder")
    p.add_argument("--pool", type=Path, default=None,
                   help="with train.pool_chats: the folder of the training pool's pre-pass, shared by every run of "
                        "an arm (default: OUT/pool)")
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("eval", help="evaluate a team (who plays each seat) on held-out problems")
    _common(p, log=False)  # an evaluation writes a summary, not metrics over steps
    p.add_argument("--a", type=checked(check_player),
                   help="seat A: a run folder or adapter folder (default: the untrained base)")
    p.add_argument("--b", type=checked(check_player),
                   help="seat B: a run folder or adapter folder (default: the untrained base)")
    p.add_argument("--seat", action="append", metavar="SEAT=FOLDER", type=seat_player,
                   help="any seat of the protocol played by a run or adapter folder, e.g. --seat C=runs/x "
                        "(repeatable; seats not given are the untrained base)")
    p.add_argument("--role", action="append", metavar="SEAT=ROLE", type=seat_role,
                   help="for a run with per-role weights (model.adapters=per_role): the seat whose weights play "
                        "SEAT, e.g. --role A=B --role B=A (a role swap; repeatable; default: each seat its own)")
    p.add_argument("--arm", choices=list(ARMS), default="chat",
                   help="the arm the team plays in: chat, cut or full (default: %(default)s)")
    p.add_argument("--out", required=True, type=checked(check_output, kind="eval"), help="output folder")
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser("compare", help="paired chat-vs-cut delta over evaluation folders")
    p.add_argument("--chat", nargs="+", required=True, type=checked(check_evaluation),
                   help="eval folders of the chat arm, one per seed")
    p.add_argument("--cut", nargs="+", required=True, type=checked(check_evaluation),
                   help="eval folders of the cut arm, one per seed")
    p.add_argument("--json", action="store_true", help="also print the full report as JSON")
    p.set_defaults(fn=cmd_compare)

    p = sub.add_parser("influence", help="replay an evaluation with each message ablated: each message's influence")
    p.add_argument("--eval", required=True, type=checked(check_evaluation), help="a finished evaluation folder")
    p.add_argument("--preset", help="the config it was evaluated with (default: the folder's config.json)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field, e.g. --set eval.influence_problems=50 (repeatable)")
    p.add_argument("--turns", type=_turns, help="replay only these message positions, e.g. 1 or 0,2 (default: all)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(fn=cmd_influence)

    p = sub.add_parser("recipe", help="the whole recipe: arms x seeds, evals, cross-play, comparisons, report")
    _common(p)
    p.add_argument("--out", type=checked(check_output, kind="recipe"), help="output folder (default: runs/PRESET)")
    p.set_defaults(fn=cmd_recipe)

    p = sub.add_parser("diagnose", help="why a run is or is not learning: boxed answers, groups with a signal, "
                                        "message lengths, over training steps and per evaluation")
    p.add_argument("folder", type=checked(check_diagnosable), help="a run, evaluation or recipe folder")
    p.add_argument("--bins", type=whole(1), default=4, help="spans of training steps to report (default 4)")
    p.set_defaults(fn=cmd_diagnose)

    p = sub.add_parser("micro-base", help="pretrain (or locate) the micro world's base model")
    p.add_argument("--out", type=checked(check_output, kind="model"),
                   help="pretrain into this folder instead of the user cache")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the pretraining (default: %(default)s)")
    p.add_argument("--rebuild", action="store_true", help="pretrain again even if a cached or shipped one exists")
    p.set_defaults(fn=cmd_micro_base)
    return parser


_USER_ERRORS = {"talktosolve.task.data": "DataError", "talktosolve.model.policy": "ModelError",
                 "talktosolve.experiment.train": "TrainingError", "talktosolve.tracking": "TrackingError",
                 "talktosolve.team.influence": "InfluenceError", "talktosolve.experiment.evaluate": "EvaluationError"}


def user_errors() -> tuple[type[Exception], ...]:
    """The exceptions that mean the user's input cannot be used (each module's own), as opposed to a bug.

    Only modules already imported are asked: one not imported cannot have raised its error, and importing them
    all here would load torch for every `--help`."""
    loaded = tuple(getattr(sys.modules[module], name) for module, name in _USER_ERRORS.items()
                   if module in sys.modules)
    return (UsageError, FolderError, ConfigError, *loaded)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.fn(args)
    except user_errors() as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)  # one line, however the message was wrapped
        return 2
    except PermissionError as e:
        print(f"error: {e.strerror}: {e.filename}. Give a folder you can write to.", file=sys.stderr)
        return 2
    except OSError as e:
        import errno

        if e.errno == errno.ENOSPC:
            print(f"error: the disk is full ({e}). Nothing half-written was kept; free some space and rerun the "
                  "same command to resume.", file=sys.stderr)
            return 28
        raise
    except KeyboardInterrupt as e:  # Ctrl-C, or a signal that stopped training at a step (stopping.Stopped)
        print(f"{e or 'interrupted'}: rerun the same command to resume", file=sys.stderr)
        return getattr(e, "code", 130)


if __name__ == "__main__":
    sys.exit(main())
