"""Docs that cannot drift: README.md and docs/*.md, checked against the code and the committed JSON.

What is checked, on every page (README.md and docs/*.md):

1. Commands. Every shell command shown that runs `talktosolve`, `python -m talktosolve[.cli]` (also after
   `torchrun ...`) or `python bench/NAME.py` parses: its argv goes through the real parser in this process
   (`talktosolve.cli.build_parser`; a bench script's own `main`, stopped right after its `parse_args`), and a
   command that takes `--preset`/`--set` also builds its config (`make_config`), so a renamed subcommand,
   option, preset or config key fails here. `--help` counts as parsed. A line of a ```bash block is a whole
   command; an inline code span may be a fragment (`talktosolve data --strict`), so its required options may be
   left out. Shorthand: `chat|cut` shows alternatives (each is parsed; `\\|` inside a table), `EVAL...` a
   repeatable value, an ALL-CAPS word (`DIR`, `N`) or `$VAR` a placeholder (parsed as `1`).
2. Links. Every relative link `[text](path)` or `[text](path#anchor)` (images too; not inside HTML comments)
   names a file of the repository, and its anchor, if any, one of that page's headings (GitHub's slugs).
3. Figures. A figure quoted from a committed JSON (the runs under `bench/results/`, or a preset) carries a
   marker, an HTML comment written right after it, invisible when the page is rendered:

       <!-- source: bench/results/micro_recipe-2cpu-2026-12-01.json -->
       the command took 443.7 s<!-- = recipe_command_seconds --> on 2 CPU cores

   `<!-- source: FILE -->` names the JSON for the markers after it on the page (until the next `source`);
   `<!-- FILE = EXPR -->` names another file for one marker. FILE is a path from the repository's root, or a
   bare `NAME.json` of `bench/results/`. EXPR is a Python expression over the JSON: its top-level keys are
   names, objects allow dotted access (`learn.tokens_per_s`), lists indexing (`decode[4].ms_per_step`); `data`
   is the whole file, and at hand are `row(LIST, key=value, ...)` (the one element that matches),
   `load(NAME.json)` (another file, for a figure drawn from two runs), `kernels(TABLE)` and
   `cuda_total_us(TABLE)` (a torch.profiler table as the profile scripts store it), `median`, `sum`, `min`,
   `max`, `len`, `round`, `abs`, `sorted`. The marker checks the last number written before it on its line
   (after the previous marker): the page's number must be the value rounded to the decimals the page shows
   (`1,234` reads as 1234; a sign counts, a `%` does not: write `100 * share`). An EXPR that gives a tuple
   checks that many numbers, in order (`4.38-4.81 s<!-- = min(xs), max(xs) -->`).
4. Quotes. A fenced block right after `<!-- quote: MODULE.py -->` must appear verbatim in that module's
   docstring (design.md quotes the learner's, `talktosolve/learning/grpo.py`).
5. Python. Every ```python block compiles, its imports work and the attributes it reads from imported modules
   exist; a block right after `<!-- test: run -->` is also executed (in a temporary folder).
6. `docs/results.md` names every field of `talktosolve/experiment/results.schema.json`.
7. A recipe's terminal summary quoted on several pages (a ```text block that starts `talktosolve: preset`) is
   the same on each.
8. Names. An inline code span that names a config field (`train.lr`; `--set train.lr=3e-4` must also parse)
   or something in a talktosolve module (`grpo.grpo_update`, `talktosolve.experiment.summary.terminal_summary`) names
   one that exists.

`test_counts` prints how many commands, links, figures, names, quotes and Python blocks were checked
(`pytest -s`).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import re
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "talktosolve"
RESULTS = ROOT / "bench" / "results"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# ------------------------------------------------------------------------------------------------ reading pages

@dataclass
class Line:
    page: Path
    number: int
    text: str
    """The line as written (figure markers are read from it)."""
    plain: str
    """The same without HTML comments (links and commands are read from it)."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.number}"


