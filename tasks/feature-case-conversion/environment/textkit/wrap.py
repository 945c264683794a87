"""Greedy word wrapping."""


def wrap_text(text: str, width: int) -> list[str]:
    """Lines of at most ``width`` characters, breaking at spaces; a word longer than ``width``
    gets a line of its own."""
    if width < 1:
        raise ValueError("width must be at least 1")
    lines: list[str] = []
    current = ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines
