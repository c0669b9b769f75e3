"""One self-contained HTML page per sweep: figures embedded as base64 PNG, inline CSS, no
scripts and nothing loaded from elsewhere (it opens from disk, from the MLflow UI's artifact
view, or from any static file server); its only URLs are links to the runs in the MLflow UI.

Table cells are text, or a list of `(text, href)` links."""
from __future__ import annotations

import base64
import html
from pathlib import Path

CSS = """
body { font-family: sans-serif; margin: 24px auto; padding: 0 20px; max-width: 1340px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
dl.summary { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; }
dl.summary dt { font-weight: bold; } dl.summary dd { margin: 0; font-family: monospace; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td.name { text-align: left; font-weight: bold; }
.figures { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figure.curve { flex: 0 1 calc(50% - 6px); } figure.curve img { width: 100%; }
figcaption { font-size: 0.85em; color: #555; }
figure.grid { flex: 0 1 100%; }
ul.warnings { background: #fff4e5; border: 1px solid #f0b45b; padding: 8px 8px 8px 28px; }
td a, dd a { margin-right: 10px; } td.text { text-align: left; }
"""

Cell = str | list[tuple[str, str]]


def _embedded(png: Path, alt: str, caption: str, css_class: str) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return (f'<figure class="{css_class}"><img alt="{html.escape(alt)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}</figcaption></figure>')


def _cell(value: Cell) -> str:
    if isinstance(value, str):
        return html.escape(value)
    return "".join(f'<a href="{html.escape(href)}">{html.escape(text)}</a>' for text, href in value)


def _table(table_id: str, columns: list[str], rows: list[list[Cell]]) -> str:
    """A table whose first column (the algorithm) is a row header."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(f'<tr><td class="name">{_cell(row[0])}</td>'
                   + "".join(f"<td>{_cell(v)}</td>" for v in row[1:]) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def render_page(title: str, summary: dict[str, Cell], table: tuple[list[str], list[list[Cell]]],
                sections: list[tuple[str, str, list[tuple[Path, str, str]]]], notes: list[str],
                warnings: list[str] = (), trials: tuple[list[str], list[list[Cell]]] | None = None,
                verdict: list[str] = ()) -> str:
    """`sections`: (heading, css class, [(png, alt, caption)]) in page order; `verdict` (the
    sweep's closing lines) after the summary, `warnings` above the best table, `trials`
    (every trial with its MLflow link) at the end."""
    parts = [f"<h1>{html.escape(title)}</h1>", '<dl class="summary">']
    parts += [f"<dt>{html.escape(k)}</dt><dd>{_cell(v)}</dd>" for k, v in summary.items()]
    parts.append("</dl>")
    if verdict:
        parts.append('<h2>Verdict</h2><pre id="verdict">'
                     + html.escape("\n".join(verdict)) + "</pre>")
    if warnings:
        parts.append('<h2>Warnings</h2><ul class="warnings" id="warnings">'
                     + "".join(f"<li>{html.escape(w)}</li>" for w in warnings) + "</ul>")
    parts.append("<h2>Best configurations</h2>")
    columns, rows = table
    parts.append(_table("best-configs", columns, rows) if rows
                 else "<p>No algorithm has a finished configuration.</p>")
    for heading, css_class, figures in sections:
        if figures:
            parts.append(f"<h2>{html.escape(heading)}</h2><div class=\"figures\">")
            parts += [_embedded(png, alt, caption, css_class) for png, alt, caption in figures]
            parts.append("</div>")
    if trials is not None and trials[1]:
        parts.append("<h2>All trials</h2>" + _table("trials", *trials))
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")
