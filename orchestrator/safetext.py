"""Text a container chose, made safe to show: on a terminal (``printable``) and in Markdown (``markdown``).

A container's output, its error events and anything else it wrote are input, not text for a terminal to
interpret. ``printable`` shows every control character visibly as ``\\xNN``: C0 controls but tab and newline,
DEL and C1 controls. Every escape sequence (CSI, OSC such as a window title or the clipboard, DCS, ...) starts
with one of them, ESC or its 8-bit form, so none can reach a terminal whole. Lone surrogates, which a UTF-8
write would refuse, are shown as ``\\udNNN``. ``one_line`` also escapes line breaks, for a message of one line.
Rich markup is a separate matter: orch prints such text as
``rich.text.Text`` or with ``markup=False``, never as markup.
"""
from __future__ import annotations

import re
from typing import Optional

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
# What Markdown (CommonMark, GitHub's) reads inline: escapes, code, emphasis, links and images, HTML,
# entities, table cells, strikethrough and math. Backslash-escaped, each is shown as itself.
_MARKDOWN = re.compile(r"([\\`*_\[\]<>&|~$])")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character but tab and newline, and every lone surrogate, shown visibly."""
    return _UNSAFE.sub(_shown, text)


def markdown(text: str) -> str:
    """``text`` as inert inline Markdown on one line: ``printable``, line breaks and tabs as spaces, and every
    character Markdown would read backslash-escaped."""
    return _MARKDOWN.sub(r"\\\1", printable(text).replace("\n", " ").replace("\t", " "))


# Every line break str.splitlines() knows, escaped as Python writes it.
_BREAKS = {c: repr(chr(c))[1:-1] for c in (10, 11, 12, 13, 28, 29, 30, 133, 0x2028, 0x2029)}


def one_line(text: str, limit: Optional[int] = None) -> str:
    """``text`` as a message of one line: line breaks escaped (``\\n``, ``\\r``, ``\\u2028``, ...), the rest
    ``printable``, and at most ``limit`` characters (cut with an ellipsis)."""
    text = printable(text.translate(_BREAKS))
    return text if limit is None or len(text) <= limit else text[:limit - 1] + "…"
