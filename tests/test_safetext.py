"""safetext's own functions, exactly: what ``one_line`` and ``markdown`` make of line breaks, tabs and a limit. No engine.

tests/test_terminal.py checks that hostile text reaches no terminal whole; these pin the exact text a message shows,
which mutation testing (benchmarks/mutation.py) found nothing else did."""
from __future__ import annotations

from orchestrator.safetext import markdown, one_line, printable


def test_one_line_escapes_every_line_break_as_python_writes_it():
    text = "a\nb\rc\u2028d\u2029e\x0bf\x85g"
    assert one_line(text) == "a\\nb\\rc\\u2028d\\u2029e\\x0bf\\x85g"
    assert "\n" not in one_line(text) and len(one_line(text).splitlines()) == 1


def test_one_line_keeps_a_text_at_its_limit_and_cuts_a_longer_one_with_an_ellipsis():
    assert one_line("abcd", 4) == "abcd"
    assert one_line("abcde", 4) == "abc…"
    assert len(one_line("x" * 500, 400)) == 400
    assert one_line("abcde") == "abcde"  # no limit: whole


def test_markdown_turns_line_breaks_and_tabs_into_single_spaces():
    assert markdown("a\nb\tc") == "a b c"


def test_printable_shows_a_c1_control_as_two_hex_digits_and_a_lone_surrogate_as_four():
    assert printable("\x9b\ud800") == "\\x9b\\ud800"