@dataclass
class Block:
    """A fenced code block: its language, its first line (the fence) and its text."""

    page: Path
    number: int
    lang: str
    text: str
    marker: str | None
    """The HTML comment on the last non-empty line before the fence, if that line is only a comment."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.number}"


def split_page(page: Path) -> tuple[list[Line], list[Block]]:
    """A page's prose lines (tables included) and its fenced blocks."""
    prose, blocks = [], []
    lines = page.read_text(encoding="utf-8").splitlines()
    fence, start, lang, body = None, 0, "", []
    last = ""
    in_comment = False
    for i, text in enumerate(lines, 1):
        stripped = text.strip()
        if fence is None and (in_comment or "<!--" in text):
            plain, in_comment = _uncomment(text, in_comment)
            prose.append(Line(page, i, text, plain))
            if stripped and not in_comment:
                last = text
            continue
        if fence is None:
            m = re.match(r"^(```+|~~~+)\s*([\w+-]*)", stripped)
            if m:
                fence, start, lang, body = m.group(1), i, m.group(2).lower(), []
                comment = re.fullmatch(r"<!--\s*(.*?)\s*-->", last.strip())
                blocks.append(Block(page, i, lang, "", comment.group(1) if comment else None))
                continue
            prose.append(Line(page, i, text, text))
            if stripped:
                last = text
        elif stripped.startswith(fence):
            blocks[-1].text = "\n".join(body) + "\n"
            fence, last = None, ""
        else:
            body.append(text)
    assert fence is None, f"{page}: a code block opened at line {start} is never closed"
    return prose, blocks


def _uncomment(text: str, in_comment: bool) -> tuple[str, bool]:
    """`text` without its HTML comments, and whether a comment is still open at its end."""
    out = []
    while text:
        if in_comment:
            end = text.find("-->")
            if end < 0:
                return "".join(out), True
            text, in_comment = text[end + 3:], False
        else:
            start = text.find("<!--")
            if start < 0:
                out.append(text)
                break
            out.append(text[:start])
            text, in_comment = text[start + 4:], True
    return "".join(out), in_comment


def without_code(text: str) -> str:
    return re.sub(r"`[^`]*`", "``", text)


# ------------------------------------------------------------------------------------------------ 1. commands

CLI_HEADS = (("talktosolve",), ("python", "-m", "talktosolve"), ("python", "-m", "talktosolve.cli"),
             ("python3", "-m", "talktosolve"), ("python3", "-m", "talktosolve.cli"))


def shell_commands(page: Path) -> list[tuple[str, str, bool]]:
    """(where, command, fragment) for every command of interest on the page. A line of a bash block is a whole
    command; an inline code span may be a fragment that names a subcommand or an option (`talktosolve data
    --strict`), so its required options may be left out."""
    prose, blocks = split_page(page)
    found = []
    for b in blocks:
        if b.lang not in ("bash", "sh", "shell", "console"):
            continue
        joined = re.sub(r"\\\n", " ", b.text)
        for k, line in enumerate(joined.splitlines()):
            line = re.sub(r"^\s*\$ ", "", line)
            for segment in _segments(shlex.split(line, comments=True)):
                if _kind(segment):
                    found.append((f"{b.where}+{k + 1}", shlex.join(segment), False))
    for line in prose:
        for span in re.findall(r"`([^`]+)`", line.plain):
            span = span.replace("\\|", "|")
            if re.match(r"(talktosolve|python3? -m talktosolve(\.cli)?|python3? bench/\S+\.py)( |$)", span):
                found.append((line.where, span, True))
    return found


def _segments(tokens: list[str]) -> list[list[str]]:
    out, cur = [], []
    for t in tokens:
        if t in ("&&", "||", ";", "|"):
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    return [s for s in out + [cur] if s]


def _kind(tokens: list[str]) -> str | None:
    tokens = _drop_env(tokens)
    if not tokens:
        return None
    if tokens[0] == "torchrun":
        return "cli" if "talktosolve.cli" in tokens else None
    if any(tuple(tokens[:len(h)]) == h for h in CLI_HEADS):
        return "cli"
    if tokens[0] in ("python", "python3") and len(tokens) > 1 and re.fullmatch(r"bench/\w+\.py", tokens[1]):
        return "bench"
    return None


def _drop_env(tokens: list[str]) -> list[str]:
    while tokens and re.fullmatch(r"[A-Za-z_]\w*=\S*", tokens[0]):
        tokens = tokens[1:]
    return tokens


