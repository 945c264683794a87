"""Converting identifiers and phrases between naming styles."""

import re

_SEPARATORS = re.compile(r"[^0-9A-Za-z]+")
_WORD = re.compile(
    r"[A-Z]+[0-9]*(?=[A-Z][a-z])"  # an acronym before a capitalised word: HTTP|Server
    r"|[A-Z]?[a-z]+[0-9]*"  # a word, maybe capitalised, with its digits: version2
    r"|[A-Z]+[0-9]*"  # an acronym at the end: get|ID, HTML5
    r"|[0-9]+[a-z]*"  # leading digits: 2fast
)


def split_words(text: str) -> list[str]:
    """The words of ``text``: split at anything that is not an ASCII letter or digit, where a
    lowercase letter or digit meets an uppercase letter (``fooBar`` -> foo, Bar), and before
    the capitalised word that ends an acronym (``HTTPServer`` -> HTTP, Server). Digits stay
    with the word before them."""
    words: list[str] = []
    for chunk in _SEPARATORS.split(text):
        words += _WORD.findall(chunk)
    return words


def to_snake(text: str) -> str:
    """``"Hello World"`` -> ``"hello_world"``."""
    return "_".join(word.lower() for word in split_words(text))


def to_kebab(text: str) -> str:
    """``"Hello World"`` -> ``"hello-world"``."""
    return "-".join(word.lower() for word in split_words(text))


def _capitalised(word: str) -> str:
    return word[:1].upper() + word[1:].lower()


def to_camel(text: str) -> str:
    """``"HTTP server error"`` -> ``"httpServerError"``."""
    words = split_words(text)
    if not words:
        return ""
    return words[0].lower() + "".join(_capitalised(word) for word in words[1:])


def to_pascal(text: str) -> str:
    """``"parse html5 doc"`` -> ``"ParseHtml5Doc"``."""
    return "".join(_capitalised(word) for word in split_words(text))
