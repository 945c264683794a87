"""The feature: camel and Pascal case, acronym-aware splitting."""

import pytest
import textkit
from textkit.case import split_words


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("HTTPServerError", ["HTTP", "Server", "Error"]),
        ("parseHTML5Doc", ["parse", "HTML5", "Doc"]),
        ("getID", ["get", "ID"]),
        ("version2Beta", ["version2", "Beta"]),
        ("XMLHttpRequest", ["XML", "Http", "Request"]),
        ("ABC", ["ABC"]),
        ("IOError in ABCWidget", ["IO", "Error", "in", "ABC", "Widget"]),
    ],
)
def test_split_words_acronyms(text, words):
    assert split_words(text) == words


@pytest.mark.parametrize(
    ("text", "camel"),
    [
        ("HTTP server error", "httpServerError"),
        ("user_id", "userId"),
        ("Hello World", "helloWorld"),
        ("parseHTML5Doc", "parseHtml5Doc"),
        ("  --already camelCase--  ", "alreadyCamelCase"),
        ("x", "x"),
    ],
)
def test_to_camel(text, camel):
    assert textkit.to_camel(text) == camel


@pytest.mark.parametrize(
    ("text", "pascal"),
    [
        ("parse html5 doc", "ParseHtml5Doc"),
        ("user_id", "UserId"),
        ("getID", "GetId"),
        ("kebab-case-name", "KebabCaseName"),
    ],
)
def test_to_pascal(text, pascal):
    assert textkit.to_pascal(text) == pascal


def test_acronyms_in_snake_and_kebab():
    assert textkit.to_snake("HTTPServerError") == "http_server_error"
    assert textkit.to_kebab("getUserID") == "get-user-id"


@pytest.mark.parametrize("text", ["", "   ", "--__--", "!?"])
def test_nothing_to_convert(text):
    assert split_words(text) == []
    assert textkit.to_camel(text) == ""
    assert textkit.to_pascal(text) == ""
