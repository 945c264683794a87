from textkit import split_words, to_kebab, to_snake


def test_split_words():
    assert split_words("fooBar baz") == ["foo", "Bar", "baz"]


def test_snake_and_kebab():
    assert to_snake("Hello World") == "hello_world"
    assert to_kebab("Hello World") == "hello-world"
