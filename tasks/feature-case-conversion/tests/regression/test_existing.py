"""Behaviour that works before the feature and must keep working."""

import pytest
from textkit import split_words, to_kebab, to_snake, wrap_text


def test_split_plain_phrases():
    assert split_words("fooBar baz") == ["foo", "Bar", "baz"]
    assert split_words("one, two;three") == ["one", "two", "three"]
    assert split_words("snake_case_name") == ["snake", "case", "name"]


def test_split_digits_stay_with_their_word():
    assert split_words("area51 zone") == ["area51", "zone"]
    assert split_words("page2Title") == ["page2", "Title"]


def test_snake():
    assert to_snake("Hello World") == "hello_world"
    assert to_snake("someValue here") == "some_value_here"
    assert to_snake("kebab-case-name") == "kebab_case_name"


def test_kebab():
    assert to_kebab("Hello World") == "hello-world"
    assert to_kebab("snake_case_name") == "snake-case-name"


def test_empty_input():
    assert split_words("") == []
    assert to_snake("") == ""
    assert to_kebab("  ") == ""


@pytest.mark.parametrize(
    ("text", "width", "lines"),
    [
        ("a bb ccc dddd", 6, ["a bb", "ccc", "dddd"]),
        ("supercalifragilistic is long", 5, ["supercalifragilistic", "is", "long"]),
        ("", 10, []),
        ("  spaced   out  ", 20, ["spaced out"]),
    ],
)
def test_wrap(text, width, lines):
    assert wrap_text(text, width) == lines


def test_wrap_rejects_zero_width():
    with pytest.raises(ValueError):  # noqa: PT011 (the message is not specified)
        wrap_text("x", 0)
