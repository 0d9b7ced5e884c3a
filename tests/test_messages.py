"""The one-line messages of an invalid spec (orchestrator/jobspec/messages.py), exactly: how problems are joined, named
by flag or by field, and what each kind of pydantic error says. No engine.

tests/test_spec.py checks them through whole specs; these pin each rule, which mutation testing
(benchmarks/mutation.py) found those left open."""
from __future__ import annotations

import pytest

from orchestrator.jobspec.messages import Problem, describe_all, problem, say, shown


class Errors:
    """A ValidationError's errors() as pydantic gives them, for describe_all."""

    def __init__(self, *errors: dict) -> None:
        self.errors_ = list(errors)

    def errors(self, include_url: bool = True) -> list[dict]:
        assert include_url is False  # the message never carries pydantic's links
        return self.errors_


def one(error: dict, example=lambda field: None) -> Problem:
    [got] = describe_all(Errors(error), lambda: ["workers", "memory_mb"], example)
    return got


def test_problems_are_joined_in_one_line_each_named_by_its_field_or_its_flag():
    problems = [Problem("memory_mb", "must be at least 256", "512m"), Problem("spec", "a whole-spec problem"),
                Problem("workers", "must be at most 64")]
    assert say(problems, lambda field: None) == \
        "memory_mb: must be at least 256; e.g. memory_mb: 512m; a whole-spec problem; workers: must be at most 64"
    flags = {"memory_mb": "--memory"}.get
    assert say(problems, flags, flags=True) == \
        "--memory: must be at least 256; e.g. --memory 512m; a whole-spec problem; workers: must be at most 64"


def test_a_text_that_begins_with_its_flag_is_not_prefixed_again():
    assert say([Problem("strategy", "--strategy is an option of x")], lambda f: "--strategy") == \
        "--strategy is an option of x"
    assert say([Problem("strategy", "--strategyx is odd")], lambda f: "--strategy") == "--strategy: --strategyx is odd"


def test_a_name_from_user_input_is_shown_plain_only_when_harmless():
    assert shown("batch_size-2.x") == "batch_size-2.x"
    assert shown("a" * 64) == "a" * 64
    assert shown("a" * 65) == repr("a" * 64)
    assert shown("a b") == "'a b'" and shown("") == "''" and shown(3) == "3"


def test_a_validators_message_names_its_field_or_the_spec():
    assert problem("memory: too big") == Problem("memory", "too big")
    assert problem("no field here") == Problem("spec", "no field here")
    assert problem("Memory: too big") == Problem("spec", "Memory: too big")
    assert problem("m" + "x" * 39 + ": long") == Problem("m" + "x" * 39, "long")
    assert problem("m" + "x" * 40 + ": longer") == Problem("spec", "m" + "x" * 40 + ": longer")


def test_each_kind_of_error_is_said_in_words():
    assert one({"loc": ("workers",), "type": "greater_than_equal", "msg": "x", "input": 0, "ctx": {"ge": 1.0}},
               lambda field: "3") == Problem("workers", "must be at least 1 (got 0)", "3")
    assert one({"loc": ("cpus",), "type": "greater_than", "msg": "x", "input": 0, "ctx": {"gt": 0.5}}) == \
        Problem("cpus", "must be more than 0.5 (got 0)")
    assert one({"loc": ("framework", "strategy"), "type": "literal_error", "msg": "x", "input": "y",
                "ctx": {"expected": "'a' or 'b'"}}) == Problem("strategy", "must be 'a' or 'b' (got 'y')")
    assert one({"loc": ("backend_options", "port"), "type": "literal_error", "msg": "x", "input": 1}) == \
        Problem("port", "must be one of the choices (got 1)")
    assert one({"loc": ("memory_mb",), "type": "finite_number", "msg": "x", "input": float("inf")},
               lambda field: "512m") == Problem("memory_mb", "must be a finite number (got inf)", "512m")
    assert one({"loc": ("run_id",), "type": "string_pattern_mismatch", "msg": "x", "input": "A",
                "ctx": {"pattern": r"^[a-z][a-z0-9]{0,15}$"}}) == \
        Problem("run_id", "must be lowercase letters and digits, starting with a letter, at most 16 characters (got 'A')")
    assert one({"loc": ("run_id",), "type": "string_pattern_mismatch", "msg": "x", "input": "A",
                "ctx": {"pattern": "^other$"}}) == Problem("run_id", "must be of the allowed characters (got 'A')")
    assert one({"loc": ("nope",), "type": "extra_forbidden", "msg": "x", "input": 1}) == \
        Problem("nope", "unknown field; help(orchestrator.up) and `orch up --help` list the fields")
    assert one({"loc": ("wrkers",), "type": "extra_forbidden", "msg": "x", "input": 1}) == \
        Problem("wrkers", "unknown field; did you mean workers?")
    assert one({"loc": ("epochs",), "type": "int_parsing", "msg": "Input Should Be an integer", "input": "x" * 100},
               lambda field: "5") == Problem("epochs", f"input should be an integer (got {repr('x' * 100)[:80]})", "5")


