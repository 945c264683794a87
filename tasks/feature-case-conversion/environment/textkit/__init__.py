"""textkit: small text helpers (identifier cases, wrapping)."""

from textkit.case import split_words, to_kebab, to_snake
from textkit.wrap import wrap_text

__all__ = ["split_words", "to_kebab", "to_snake", "wrap_text"]
