import pytest

from envfarm.errors import GradingError
from envfarm.grading.verifier.reward import parse_reward_json, parse_reward_txt
from envfarm.grading.verifier.script import expand_env


def test_reward_key_wins_and_every_key_is_a_component() -> None:
    reward = parse_reward_json('{"reward": 0.25, "tests_passed": 1, "tests_total": 4}')
    assert reward.value == 0.25
    assert reward.valid
    assert reward.components == {"reward": 0.25, "tests_passed": 1.0, "tests_total": 4.0}


def test_single_key_is_the_reward() -> None:
    assert parse_reward_json('{"accuracy": 0.5}').value == 0.5


def test_several_keys_without_reward_average() -> None:
    assert parse_reward_json('{"a": 1, "b": 0, "c": 0.5}').value == pytest.approx(0.5)


def test_bare_number_json() -> None:
    assert parse_reward_json("1").value == 1.0


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{", "not valid JSON"),
        ("{}", "empty"),
        ('{"reward": "1"}', "must be a number"),
        ('{"reward": true}', "must be a number"),
        ('{"reward": NaN}', "finite"),
        ("[1, 2]", "must be a number"),
    ],
)
def test_bad_reward_json_is_an_error_not_zero(text: str, needle: str) -> None:
    with pytest.raises(GradingError, match=needle):
        parse_reward_json(text)


def test_reward_txt() -> None:
    reward = parse_reward_txt(" 0.75\n")
    assert (reward.value, reward.valid, reward.reason) == (0.75, True, "reward.txt")


@pytest.mark.parametrize("text", ["", "\n", "pass", "inf", "1 2"])
def test_bad_reward_txt(text: str) -> None:
    with pytest.raises(GradingError):
        parse_reward_txt(text)


def test_verifier_env_expansion() -> None:
    env = expand_env(
        {"A": "${HOME_X}", "B": "${MISSING:-fallback}", "C": "x-${HOME_X}-y", "D": "${MISSING}"},
        {"HOME_X": "h"},
    )
    assert env == {"A": "h", "B": "fallback", "C": "x-h-y", "D": ""}
