"""The Tinker wire under hostile bodies, and its JSON twins of the protobuf bodies.

Malformed protobuf, a bad zstd frame, an unknown endpoint and an oversized body each get an
HTTP error with a JSON ``detail`` naming the problem (the shape the SDK's ``APIStatusError``
carries); afterwards the same model still trains through the unmodified SDK. A result is
protobuf to a caller that accepts it, JSON to one that does not (tinker 0.16).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

tinker = pytest.importorskip("tinker")
zstandard = pytest.importorskip("zstandard")
types = tinker.types

pytestmark = pytest.mark.localsession_tinker(engine="fake")
HEADERS = {"X-API-Key": "tml-localsession"}


def _datum() -> Any:
    return types.Datum(
        model_input=types.ModelInput.from_ints([1, 2, 3]),
        loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]},
    )


def _post(url: str, path: str, content: bytes, **headers: str) -> httpx.Response:
    return httpx.post(url + path, content=content, headers={**HEADERS, **headers}, timeout=30)


def test_hostile_bodies_get_clear_errors_and_the_model_keeps_training(
    localsession_tinker: Any,
) -> None:
    url = localsession_tinker.url
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4).result()
    tc.forward_backward([_datum()], "cross_entropy").result()

    proto = {"Content-Type": "application/x-protobuf"}
    bad = _post(url, "/api/v1/forward_backward", b"\xff\xff\xff\x07garbage", **proto)
    assert bad.status_code == 400 and "ForwardBackwardRequest" in bad.json()["detail"]

    frame = _post(
        url,
        "/api/v1/forward_backward",
        b"not a zstd frame",
        **proto,
        **{"Content-Encoding": "zstd"},
    )
    assert frame.status_code == 400 and "zstd" in frame.json()["detail"]

    unknown = _post(url, "/api/v1/no_such_thing", b"{}", **{"Content-Type": "application/json"})
    assert unknown.status_code == 404 and "/api/v1/no_such_thing" in unknown.json()["detail"]

    from localsession.server.auth import MAX_BODY_BYTES

    huge = _post(url, "/api/v1/forward_backward", b"\0" * (MAX_BODY_BYTES + 1), **proto)
    assert huge.status_code == 413

    # the same model, the same client: the next ops run as if nothing happened
    out = tc.forward_backward([_datum()], "cross_entropy").result()
    assert len(out.loss_fn_outputs) == 1
    tc.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    sc.close("success").result()


def test_a_json_forward_backward_body_runs_like_the_protobuf_one(localsession_tinker: Any) -> None:
    url = localsession_tinker.url
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4).result()
    expected = tc.forward([_datum()], "cross_entropy").result()
    body = {
        "model_id": tc.model_id,
        "seq_id": 2,
        "forward_only": True,
        "forward_backward_input": {
            "loss_fn": "cross_entropy",
            "data": [
                {
                    "model_input": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]},
                    "loss_fn_inputs": {
                        "target_tokens": {"data": [2, 3, 4], "dtype": "int64"},
                        "weights": {"data": [1.0, 1.0, 1.0], "dtype": "float32"},
                    },
                }
            ],
        },
    }
    sent = httpx.post(f"{url}/api/v1/forward_backward", json=body, headers=HEADERS, timeout=30)
    assert sent.status_code == 200, sent.text
    request_id = sent.json()["request_id"]
    got = httpx.post(
        f"{url}/api/v1/retrieve_future",
        json={"request_id": request_id},
        headers={**HEADERS, "Accept": "application/x-protobuf"},
        timeout=30,
    )
    from tinker.proto.response_conv import deserialize_forward_backward_output

    out = deserialize_forward_backward_output(got.content)
    assert out.metrics["loss:sum"] == expected.metrics["loss:sum"]
    assert (
        out.loss_fn_outputs[0]["logprobs"].tolist()
        == expected.loss_fn_outputs[0]["logprobs"].tolist()
    )
    # without Accept: application/x-protobuf (tinker 0.16 sends none) the result is JSON
    plain = httpx.post(
        f"{url}/api/v1/retrieve_future", json={"request_id": request_id}, headers=HEADERS,
        timeout=30,
    )  # fmt: skip
    assert plain.headers["content-type"].startswith("application/json"), plain.headers
    twin = plain.json()  # the fields of tinker 0.16's ForwardBackwardOutput and TensorData
    assert twin["metrics"]["loss:sum"] == pytest.approx(expected.metrics["loss:sum"], rel=1e-6)
    (record,) = twin["loss_fn_outputs"]
    assert record["logprobs"]["dtype"] == "float32" and record["logprobs"]["shape"] == [3]
    assert record["logprobs"]["data"] == pytest.approx(
        expected.loss_fn_outputs[0]["logprobs"].tolist(), rel=1e-6
    )  # float32 on the protobuf side
    sc.close("success").result()


def test_unknown_futures_and_models_are_not_found(localsession_tinker: Any) -> None:
    url = localsession_tinker.url
    gone = httpx.post(f"{url}/api/v1/retrieve_future", json={"request_id": "nope"}, headers=HEADERS)
    assert gone.status_code == 404 and "nope" in gone.json()["detail"]
    info = httpx.post(f"{url}/api/v1/get_info", json={"model_id": "x:train:0"}, headers=HEADERS)
    assert info.status_code == 404 and "create_lora_training_client" in info.json()["detail"]
    telemetry = httpx.post(f"{url}/api/v1/telemetry", json={"events": []}, headers=HEADERS)
    assert telemetry.json() == {"status": "accepted"}


def test_an_unnamed_sampler_save_answers_its_sampler_and_no_path(localsession_tinker: Any) -> None:
    """save_weights_and_get_sampling_client's save names no checkpoint: the answer carries the
    sampling session and ``path: null`` (tinker 0.16 asserts there is no path)."""
    url = localsession_tinker.url
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4).result()
    answers = {}
    for name, body in (("unnamed", {}), ("named", {"path": "kept"})):
        sent = httpx.post(
            f"{url}/api/v1/save_weights_for_sampler",
            json={"model_id": tc.model_id, "seq_id": len(answers) + 1,
                  "sampling_session_seq_id": len(answers), **body},
            headers=HEADERS, timeout=30,
        )  # fmt: skip
        assert sent.status_code == 200, sent.text
        got = httpx.post(
            f"{url}/api/v1/retrieve_future", json={"request_id": sent.json()["request_id"]},
            headers=HEADERS, timeout=60,
        )  # fmt: skip
        answers[name] = got.json()
    assert answers["unnamed"]["path"] is None and answers["unnamed"]["sampling_session_id"]
    assert answers["named"]["path"].endswith("/sampler_weights/kept")
    sc.close("success").result()
