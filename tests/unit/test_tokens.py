"""Token capture parsers on recorded vLLM and SGLang response shapes, and on broken ones."""

from __future__ import annotations

import base64
import copy
import json
import struct
from array import array
from pathlib import Path
from typing import Any

import pytest

from envfarm.policy.profiles import (
    CaptureOptions,
    TokenCapture,
    detect_profile,
    request_fields,
)
from envfarm.policy.tokens import read_tokens

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "responses"


def fixture(name: str) -> dict[str, Any]:
    fixture: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return fixture


def int32(data: str) -> list[int]:
    return list(array("i", base64.b64decode(data)))


def npy_payload(text: str) -> tuple[bytes, str]:
    raw = base64.b64decode(text)
    size = struct.unpack("<H", raw[8:10])[0]
    return raw[10 + size :], raw[10 : 10 + size].decode("latin1")


def test_vllm_token_ids_logprobs_and_nested_routing_are_read_exactly() -> None:
    body = fixture("vllm_chat_token_ids_routed_lists")
    choice = body["choices"][0]
    data = read_tokens(body, "vllm")
    assert data.faults == []
    assert data.token_source == "vllm"
    assert data.prompt_token_ids == body["prompt_token_ids"]
    assert data.completion_token_ids == choice["token_ids"]
    assert data.logprobs == [item["logprob"] for item in choice["logprobs"]["content"]]
    routed = data.routed_experts
    assert routed is not None
    nested = choice["routed_experts"]
    assert routed.shape == [len(nested), len(nested[0]), len(nested[0][0])] == [42, 3, 2]
    assert routed.shape[0] == len(body["prompt_token_ids"]) + len(choice["token_ids"]) - 1
    assert routed.dtype == "int32"
    assert int32(routed.data) == [v for plane in nested for row in plane for v in row]
    assert data.policy_version is None


def test_vllm_npy_routing_keeps_the_array_bytes_and_dtype() -> None:
    body = fixture("vllm_chat_token_ids_routed_npy")
    data = read_tokens(body, "vllm")
    assert data.faults == []
    routed = data.routed_experts
    assert routed is not None
    payload, header = npy_payload(body["choices"][0]["routed_experts"])
    assert "'descr': '|u1'" in header
    assert routed.dtype == "uint8"
    assert routed.shape == [42, 3, 2]
    assert base64.b64decode(routed.data) == payload
    lists = fixture("vllm_chat_token_ids_routed_lists")["choices"][0]["routed_experts"]
    assert list(payload) == [v for plane in lists for row in plane for v in row]


def test_sglang_ids_come_from_meta_info_and_routing_is_kept_verbatim() -> None:
    body = fixture("sglang_chat_meta_info")
    choice = body["choices"][0]
    triples = choice["meta_info"]["output_token_logprobs"]
    data = read_tokens(body, "sglang")
    assert data.faults == []
    assert data.token_source == "sglang"
    assert data.prompt_token_ids == choice["prompt_token_ids"]
    assert data.completion_token_ids == [t[1] for t in triples]
    assert data.logprobs == [t[0] for t in triples]
    assert data.routed_experts is not None
    assert data.routed_experts.data == choice["meta_info"]["routed_experts"]
    assert data.routed_experts.shape == [42 * 3 * 2]
    assert (data.policy_version, data.policy_version_source) == ("7", "response")
    assert data.policy_version_spans is None


def test_sglang_token_ids_and_weight_version_spans() -> None:
    body = fixture("sglang_chat_token_ids_weight_versions")
    data = read_tokens(body, "sglang")
    assert data.faults == []
    assert data.completion_token_ids == body["choices"][0]["token_ids"]
    assert data.routed_experts is None
    assert [(s.version, s.start, s.end) for s in data.policy_version_spans or []] == [
        ("7", 0, 12),
        ("8", 12, 20),
    ]
    assert data.policy_version == "8"


def test_sglang_routing_from_sglext_when_meta_info_has_none() -> None:
    body = fixture("sglang_chat_meta_info")
    del body["choices"][0]["meta_info"]["routed_experts"]
    data = read_tokens(body, "sglang")
    assert data.routed_experts is not None
    assert data.routed_experts.data == body["sglext"]["routed_experts"]