def _argv(tokens: list[str]) -> list[str]:
    """The arguments after the program (the CLI's subcommand onwards, or the bench script's)."""
    tokens = _drop_env(tokens)
    if tokens[0] == "torchrun":
        return tokens[tokens.index("talktosolve.cli") + 1:]
    if tokens[0] == "talktosolve":
        return tokens[1:]
    if tokens[1] == "-m":
        return tokens[3:]
    return tokens[2:]


PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*|\$\{?\w+\}?(:\w+)?")


def _expand(argv: list[str]) -> list[tuple[list[str], set[int]]]:
    """Alternatives (`a|b`), repeatable values (`X...`) and placeholders (`DIR`, `$HOST`) written out: each
    argv to parse, with the positions that held a placeholder (now `1`, which parses as a number or a path)."""
    options: list[tuple[list[str], set[int]]] = [([], set())]
    for i, tok in enumerate(argv):
        tok = tok[:-3] if tok.endswith("...") and len(tok) > 3 else tok
        choices = tok.split("|") if "|" in tok and not tok.startswith("-") else [tok]
        options = [(o + ["1" if PLACEHOLDER.fullmatch(c) else c], held | ({i} if PLACEHOLDER.fullmatch(c) else set()))
                   for o, held in options for c in choices]
    return options


def _relax(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser with no option required (a fragment names a subcommand or an option, not a whole command)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _relax(sub)
        elif action.option_strings:
            action.required = False
    return parser


class _Parsed(Exception):
    pass


def check_cli(argv: list[str], fragment: bool = False, placeholders: frozenset = frozenset()) -> None:
    from unittest import mock

    import talktosolve.cli as cli
    from talktosolve.config import make_config, parse_overrides

    # A page's paths are the reader's (`path/to/gsm8k`, `runs/x`): the parser's folder checks, which look at the
    # disk, are stood in for by ones that accept any path; options, types, presets and config keys stay checked.
    anything = {name: (lambda path, **kw: Path(path)) for name in
                ("check_source", "check_player", "check_evaluation", "check_output", "check_diagnosable")}
    with mock.patch.multiple(cli, **anything):
        parser = _relax(cli.build_parser()) if fragment else cli.build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        if e.code == 0:  # --help
            return
        raise AssertionError(f"talktosolve {shlex.join(argv)}: the CLI's parser refused it") from None
    preset_named = "--preset" in argv and argv.index("--preset") + 1 in placeholders
    if hasattr(args, "preset") and not preset_named:
        make_config(args.preset, parse_overrides(args.set or []))


def check_bench(argv: list[str], monkeypatch, fragment: bool = False) -> None:
    import runpy

    script = ROOT / argv[0]
    assert script.is_file(), f"no script {argv[0]}"
    monkeypatch.syspath_prepend(str(script.parent))
    module = runpy.run_path(str(script), run_name="docs_check")
    parse = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, args=None, namespace=None):
        parse(_relax(self) if fragment else self, argv[1:], namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_and_stop)
    try:
        module["main"]()
    except _Parsed:
        return
    except SystemExit as e:
        if e.code == 0:
            return
        raise AssertionError(f"python {shlex.join(argv)}: the script's parser refused it") from None
    raise AssertionError(f"{argv[0]}: main() returned without parsing its arguments")


COMMANDS = [cmd for page in pages() for cmd in shell_commands(page)]


@pytest.mark.parametrize("where, command, fragment", COMMANDS, ids=[f"{w} {c[:50]}" for w, c, _ in COMMANDS])
def test_command_parses(where, command, fragment, monkeypatch, capsys):
    tokens = shlex.split(command)
    for argv, held in _expand(_argv(tokens)):
        if _kind(tokens) == "cli":
            check_cli(argv, fragment, frozenset(held))
        else:
            check_bench([_drop_env(tokens)[1], *argv], monkeypatch, fragment)
    capsys.readouterr()


# ------------------------------------------------------------------------------------------------ 2. links

def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    prose, _ = split_page(page)
    for line in prose:
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line.plain)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            out.add(s if n == 0 else f"{s}-{n}")
            seen[s] = n + 1
    return out


def links(page: Path) -> list[tuple[str, str]]:
    prose, _ = split_page(page)
    found = []
    for line in prose:
        for target in re.findall(r"!?\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)", without_code(line.plain)):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not checked
                found.append((line.where, target))
    return found


