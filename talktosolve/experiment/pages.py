"""A report's blocks as pages: Markdown, and one self-contained HTML page (inline CSS).

A block is a tuple: `("h1" | "h2" | "headline" | "p" | "note", text)`, `("table", headers, rows)` or
`("img", file, alt)`; `report._sections` says what a report's blocks are, this module only how they look, figures included (`f3`,
`s3`, `interval`, `mark`: 3 decimals, None as `–`). Standard library only.
"""

from __future__ import annotations

import html

NONE = "–"
"""How an undefined figure (None) is printed."""


def f3(x: float | None) -> str:
    return NONE if x is None else f"{x:.3f}"


def s3(x: float | None) -> str:
    return NONE if x is None else f"{x:+.3f}"


def interval(lo: float | None, hi: float | None, signed: bool = False) -> str:
    if lo is None or hi is None:
        return NONE
    fmt = s3 if signed else f3
    return f"[{fmt(lo)}, {fmt(hi)}]"


def mark(value: bool | None) -> str:
    return NONE if value is None else ("✓" if value else "✗")


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(blocks: list[tuple]) -> str:
    """The blocks as Markdown."""
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h1":
            lines += [f"# {block[1]}", ""]
        elif kind == "h2":
            lines += [f"## {block[1]}", ""]
        elif kind == "headline":
            lines += [f"**{block[1]}**", ""]
        elif kind == "p":
            lines += [block[1], ""]
        elif kind == "note":
            lines += [f"> {block[1]}", ""]
        elif kind == "table":
            headers, rows = block[1], block[2]
            lines.append("| " + " | ".join(_md_cell(h) for h in headers) + " |")
            lines.append("|" + "|".join("---" for _ in headers) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            lines.append("")
        elif kind == "img":
            lines += [f"![{block[2]}]({block[1]})", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #1f2328; line-height: 1.45; }
h1 { font-size: 1.6em; border-bottom: 1px solid #d0d7de; padding-bottom: .3em; }
h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #eaeef2; padding-bottom: .2em; }
.headline { font-size: 1.35em; font-weight: 600; padding: .6em .9em; background: #f6f8fa; border-left: 4px solid #0969da; }
.note { padding: .5em .9em; background: #fff8c5; border-left: 4px solid #d4a72c; }
table { border-collapse: collapse; margin: .6em 0 1em; font-size: .92em; }
th, td { border: 1px solid #d0d7de; padding: .3em .65em; text-align: left; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; font-family: ui-monospace, Menlo, Consolas, monospace; }
td.ok { color: #1a7f37; font-weight: 700; text-align: center; }
td.bad { color: #cf222e; font-weight: 700; text-align: center; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; border: 1px solid #eaeef2; }
figcaption { color: #59636e; font-size: .9em; }
""".strip()


def _td(cell: str) -> str:
    text = str(cell)
    cls = ""
    if text == "✓":
        cls = ' class="ok"'
    elif text == "✗":
        cls = ' class="bad"'
    elif text and (text[0].isdigit() or text[0] in "+-−[–"):
        cls = ' class="num"'
    return f"<td{cls}>{html.escape(text)}</td>"


def html_page(blocks: list[tuple]) -> str:
    """The blocks as one self-contained HTML page (inline CSS), titled by the first block."""
    title = html.escape(blocks[0][1])
    body: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h1":
            body.append(f"<h1>{html.escape(block[1])}</h1>")
        elif kind == "h2":
            body.append(f"<h2>{html.escape(block[1])}</h2>")
        elif kind == "headline":
            body.append(f'<p class="headline">{html.escape(block[1])}</p>')
        elif kind == "p":
            body.append(f"<p>{html.escape(block[1])}</p>")
        elif kind == "note":
            body.append(f'<p class="note">{html.escape(block[1])}</p>')
        elif kind == "table":
            headers, rows = block[1], block[2]
            body.append("<table>")
            if any(headers):
                body.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr>")
            body += ["<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in rows]
            body.append("</table>")
        elif kind == "img":
            src, alt = html.escape(block[1], quote=True), html.escape(block[2], quote=True)
            body.append(f'<figure><img src="{src}" alt="{alt}"><figcaption>{alt}</figcaption></figure>')
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{title}</title>\n"
            f"<style>\n{_CSS}\n</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")
