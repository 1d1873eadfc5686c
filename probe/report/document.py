"""A report as a list of blocks, rendered twice: Markdown (figures linked as relative PNG paths) and
a self-contained HTML page (figures embedded as base64). No markdown library needed."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path


class Document:
    def __init__(self, title: str):
        self.title = title
        self.blocks: list[tuple] = []

    def heading(self, text: str, level: int = 2):
        self.blocks.append(("heading", level, text))

    def para(self, text: str):
        self.blocks.append(("para", text))

    def bullets(self, items: list[str]):
        if items:
            self.blocks.append(("bullets", list(items)))

    def table(self, headers: list[str], rows: list[list[str]]):
        self.blocks.append(("table", list(headers), [list(map(str, r)) for r in rows]))

    def image(self, path: Path, caption: str):
        self.blocks.append(("image", Path(path), caption))

    def code(self, text: str):
        self.blocks.append(("code", text))

    # -- rendering ------------------------------------------------------------------------------
    def to_markdown(self, base: Path) -> str:
        out = [f"# {self.title}", ""]
        for block in self.blocks:
            kind = block[0]
            if kind == "heading":
                out += ["#" * block[1] + " " + block[2], ""]
            elif kind == "para":
                out += [block[1], ""]
            elif kind == "bullets":
                out += [f"- {item}" for item in block[1]] + [""]
            elif kind == "table":
                headers, rows = block[1], block[2]
                out.append("| " + " | ".join(_md_cell(h) for h in headers) + " |")
                out.append("|" + "|".join("---" for _ in headers) + "|")
                out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
                out.append("")
            elif kind == "image":
                rel = block[1].relative_to(base) if block[1].is_relative_to(base) else block[1]
                out += [f"![{block[2]}]({rel.as_posix()})", "", f"*{block[2]}*", ""]
            elif kind == "code":
                out += ["```", block[1], "```", ""]
        return "\n".join(out).rstrip() + "\n"

    def to_html(self) -> str:
        body = [f"<h1>{html.escape(self.title)}</h1>"]
        for block in self.blocks:
            kind = block[0]
            if kind == "heading":
                lvl = min(block[1], 6)
                body.append(f"<h{lvl}>{_inline(block[2])}</h{lvl}>")
            elif kind == "para":
                body.append(f"<p>{_inline(block[1])}</p>")
            elif kind == "bullets":
                body.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in block[1]) + "</ul>")
            elif kind == "table":
                head = "".join(f"<th>{_inline(h)}</th>" for h in block[1])
                rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in block[2])
                body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            elif kind == "image":
                data = base64.b64encode(block[1].read_bytes()).decode("ascii")
                body.append(f'<figure><img alt="{html.escape(block[2])}" src="data:image/png;base64,{data}">'
                            f"<figcaption>{_inline(block[2])}</figcaption></figure>")
            elif kind == "code":
                body.append(f"<pre>{html.escape(block[1])}</pre>")
        return (
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(self.title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n"
        )


_CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;line-height:1.45}"
    "table{border-collapse:collapse;margin:0.8em 0;font-size:0.9em}"
    "th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left}th{background:#f3f3f3}"
    "img{max-width:100%}figure{margin:1em 0}figcaption{font-style:italic;color:#555}"
    "pre{background:#f6f6f6;padding:0.6em;overflow-x:auto}code{background:#f3f3f3}"
)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _inline(text: str) -> str:
    """Escape HTML, then the few inline Markdown forms the report uses: **bold**, *italic*, `code`."""
    s = html.escape(str(text))
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", s)
    s = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"<em>\1</em>", s)
    return s