LINKS = [(p, where, target) for p in pages() for where, target in links(p)]


@pytest.mark.parametrize("page, where, target", LINKS, ids=[f"{w} {t}" for _, w, t in LINKS])
def test_link_resolves(page, where, target):
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    assert dest.exists(), f"{where}: link to {target}: there is no {path}"
    if anchor:
        assert dest.suffix == ".md", f"{where}: {target}: an anchor into a non-Markdown file"
        assert anchor in anchors(dest), f"{where}: {target}: no heading of {path or 'this page'} has #{anchor}"


# ------------------------------------------------------------------------------------------------ 3. figures

MARKER = re.compile(r"<!--\s*(?:source:\s*(?P<source>\S+)|(?P<file>[\w./-]+\.json)?\s*=\s*(?P<expr>.*?))\s*-->")
NUMBER = re.compile(r"(?P<sign>(?<![\w.)\]])[+\-\u2212])?(?<![\w.])(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)")


class J(dict):
    """A JSON object whose keys read as attributes too."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"no key {key!r} (keys: {', '.join(self)})") from None


def _wrap(x):
    if isinstance(x, dict):
        return J((k, _wrap(v)) for k, v in x.items())
    if isinstance(x, list):
        return [_wrap(v) for v in x]
    return x


def row(rows: list, **match):
    """The one element of `rows` whose fields equal `match`."""
    hits = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    assert len(hits) == 1, f"row({match}): {len(hits)} rows match"
    return hits[0]


def kernels(table: list[str]) -> list[J]:
    """The rows of a torch.profiler table as the profile scripts store it (a list of lines): name,
    self_cuda_us, self_cuda_pct, cuda_avg_us, calls."""
    width = len(table[0].split()[0])  # the name column is as wide as its run of dashes
    out = []
    for line in table:
        cells = line[width:].split()
        if len(cells) == 10 and cells[-1].isdigit():
            out.append(J(name=line[:width].strip(), self_cuda_us=_us(cells[5]), self_cuda_pct=float(cells[6][:-1]),
                         cuda_avg_us=_us(cells[8]), calls=int(cells[9])))
    return out


def cuda_total_us(table: list[str]) -> float:
    """The table's `Self CUDA time total`, in microseconds."""
    return next(_us(line.split(":")[1].strip()) for line in table if line.startswith("Self CUDA time total"))


def _us(text: str) -> float:
    for unit, scale in (("us", 1.0), ("ms", 1e3), ("s", 1e6)):
        if text.endswith(unit):
            return float(text[:-len(unit)]) * scale
    raise ValueError(f"not a time: {text!r}")


def load(name: str) -> J:
    """Another JSON file of bench/results/ (a figure drawn from two runs)."""
    return _wrap(json.loads(_json_path(name).read_text()))


HELPERS = {"row": row, "kernels": kernels, "cuda_total_us": cuda_total_us, "load": load,
           "median": statistics.median, "sum": sum, "min": min, "max": max, "len": len, "round": round, "abs": abs,
           "sorted": sorted}


def _json_path(name: str) -> Path:
    return ROOT / name if "/" in name else RESULTS / name


def evaluate_marker(file: Path, expr: str):
    data = load(str(file.relative_to(ROOT)))
    names = {**HELPERS, "data": data, **{k: v for k, v in data.items() if k.isidentifier()}}
    value = eval(expr, {"__builtins__": {}, **names})  # noqa: S307 -- the repository's own pages
    return value if isinstance(value, tuple) else (value,)


def figures(page: Path) -> list[tuple[str, str, str, str]]:
    """(where, json file, expression, the text the figures are read from) for every figure marker."""
    prose, _ = split_page(page)
    source = None
    found = []
    for line in prose:
        start = 0
        for m in MARKER.finditer(line.text):
            if m.group("source"):
                source = m.group("source")
            else:
                file = m.group("file") or source
                assert file, f"{line.where}: a figure marker before any <!-- source: FILE --> line"
                found.append((line.where, file, m.group("expr"), line.text[start:m.start()]))
            start = m.end()
    return found


