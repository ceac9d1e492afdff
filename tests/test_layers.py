"""The package's imports point down: every module stands on one floor of those `talktosolve/__init__.py`
declares (low to high), imports only from its own floor or lower ones, and no imports go round in a circle.

The import graph is read from the source (ast), module-level and function-level imports alike: an import put
inside a function to dodge a circle is still an arrow. `from talktosolve.micro import base` is an arrow to
`micro.base`; `from talktosolve import __version__` one to `talktosolve`, the package itself.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import talktosolve

PACKAGE = Path(talktosolve.__file__).parent


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package at `root` by its name inside it (`micro.base`; the package itself by the
    folder's name, a subpackage by its own: `micro`)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name or root.name] = path
    return out


def imports(root: Path) -> dict[str, set[str]]:
    """The graph: each module -> the modules of the package it imports, anywhere in its file."""
    known = modules(root)
    package = root.name

    def target(dotted: str) -> str | None:
        if dotted == package:
            return package
        if not dotted.startswith(package + "."):
            return None
        name = dotted[len(package) + 1:]
        while name and name not in known:  # `talktosolve.micro.base.MICRO` -> `micro.base`
            name = name.rpartition(".")[0]
        return name or package

    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        found = set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(target(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, up level - 1 more
                    here = [package] + ([] if name == package else name.split("."))
                    here = here if is_package else here[:-1]
                    base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
                # `from pkg import sub` imports the module pkg.sub; `from mod import name` the module mod
                found.update(target(f"{base}.{a.name}") if target(f"{base}.{a.name}") != target(base) else
                             target(base) for a in node.names)
        found.discard(None)
        found.discard(name)
        graph[name] = found
    return graph


def declared_floors(doc: str) -> list[tuple[str, list[str]]]:
    """The floors of a docstring, low to high: the indented block of `name:  module module ...` lines (a line
    without a name continues the floor above it)."""
    floors: list[tuple[str, list[str]]] = []
    block = re.search(r"^( {4}\w+:\s.*\n(?: {4,}\S.*\n)*)", doc + "\n", re.MULTILINE)
    assert block, "talktosolve/__init__.py's docstring declares no floors (an indented `name: modules` block)"
    for line in textwrap.dedent(block.group(1)).splitlines():
        named = re.match(r"(\w+):\s+(.*)", line)
        if named:
            floors.append((named.group(1), named.group(2).split()))
        else:
            floors[-1][1].extend(line.split())
    return floors


def floor_of(floors: list[tuple[str, list[str]]]) -> dict[str, int]:
    return {module: i for i, (_, names) in enumerate(floors) for module in names}


def arrows_up(graph: dict[str, set[str]], floors: list[tuple[str, list[str]]]) -> list[str]:
    level = floor_of(floors)
    names = [name for name, _ in floors]
    return [f"{a} ({names[level[a]]}) -> {b} ({names[level[b]]})"
            for a in sorted(graph) for b in sorted(graph[a]) if a in level and b in level and level[b] > level[a]]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


# ------------------------------------------------------------------------------------------------ the package

def test_every_module_stands_on_exactly_one_floor():
    floors = declared_floors(talktosolve.__doc__)
    declared = [module for _, names in floors for module in names]
    twice = sorted({m for m in declared if declared.count(m) > 1})
    assert not twice, f"on two floors: {twice}"
    known = set(modules(PACKAGE))
    assert not known - set(declared), (f"on no floor of talktosolve/__init__.py: {sorted(known - set(declared))}; "
                                       "add each to the lowest floor that holds every module it imports")
    assert not set(declared) - known, f"floors name modules that do not exist: {sorted(set(declared) - known)}"


def test_no_import_circles():
    found = circles(imports(PACKAGE))
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_every_import_points_to_its_own_floor_or_a_lower_one():
    found = arrows_up(imports(PACKAGE), declared_floors(talktosolve.__doc__))
    assert not found, "imports that point up:\n" + "\n".join(found)


FOLDERS = ("", "task", "team", "model", "sampling", "learning", "experiment")
"""The folders, low to high ("": the package's own modules: config, arms, protocol, store, stats, cpu_pins); the
command line (`cli`, `inputs`, `__main__`, `folders`, `tracking`) stands above them all. `micro/` is a task and
the models built for it: its task modules stand with `task/`, its bases with `model/`."""
ENTRY = {"cli", "inputs", "__main__", "folders", "tracking"}
MICRO_TASK = {"micro.task", "micro.prompts", "micro.script", "micro.tokenizer"}


def folder_level(module: str) -> int:
    if module in ENTRY:
        return len(FOLDERS)
    if module.split(".")[0] == "micro":
        return FOLDERS.index("task" if module in MICRO_TASK else "model")
    head = module.split(".")[0]
    return FOLDERS.index(head) if head in FOLDERS else 0


def test_every_import_points_to_its_own_folder_or_a_lower_one():
    graph = imports(PACKAGE)
    found = [f"{a} -> {b}" for a in sorted(graph) for b in sorted(graph[a])
             if a != PACKAGE.name and folder_level(b) > folder_level(a)]
    assert not found, "imports from a folder higher up:\n" + "\n".join(found)


def test_every_folder_says_its_purpose_in_one_line():
    for name in FOLDERS[1:]:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
        assert doc and len(doc.splitlines()) == 1, f"talktosolve/{name}/__init__.py: its purpose in one line"


def picture_folders(page: str) -> dict[str, set[str]]:
    """The modules each folder of docs/design.md's module map names: the `name/   a, b, c` lines of its text
    block (a line under one, after its `|`, continues it)."""
    block = page.split("## The module map", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    found: dict[str, set[str]] = {}
    folder = None
    for line in block.splitlines():
        named = re.match(r"\s+(\w+)/\s+(.*)", line)
        more = re.match(r"\s+\|\s+(\w.*)", line)
        if named:
            folder, text = named.group(1), named.group(2)
            text = text.split("  ")[0]  # what follows two spaces is another folder beside it
        elif more and folder:
            text = more.group(1)
        else:
            folder = None
            continue
        found.setdefault(folder, set()).update(w.strip() for w in text.split(",") if w.strip())
    return found


def test_the_design_docs_picture_names_every_module_of_every_folder():
    pictured = picture_folders((PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8"))
    for name in FOLDERS[1:]:
        held = {path.stem for path in (PACKAGE / name).glob("*.py") if path.stem != "__init__"}
        assert pictured.get(name) == held, (f"docs/design.md's module map, {name}/: names "
                                            f"{sorted(pictured.get(name, ()))}, the folder holds {sorted(held)}")


# ------------------------------------------------------------------------------------------------ the reader

def test_the_reader_finds_circles_and_arrows_up_in_a_made_up_package(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""\n    low:  a sub.c\n    high: b sub pkg\n"""\nfrom pkg.b import x\n')
    (pkg / "a.py").write_text("def f():\n    from pkg import b  # inside a function: still an arrow\n")
    (pkg / "b.py").write_text("import pkg.a\nx = 1\n")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import c\n")
    (pkg / "sub" / "c.py").write_text("from . import helper  # not a module: sub itself\nfrom ..a import f\n")
    graph = imports(pkg)
    assert graph == {"pkg": {"b"}, "a": {"b"}, "b": {"a"}, "sub": {"sub.c"}, "sub.c": {"sub", "a"}}
    assert circles(graph) == [["a", "b"], ["sub", "sub.c"]]
    floors = declared_floors((pkg / "__init__.py").read_text().strip('"\n'))
    assert floors == [("low", ["a", "sub.c"]), ("high", ["b", "sub", "pkg"])]
    assert arrows_up(graph, floors) == ["a (low) -> b (high)", "sub.c (low) -> sub (high)"]
