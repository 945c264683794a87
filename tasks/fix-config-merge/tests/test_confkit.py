import copy

import pytest
from confkit import load_config
from confkit.defaults import DEFAULTS
from confkit.env import env_overrides
from confkit.merge import deep_merge
from confkit.parse import parse_text, parse_value

STAGING = "/app/conf/staging.conf"
PROD = "/app/conf/prod.conf"
PRISTINE = {
    "server": {"host": "127.0.0.1", "port": 8080, "tls": {"enabled": False, "cert": None}},
    "logging": {"level": "info", "handlers": ["console"]},
    "features": {},
}


def test_defaults_alone():
    assert load_config(environ={}) == PRISTINE


def test_file_overrides_and_keeps_the_rest():
    config = load_config(STAGING, environ={})
    assert config["server"] == {
        "host": "staging.internal",
        "port": 8080,
        "tls": {"enabled": True, "cert": "/etc/certs/staging.pem"},
    }
    assert config["logging"] == {"level": "debug", "handlers": ["console"]}
    assert config["features"] == {"beta_search": True}


def test_lists_are_replaced_not_merged():
    config = load_config(PROD, environ={})
    assert config["logging"]["handlers"] == ["console", "syslog"]
    assert config["server"]["port"] == 443


def test_env_override_deep_in_a_table_keeps_its_siblings():
    config = load_config(STAGING, environ={"CONFKIT__SERVER__TLS__CERT": "/etc/certs/new.pem"})
    assert config["server"]["tls"] == {"enabled": True, "cert": "/etc/certs/new.pem"}
    assert config["server"]["host"] == "staging.internal"


def test_three_levels_merge_key_by_key():
    base = {"a": {"b": {"c": 1, "d": 2}, "e": 5}, "f": [1]}
    override = {"a": {"b": {"c": 3, "x": {"y": 1}}}, "f": [2]}
    assert deep_merge(base, override) == {
        "a": {"b": {"c": 3, "d": 2, "x": {"y": 1}}, "e": 5},
        "f": [2],
    }


def test_a_table_replaces_a_scalar_and_back():
    assert deep_merge({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}
    assert deep_merge({"a": {"b": 2}}, {"a": 1}) == {"a": 1}


def test_merge_never_modifies_its_inputs():
    base = {"a": {"b": {"c": 1}, "l": [1, 2]}, "k": {"z": 0}}
    override = {"a": {"b": {"d": 2}}, "n": {"m": [3]}}
    base_before, override_before = copy.deepcopy(base), copy.deepcopy(override)
    result = deep_merge(base, override)
    result["a"]["b"]["c"] = 99
    result["a"]["l"].append(3)
    result["k"]["z"] = 1
    result["n"]["m"].append(4)
    assert base == base_before
    assert override == override_before


def test_changing_a_result_never_leaks_into_later_loads():
    first = load_config(environ={})
    first["logging"]["handlers"].append("file")
    first["server"]["tls"]["enabled"] = True
    first["features"]["x"] = 1
    assert load_config(environ={}) == PRISTINE
    assert load_config(PROD, environ={})["logging"]["handlers"] == ["console", "syslog"]
    assert DEFAULTS == PRISTINE


def test_results_from_different_files_are_independent():
    staging = load_config(STAGING, environ={})
    prod = load_config(PROD, environ={})
    assert "beta_search" not in prod["features"]
    prod["server"]["tls"]["cert"] = "/tmp/other.pem"
    assert staging["server"]["tls"]["cert"] == "/etc/certs/staging.pem"
    assert load_config(environ={})["server"]["tls"]["cert"] is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42),
        ("2.5", 2.5),
        ("yes", True),
        ("Off", False),
        ("none", None),
        ("a, b ,c", ["a", "b", "c"]),
        ('"a, b"', "a, b"),
        ("plain text", "plain text"),
    ],
)
def test_values_are_typed(text, value):
    assert parse_value(text) == value


def test_file_format_and_errors():
    assert parse_text("# c\n a.b = 1 # trailing\n\nc = x\n") == {"a": {"b": 1}, "c": "x"}
    with pytest.raises(ValueError, match="line 2"):
        parse_text("a = 1\nnot a pair\n")


def test_environment_variables():
    assert env_overrides(
        {"CONFKIT__FEATURES__DARK_MODE": "off", "CONFKIT__SERVER__PORT": "9000", "HOME": "/root"}
    ) == {"features": {"dark_mode": False}, "server": {"port": 9000}}