def _numbers(text: str) -> list[tuple[str, float, int]]:
    out = []
    for m in NUMBER.finditer(without_code(text)):
        num = m.group("num")
        value = float(num.replace(",", ""))
        if m.group("sign") in ("-", "\u2212"):
            value = -value
        decimals = len(num.split(".")[1]) if "." in num else 0
        out.append(((m.group("sign") or "") + num, value, decimals))
    return out


def check_figure(where: str, file: str, expr: str, text: str) -> None:
    path = _json_path(file)
    assert path.is_file(), f"{where}: no JSON file {file}"
    values = evaluate_marker(path, expr)
    shown = _numbers(text)
    assert len(shown) >= len(values), f"{where}: the marker `{expr}` has no figure before it (in {text!r})"
    for (written, doc, decimals), value in zip(shown[len(shown) - len(values):], values):
        assert isinstance(value, (int, float)) and not isinstance(value, bool), \
            f"{where}: `{expr}` in {file} is {value!r}, not a number"
        assert abs(value - doc) <= 0.5 * 10 ** -decimals + 1e-9, \
            f"{where}: the page says {written}, but `{expr}` in {file} is {value!r} ({value:.{decimals}f})"


FIGURES = [fig for page in pages() for fig in figures(page)]


@pytest.mark.parametrize("where, file, expr, text", FIGURES, ids=[f"{w} {e[:40]}" for w, _, e, _ in FIGURES])
def test_figure_matches_json(where, file, expr, text):
    check_figure(where, file, expr, text)


def test_a_changed_figure_fails():
    """The figure check can fail: the first marked figure, altered in its last shown digit, is refused."""
    where, file, expr, text = FIGURES[0]
    written = _numbers(text)[-1][0]
    last = written[-1]
    altered = text[:text.rindex(written)] + written[:-1] + str((int(last) + 3) % 10)
    with pytest.raises(AssertionError, match="the page says"):
        check_figure(where, file, expr, altered)


# ------------------------------------------------------------------------------------------------ 4, 5. blocks

BLOCKS = [b for page in pages() for b in split_page(page)[1]]
QUOTES = [b for b in BLOCKS if b.marker and b.marker.startswith("quote:")]
PYTHON = [b for b in BLOCKS if b.lang == "python"]


@pytest.mark.parametrize("block", QUOTES, ids=[b.where for b in QUOTES])
def test_quote_is_verbatim(block):
    module = ROOT / block.marker.split(":", 1)[1].strip()
    doc = ast.get_docstring(ast.parse(module.read_text()), clean=False)
    assert block.text.rstrip("\n") in doc, f"{block.where}: the quoted block is not in {module.name}'s docstring"


@pytest.mark.parametrize("block", PYTHON, ids=[b.where for b in PYTHON])
def test_python_block(block, tmp_path, monkeypatch):

    tree = ast.parse(block.text, filename=block.where)
    modules = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                modules[a.asname or a.name.split(".")[0]] = importlib.import_module(a.name if a.asname else
                                                                                    a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            mod = importlib.import_module(node.module)
            for a in node.names:
                assert hasattr(mod, a.name) or importlib.util.find_spec(f"{node.module}.{a.name}"), \
                    f"{block.where}: {node.module} has no {a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            assert hasattr(modules[node.value.id], node.attr), f"{block.where}: no {node.value.id}.{node.attr}"
    if block.marker == "test: run":
        monkeypatch.chdir(tmp_path)
        exec(compile(tree, block.where, "exec"), {"__name__": "docs_example"})  # noqa: S102


# ------------------------------------------------------------------------------------------ 6, 7. results.md, summaries

def test_results_md_names_every_schema_field():
    schema = json.loads((PACKAGE / "experiment" / "results.schema.json").read_text())
    names = set()

    def walk(node):
        if isinstance(node, dict):
            names.update(node.get("properties", {}))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    text = (ROOT / "docs" / "results.md").read_text()
    missing = sorted(n for n in names if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text))
    assert not missing, f"docs/results.md does not name the schema's fields {missing}"


def test_quoted_summaries_agree():
    summaries: dict[str, list[Block]] = {}
    for b in BLOCKS:
        if b.lang == "text" and b.text.startswith("talktosolve: preset"):
            summaries.setdefault(b.text.splitlines()[0], []).append(b)
    assert summaries, "no terminal summary is quoted"
    for first, blocks in summaries.items():
        differ = [b.where for b in blocks if b.text != blocks[0].text]
        assert not differ, f"the summary `{first}` at {blocks[0].where} differs from its copies at {differ}"


