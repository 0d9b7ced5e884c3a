"""The CLI reference as Markdown, generated from the click commands themselves, so the manual cannot drift
from `--help`: each verb's usage, description, and its options under the same headings as its help."""
from __future__ import annotations

import re
from typing import Iterator

import click


def _cell(text: str) -> str:
    """Help text as one Markdown table cell: pipes escaped, click's ``\\b`` markers and line breaks dropped."""
    return re.sub(r"\s+", " ", text.replace("\b", "")).strip().replace("|", "\\|")


def _rows(command: click.Command, ctx: click.Context) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    groups = getattr(command, "option_groups", None)
    if groups is not None:
        yield from groups(ctx).items()
        return
    rows = [r for p in command.get_params(ctx) if (r := p.get_help_record(ctx)) is not None]
    if rows:
        yield "Options", rows


def _command(command: click.Command, path: list[str], parent: click.Context) -> Iterator[str]:
    ctx = click.Context(command, info_name=path[-1], parent=parent)
    yield f"## {' '.join(path)}"
    yield ""
    yield "```text"
    yield " ".join(command.collect_usage_pieces(ctx)).join([f"{' '.join(path)} ", ""]).rstrip()
    yield "```"
    yield ""
    for paragraph in (command.help or "").strip().split("\n\n"):
        paragraph = paragraph.strip()
        verbatim = paragraph.startswith("\b")
        text = paragraph.lstrip("\b").strip("\n")
        yield ("```text\n" + "\n".join(line.rstrip() for line in text.splitlines()) + "\n```") if verbatim else \
            " ".join(line.strip() for line in text.splitlines())
        yield ""
    for heading, rows in _rows(command, ctx):
        yield f"**{heading}**"
        yield ""
        yield "| option | what it does |"
        yield "| --- | --- |"
        for flags, text in rows:
            yield f"| `{flags.replace('|', chr(92) + '|')}` | {_cell(text)} |"
        yield ""
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _command(sub, [*path, name], ctx)


def markdown() -> str:
    """Every verb of `orch`, in the order `orch --help` lists them, as a Markdown reference."""
    from orchestrator.cli import cli

    root = click.Context(cli, info_name="orch")
    lines = list(_command(cli, ["orch"], root.parent or root))
    return "\n".join(lines) + "\n"
