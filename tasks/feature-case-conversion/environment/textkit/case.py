"""Converting identifiers and phrases between naming styles."""

import re

_SEPARATORS = re.compile(r"[^0-9A-Za-z]+")
_LOWER_UPPER = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def split_words(text: str) -> list[str]:
    """The words of ``text``: split at anything that is not a letter or digit, and where a
    lowercase letter or digit is followed by an uppercase letter (``fooBar`` -> foo, Bar)."""
    words: list[str] = []
    for chunk in _SEPARATORS.split(text):
        words += [word for word in _LOWER_UPPER.split(chunk) if word]
    return words


def to_snake(text: str) -> str:
    """``"Hello World"`` -> ``"hello_world"``."""
    return "_".join(word.lower() for word in split_words(text))


def to_kebab(text: str) -> str:
    """``"Hello World"`` -> ``"hello-world"``."""
    return "-".join(word.lower() for word in split_words(text))
