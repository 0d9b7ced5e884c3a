"""Results as a notebook shows them: HTML tables (``_repr_html_``) and pandas DataFrames (``to_pandas``).

Every cell is text a container may have chosen (a worker's return value, an error, a run id), so every cell and
heading is ``html.escape``d; pandas is optional, and its absence is one line.
"""
from __future__ import annotations

import html
import json
from typing import Any, Iterable, Mapping, Optional, Sequence

from orchestrator.contract import finite

CELL_LIMIT = 200  # characters of one cell shown; the value itself is in the result


def _text(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (dict, list)):
        text = json.dumps(finite(value), default=str, allow_nan=False)
    else:
        text = "" if value is None else str(value)
    return text if len(text) <= CELL_LIMIT else text[:CELL_LIMIT - 1] + "…"


def table(rows: Sequence[Mapping[str, Any]], columns: Optional[Sequence[str]] = None) -> str:
    """``rows`` as an HTML table, one column per key (``columns``, or every key in first-seen order)."""
    names = list(columns) if columns is not None else list(dict.fromkeys(k for row in rows for k in row))
    head = "".join(f"<th>{html.escape(str(n))}</th>" for n in names)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_text(row.get(n)))}</td>" for n in names) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def block(title: str, facts: Iterable[tuple[str, Any]], rows: Sequence[Mapping[str, Any]] = (),
          columns: Optional[Sequence[str]] = None) -> str:
    """A heading, a line of ``name: value`` facts, and a table of ``rows``: one result as a notebook shows it."""
    shown = " · ".join(f"{html.escape(name)}: <code>{html.escape(_text(value))}</code>" for name, value in facts
                       if value is not None)
    out = f"<div><strong>{html.escape(title)}</strong><br>{shown}"
    return out + (table(rows, columns) if rows else "") + "</div>"


def dataframe(rows: Sequence[Mapping[str, Any]]) -> Any:
    """``rows`` as a pandas DataFrame; ModuleNotFoundError in one line when pandas is not installed."""
    try:
        import pandas
    except ImportError:
        raise ModuleNotFoundError("to_pandas() needs pandas, which orch does not install: pip install pandas",
                                  name="pandas") from None
    return pandas.DataFrame([dict(row) for row in rows])