def test_sglang_version_from_root_metadata_without_meta_info() -> None:
    body = fixture("sglang_chat_token_ids_weight_versions")
    del body["choices"][0]["meta_info"]
    data = read_tokens(body, "sglang")
    assert data.faults == []
    assert data.logprobs == [c["logprob"] for c in body["choices"][0]["logprobs"]["content"]]
    assert data.policy_version == "8"


def broken(name: str, path: list[Any], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(fixture(name))
    target = body
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body


VLLM = "vllm_chat_token_ids_routed_lists"
SGLANG = "sglang_chat_meta_info"
CHOICE = ["choices", 0]


@pytest.mark.parametrize(
    ("name", "dialect", "path", "value", "expected"),
    [
        (VLLM, "vllm", [*CHOICE, "logprobs", "content", 3], KeyError, "20 completion token ids"),
        (VLLM, "vllm", [*CHOICE, "token_ids", 0], "a", "not a list of integers"),
        (VLLM, "vllm", [*CHOICE, "logprobs", "content", 0, "logprob"], float("nan"), "finite"),
        (VLLM, "vllm", [*CHOICE, "routed_experts", 0, 1], [1], "rectangular"),
        (VLLM, "vllm", [*CHOICE, "routed_experts", 0, 0, 0], 2**40, "outside int32"),
        (VLLM, "vllm", [*CHOICE, "routed_experts"], "bm90IGEgbnB5", "not a base64 .npy"),
        (SGLANG, "sglang", [*CHOICE, "meta_info", "routed_experts"], "AAAA!", "not valid base64"),
        (SGLANG, "sglang", [*CHOICE, "meta_info", "routed_experts"], "AAA=", "whole number"),
        (SGLANG, "sglang", [*CHOICE, "token_ids"], [1, 2, 3], "disagrees"),
        (SGLANG, "sglang", [*CHOICE, "meta_info", "output_token_logprobs", 2], [0.1], "entries"),
        (
            SGLANG,
            "sglang",
            [*CHOICE, "meta_info", "weight_versions"],
            [{"v": 1}],
            "weight_versions",
        ),
    ],
)
def test_broken_token_data_is_a_fault_not_a_repair(
    name: str, dialect: Any, path: list[Any], value: Any, expected: str
) -> None:
    data = read_tokens(broken(name, path, value), dialect)
    assert any(expected in fault for fault in data.faults), data.faults
    assert all(fault.startswith(f"{dialect}: ") for fault in data.faults)


@pytest.mark.parametrize(
    ("name", "dialect", "path", "value", "expected"),
    [
        (VLLM, "vllm", ["prompt_token_ids"], None, "did not honour return_token_ids"),
        (VLLM, "vllm", [*CHOICE, "token_ids"], None, "choices[0].token_ids is missing"),
        (VLLM, "vllm", [*CHOICE, "logprobs"], None, "logprobs.content is missing"),
        (SGLANG, "sglang", [*CHOICE, "prompt_token_ids"], KeyError, "prompt_token_ids is missing"),
        (SGLANG, "sglang", [*CHOICE, "meta_info"], KeyError, "choices[0].token_ids is missing"),
    ],
)
def test_absent_token_data_is_missing_not_a_fault(
    name: str, dialect: Any, path: list[Any], value: Any, expected: str
) -> None:
    data = read_tokens(broken(name, path, value), dialect)
    assert data.faults == []
    assert any(expected in lacked for lacked in data.missing), data.missing
    assert data.lacking
    assert "missing" not in data.turn_fields()
    kept = data.without_data("asked again, still missing")
    assert (kept.token_source, kept.token_source_reason) == ("none", "asked again, still missing")
    assert kept.prompt_token_ids is kept.completion_token_ids is kept.logprobs is None
    assert not kept.lacking


def test_absent_data_beside_a_fault_is_not_worth_asking_again() -> None:
    body = broken(VLLM, [*CHOICE, "logprobs", "content", 3], KeyError)
    body["prompt_token_ids"] = None
    data = read_tokens(body, "vllm")
    assert data.missing
    assert data.faults
    assert not data.lacking


def test_mismatched_lengths_keep_both_arrays_as_received() -> None:
    body = broken(VLLM, [*CHOICE, "logprobs", "content", 3], KeyError)
    data = read_tokens(body, "vllm")
    assert data.completion_token_ids == body["choices"][0]["token_ids"]
    assert data.logprobs is not None
    assert len(data.logprobs) == len(body["choices"][0]["token_ids"]) - 1


def test_fortran_order_npy_is_a_fault() -> None:
    body = fixture("vllm_chat_token_ids_routed_npy")
    raw = base64.b64decode(body["choices"][0]["routed_experts"])
    raw = raw.replace(b"'fortran_order': False", b"'fortran_order': True ")
    body["choices"][0]["routed_experts"] = base64.b64encode(raw).decode()
    assert any("Fortran" in f for f in read_tokens(body, "vllm").faults)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (VLLM, "vllm"),
        ("vllm_chat_token_ids_routed_npy", "vllm"),
        (SGLANG, "sglang"),
        ("sglang_chat_token_ids_weight_versions", "sglang"),
    ],
)
def test_profile_detection_on_real_shapes(name: str, expected: str) -> None:
    assert detect_profile(fixture(name)) == expected