# ------------------------------------------------------------------------------------------------ 8. names

SECTIONS = ("model", "data", "chat", "train", "eval")
FILE_ENDINGS = ("json", "jsonl", "md", "html", "png", "py", "safetensors", "parquet", "bin", "txt")
NAME_SPAN = re.compile(r"(?:--set )?(?P<key>[a-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:=(?P<value>\S+))?")


def names(page: Path) -> list[tuple[str, str]]:
    """(where, span) for every inline code span that names a config field (`train.lr`, `--set train.lr=3e-4`)
    or something in a talktosolve module (`grpo.grpo_update`, `talktosolve.experiment.summary.terminal_summary`)."""
    prose, _ = split_page(page)
    found = []
    for line in prose:
        for span in re.findall(r"`([^`]+)`", line.plain):
            m = NAME_SPAN.fullmatch(span)
            if not m or span.rsplit(".", 1)[-1] in FILE_ENDINGS:
                continue
            parts = m.group("key").split(".")
            if m.group("value") is not None and span.startswith("--set ") or len(parts) > 1 and (
                    parts[0] in SECTIONS or parts[0] == "talktosolve" or _module(parts[0]) is not None):
                found.append((line.where, span))
    return found


def _qualified(name: str) -> str | None:
    """The module a page names by its short name (`grpo`, the folder left out as prose does), or by its path from
    the package (`learning.grpo`): `talktosolve.learning.grpo`; None when there is none."""
    if name == "talktosolve":
        return name
    for dotted in (f"talktosolve.{name}", *(f"talktosolve.{p.name}.{name}" for p in sorted(PACKAGE.iterdir())
                                            if (p / "__init__.py").is_file())):
        try:
            if importlib.util.find_spec(dotted):
                return dotted
        except (ImportError, ValueError):
            continue
    return None


def _module(name: str):
    dotted = _qualified(name)
    return importlib.import_module(dotted) if dotted else None


def _config_field(parts: list[str]) -> bool:
    import dataclasses

    from talktosolve.config import Config

    obj = Config()
    for part in parts:
        if not dataclasses.is_dataclass(obj) or part not in {f.name for f in dataclasses.fields(obj)}:
            return False
        obj = getattr(obj, part)
    return True


def _attribute(parts: list[str]) -> bool:
    """Whether `talktosolve.PARTS` (or PARTS, when it starts with `talktosolve`) exists, importing submodules."""
    if parts[0] != "talktosolve" and _qualified(parts[0]):
        parts = [*_qualified(parts[0]).split("."), *parts[1:]]
    path = parts if parts[0] == "talktosolve" else ["talktosolve", *parts]
    obj = importlib.import_module("talktosolve")
    for i, part in enumerate(path[1:], 2):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        try:
            obj = importlib.import_module(".".join(path[:i]))
        except ImportError:
            return False
    return True


NAMES = [(where, span) for page in pages() for where, span in names(page)]


@pytest.mark.parametrize("where, span", NAMES, ids=[f"{w} {s}" for w, s in NAMES])
def test_name_exists(where, span):
    from talktosolve.config import ConfigError, parse_overrides

    m = NAME_SPAN.fullmatch(span)
    parts = m.group("key").split(".")
    if m.group("value") is not None:
        value = "1" if PLACEHOLDER.fullmatch(m.group("value")) else m.group("value")
        try:
            parse_overrides([f"{m.group('key')}={value}"])
        except (ConfigError, ValueError) as e:
            raise AssertionError(f"{where}: `{span}`: {e}") from None
        return
    assert _config_field(parts) or _attribute(parts), \
        f"{where}: `{span}` is neither a config field nor a name in talktosolve"


def test_counts():
    """What this file checks; the counts are printed (`pytest -s tests/test_docs.py`) and must not fall to 0."""
    counts = {"commands": len(COMMANDS), "links": len(LINKS), "figures": len(FIGURES), "names": len(NAMES),
              "quotes": len(QUOTES), "python blocks": len(PYTHON)}
    print("\ndocs checked: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    assert all(counts.values()), counts
