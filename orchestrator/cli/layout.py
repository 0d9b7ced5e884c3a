"""How a verb's help is laid out: options under headings, and a group's verbs with whole summaries."""
from __future__ import annotations

from typing import Any, Optional

import click


class GroupedOption(click.Option):
    """An option with the heading (``group``) it is listed under in the help."""

    def __init__(self, *args: Any, group: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group = group


class Verbs(click.Group):
    """A group whose help lists its verbs with their whole first sentences, not cut at click's 45 characters."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(n, c.get_short_help_str(limit=200)) for n, c in sorted(self.commands.items()) if not c.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class GroupedCommand(click.Command):
    """A command whose help lists its options under headings, in the order they first appear."""

    #: The heading of the options that name no group, and whether it comes first (a verb's own flags: `up`'s
    #: --detach, --dry-run, --format, before the job's).
    other_heading = "Other options"
    other_first = False

    def option_groups(self, ctx: click.Context) -> dict[str, list[tuple[str, str]]]:
        """Each heading's (flags, help) rows; options without one under ``other_heading``."""
        sections: dict[str, list[tuple[str, str]]] = {self.other_heading: []} if self.other_first else {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
            if record is not None:
                sections.setdefault(getattr(param, "group", None) or self.other_heading, []).append(record)
        return {heading: rows for heading, rows in sections.items() if rows}

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for heading, rows in self.option_groups(ctx).items():
            with formatter.section(heading):
                formatter.write_dl(rows)