def test_plain_openai_answer_is_detected_as_text_only() -> None:
    body = fixture(VLLM)
    for key in ("prompt_token_ids", "prompt_logprobs", "kv_transfer_params"):
        del body[key]
    for key in ("token_ids", "routed_experts", "stop_reason"):
        del body["choices"][0][key]
    assert detect_profile(body) == "openai"


def test_request_fields_per_profile() -> None:
    assert request_fields("openai") == {}
    assert request_fields("vllm") == {
        "logprobs": True,
        "top_logprobs": 0,
        "return_token_ids": True,
    }
    assert request_fields("sglang", routed_experts=True) == {
        "logprobs": True,
        "return_prompt_token_ids": True,
        "return_token_ids": True,
        "return_meta_info": True,
        "return_routed_experts": True,
    }
    assert "return_routed_experts" not in request_fields("sglang")
    assert set(request_fields("auto")) == set(request_fields("vllm")) | set(
        request_fields("sglang")
    )


def test_capture_settles_auto_on_the_first_answer_and_stamps_versions() -> None:
    published = ["v1"]
    capture = TokenCapture(CaptureOptions(profile="auto"), version_source=lambda: published[-1])
    data = capture.read(fixture(VLLM), {"X-Policy-Version": " 12 "})
    assert capture.profile == "vllm"
    assert capture.request_fields() == request_fields("vllm")
    assert (data.policy_version, data.policy_version_source) == ("12", "header")
    published.append("v2")
    data = capture.read(fixture(VLLM), {})
    assert (data.policy_version, data.policy_version_source) == ("v2", "published")
    sglang = TokenCapture(CaptureOptions(profile="auto"), version_source=lambda: "v9")
    data = sglang.read(fixture(SGLANG), {"X-Policy-Version": "99"})
    assert (data.policy_version, data.policy_version_source) == ("7", "response")


def test_custom_version_header_and_no_version_at_all() -> None:
    capture = TokenCapture(CaptureOptions(profile="vllm", version_header="X-Weights"))
    assert capture.read(fixture(VLLM), {"X-Weights": "abc"}).policy_version == "abc"
    data = capture.read(fixture(VLLM), {"X-Policy-Version": "1"})
    assert (data.policy_version, data.policy_version_source) == (None, None)


def test_openai_profile_reads_no_tokens_even_when_present() -> None:
    data = TokenCapture(CaptureOptions(profile="openai")).read(fixture(VLLM), {})
    assert data.token_source == "none"
    assert data.prompt_token_ids is data.completion_token_ids is data.logprobs is None
    assert data.faults == []


def test_refusal_of_extension_fields_falls_back_to_openai_only_in_auto() -> None:
    refusal = b'{"error": {"message": "Unrecognized request argument supplied: return_token_ids"}}'
    auto = TokenCapture(CaptureOptions(profile="auto", routed_experts=True))
    assert not auto.refused(500, refusal)
    assert not auto.refused(400, b'{"error": {"message": "messages is empty"}}')
    assert auto.refused(400, refusal)
    payload = {"model": "m", "messages": [], "temperature": 0.5, **auto.request_fields()}
    stripped = json.loads(auto.without_fields(json.dumps(payload).encode()))
    assert stripped == {"model": "m", "messages": [], "temperature": 0.5}
    assert auto.profile == "openai"
    assert auto.request_fields() == {}
    assert not TokenCapture(CaptureOptions(profile="vllm")).refused(400, refusal)
    settled = TokenCapture(CaptureOptions(profile="auto"))
    settled.read(fixture(VLLM), {})
    assert not settled.refused(400, b'{"error": {"message": "top_logprobs must be <= 20"}}')
