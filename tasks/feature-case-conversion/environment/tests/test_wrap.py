from textkit import wrap_text


def test_wrap():
    assert wrap_text("a bb ccc dddd", 6) == ["a bb", "ccc", "dddd"]
