"""``--policy`` values and ``PolicySpec`` endpoint lists, resolved into an endpoint pool."""

from __future__ import annotations

import pytest

from envfarm.controller.policies import PolicySpec, open_policy, policy_fields
from envfarm.policy import (
    EndpointPool,
    OpenAIPolicy,
    PolicyServer,
    SamplingParams,
    builtin_responder,
)


def test_one_policy_value_is_a_target() -> None:
    assert policy_fields(["oracle"]) == {"base_url": "oracle"}
    assert policy_fields(["http://a:8000/v1"]) == {"base_url": "http://a:8000/v1"}


def test_repeated_policy_values_are_weighted_endpoints() -> None:
    fields = policy_fields(["http://a:8000/v1", "http://b:8000/v1=2", "http://c/v1=0.5"])
    assert fields == {
        "endpoints": [
            {"url": "http://a:8000/v1"},
            {"url": "http://b:8000/v1", "weight": 2.0},
            {"url": "http://c/v1", "weight": 0.5},
        ]
    }
    spec = PolicySpec.model_validate({**fields, "model": "m"})
    assert [(e.url, e.weight) for e in spec.pool_endpoints] == [
        ("http://a:8000/v1", 1.0),
        ("http://b:8000/v1", 2.0),
        ("http://c/v1", 0.5),
    ]
    assert spec.label == "http://a:8000/v1, http://b:8000/v1, http://c/v1"
    assert not spec.builtin


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["oracle", "http://a/v1"], "--policy oracle cannot be combined"),
        (["http://a/v1=two"], "URL=WEIGHT with a positive weight"),
        (["http://a/v1=0"], "URL=WEIGHT with a positive weight"),
        (["http://a/v1=-1"], "URL=WEIGHT with a positive weight"),
        (["http://a/v1=inf"], "URL=WEIGHT with a positive weight"),
        (["=2"], "URL=WEIGHT with a positive weight"),
    ],
)
def test_bad_policy_values_are_named(values: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy_fields(values)


def test_a_spec_needs_a_target_or_endpoints_but_not_both() -> None:
    with pytest.raises(ValueError, match="either `base_url`"):
        PolicySpec.model_validate({})
    with pytest.raises(ValueError, match="not both"):
        PolicySpec.model_validate(
            {"base_url": "http://a/v1", "endpoints": [{"url": "http://b/v1"}]}
        )
    with pytest.raises(ValueError, match="cannot be part of an endpoint pool"):
        PolicySpec.model_validate({"endpoints": [{"url": "nop"}]})
    with pytest.raises(ValueError, match="extra"):
        PolicySpec.model_validate({"endpoints": [{"url": "http://a/v1", "wieght": 2}]})


def test_api_keys_stay_secret_in_the_spec() -> None:
    spec = PolicySpec.model_validate(
        {
            "endpoints": [{"url": "http://a/v1", "api_key": "sk-own-5e1d"}, {"url": "http://b/v1"}],
            "api_key": "sk-shared-77aa",
        }
    )
    shown = repr(spec) + spec.model_dump_json() + str(spec.model_dump())
    assert "sk-own-5e1d" not in shown
    assert "sk-shared-77aa" not in shown


async def test_endpoint_urls_resolve_to_a_pool_and_builtins_to_a_plain_client() -> None:
    nop = builtin_responder("nop")
    async with PolicyServer(nop) as a, PolicyServer(nop) as b:
        spec = PolicySpec.model_validate(
            {
                "endpoints": [{"url": a.base_url}, {"url": b.base_url, "weight": 2}],
                "model": "nop",
                "pool": {"cooldown_s": 1, "pause_budget_s": 60},
            }
        )
        async with open_policy(spec) as policy:
            assert isinstance(policy.client, EndpointPool)
            assert policy.client.settings.pause_budget_s == 60
            assert policy.name == f"{a.base_url}, {b.base_url}"
            assert policy.model == "nop"
            result = await policy.client.session("episode").complete(
                [{"role": "user", "content": "hi"}], [], SamplingParams()
            )
            assert result.endpoint in (a.base_url, b.base_url)
            assert result.tool_calls[0].name == "submit"
        async with open_policy(PolicySpec(base_url=a.base_url, model="nop")) as policy:
            assert isinstance(policy.client, EndpointPool)
            assert policy.client.urls == [a.base_url]
    async with open_policy(PolicySpec(base_url="nop")) as policy:
        assert isinstance(policy.client, OpenAIPolicy)