def test_a_value_error_is_said_once_naming_its_field():
    assert one({"loc": ("workers",), "type": "value_error", "msg": "Value error, too many"}) == \
        Problem("workers", "too many")
    assert one({"loc": (), "type": "value_error", "msg": "Value error, memory: too big"}) == \
        Problem("memory", "too big")
    assert one({"loc": ("memory",), "type": "value_error", "msg": "Value error, memory: too big"}) == \
        Problem("memory", "too big")
    assert one({"type": "value_error"}) == Problem("spec", "invalid")


@pytest.mark.parametrize("bound, shown_bound", [(256.0, "256"), (2.5, "2.5"), (64, "64")])
def test_a_bound_is_written_as_a_person_writes_it(bound, shown_bound):
    got = one({"loc": ("x",), "type": "less_than_equal", "msg": "x", "input": 1000, "ctx": {"le": bound}})
    assert got.text == f"must be at most {shown_bound} (got 1000)"
    got = one({"loc": ("x",), "type": "less_than", "msg": "x", "input": 1000, "ctx": {"lt": bound}})
    assert got.text == f"must be less than {shown_bound} (got 1000)"


def test_a_wrong_number_of_workers_hides_the_roles_error_it_causes():
    errors = Errors({"loc": ("workers",), "type": "greater_than_equal", "msg": "x", "input": 0, "ctx": {"ge": 1}},
                    {"loc": ("roles", 0), "type": "value_error", "msg": "Value error, roles: bad"})
    assert [p.field for p in describe_all(errors, lambda: [])] == ["workers"]
    errors = Errors({"loc": ("roles", 0), "type": "value_error", "msg": "Value error, roles: bad"})
    assert [p.field for p in describe_all(errors, lambda: [])] == ["roles.0"]


def test_a_problem_has_no_example_unless_one_is_given_and_cannot_change():
    import dataclasses

    got = describe_all(Errors({"loc": ("workers",), "type": "greater_than_equal", "msg": "x", "input": 0,
                               "ctx": {"ge": 1}}), lambda: [])
    assert got == [Problem("workers", "must be at least 1 (got 0)")] and got[0].example is None
    assert len({got[0], Problem("workers", "must be at least 1 (got 0)")}) == 1  # hashable, as InvalidSpec keeps them
    with pytest.raises(dataclasses.FrozenInstanceError):
        got[0].text = "other"  # type: ignore[misc]


@pytest.mark.parametrize("pattern, words", [
    (r"^[a-z0-9][a-z0-9_-]{0,62}$", "lowercase letters, digits, - and _, starting with a letter or digit, at most 63 "
                                    "characters, e.g. exp-1"),
    (r"^[a-z0-9][a-z0-9-]{0,23}$", "lowercase letters, digits and -, starting with a letter or digit, at most 24 "
                                   "characters, e.g. my-sweep"),
])
def test_each_pattern_is_said_in_words_with_an_example(pattern, words):
    got = one({"loc": ("name",), "type": "string_pattern_mismatch", "msg": "x", "input": "A", "ctx": {"pattern": pattern}})
    assert got.text == f"must be {words} (got 'A')"


def test_a_bound_error_without_its_bound_says_so_with_a_question_mark():
    assert one({"loc": ("x",), "type": "greater_than", "msg": "x", "input": 0}).text == "must be more than ? (got 0)"


def test_an_unknown_framework_is_named_with_every_choice():
    from orchestrator import frameworks
    from orchestrator.jobspec.messages import _unknown_framework

    assert _unknown_framework("jax 2") == \
        f"framework: 'jax 2' is not one orch runs; choose {' or '.join(frameworks.names())}"
    assert " or " in _unknown_framework("x")  # there are several to choose from
