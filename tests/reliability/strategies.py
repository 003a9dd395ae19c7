"""Hypothesis strategies for the service's inputs, valid and invalid.

Valid strategies build wire-shaped ``Datum``, ``ModelInput``, ``TensorData``, ``lossFnInputs``,
``lossFnConfig``, ``SamplingParams``, ``AdamParamsConfig``, names and ARNs within the service
model (docs/wire.md#5, #4, #10). Invalid ones take a valid request and break exactly
one thing; each comes with its own expectation, written from the spec rather than read from the
code under test: where it must be refused (at submit with a 400, or by the op failing when it
runs, docs/semantics.md#4) and a word the error message must contain (the field).
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

#: The built-in tiny model's vocabulary: 256 bytes plus <|endoftext|>, <|im_start|>, <|im_end|>.
VOCAB = 259
REGION, ACCOUNT = "us-west-2", "000000000000"
SUBMIT, EXECUTE = "submit", "execute"

# The service patterns, written out from docs/wire.md#2, #10
SESSION_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
PACKAGE_ARN = re.compile(
    r"arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:model-package/"
    r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}/[1-9]\d*"
)


@dataclass(frozen=True)
class Bad:
    """An invalid request and what the service must do with it."""

    request: dict[str, Any]
    stage: str  # SUBMIT: refused with 400 ValidationException; EXECUTE: the op fails
    field: str  # a word the error message must contain
    what: str  # the mutation, for failure reports

    def __repr__(self) -> str:
        return f"Bad({self.what!r}, field={self.field!r}, stage={self.stage})"


# -- valid values ----------------------------------------------------------------------------

tokens = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=6)


@st.composite
def model_inputs(draw: st.DrawFn) -> dict[str, Any]:
    chunks = draw(st.lists(tokens, min_size=1, max_size=3))
    typed = draw(st.booleans())
    return {
        "chunks": [
            {"tokens": c, "type": "encoded_text"} if typed else {"tokens": c} for c in chunks
        ]
    }


def length(model_input: dict[str, Any]) -> int:
    return sum(len(c["tokens"]) for c in model_input["chunks"])


def tensor(data: list[Any], dtype: str, shaped: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"data": data, "dtype": dtype}
    if shaped:
        out["shape"] = [len(data)]
    return out


finite = st.floats(-4.0, 4.0, allow_nan=False)


@st.composite
def datums(draw: st.DrawFn, loss_fn: str) -> dict[str, Any]:
    """A datum whose ``lossFnInputs`` fit ``loss_fn`` and its token count."""
    mi = draw(model_inputs())
    n = length(mi)
    shaped = draw(st.booleans())
    inputs = {
        "target_tokens": tensor(
            draw(st.lists(st.integers(0, VOCAB - 1), min_size=n, max_size=n)), "int64", shaped
        ),
        "weights": tensor(
            draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)), "float32", shaped
        ),
    }
    if loss_fn != "cross_entropy":
        inputs["logprobs"] = tensor(
            draw(st.lists(st.floats(-6.0, 0.0), min_size=n, max_size=n)), "float32", shaped
        )
        inputs["advantages"] = tensor(
            draw(st.lists(finite, min_size=n, max_size=n)), "float32", shaped
        )
    return {"modelInput": mi, "lossFnInputs": inputs}


loss_fn_configs = st.fixed_dictionaries(
    {},
    optional={
        "clip_low_threshold": st.floats(0.0, 1.0),
        "clip_high_threshold": st.floats(1.0, 10.0),
    },
)

adam_params = st.fixed_dictionaries(
    {"learningRate": st.floats(1e-6, 0.01)},
    optional={
        "beta1": st.floats(0.0, 0.999999),
        "beta2": st.floats(0.0, 0.999999),
        "eps": st.floats(1e-16, 0.01),
        "weightDecay": st.floats(0.0, 1.0),
        "gradClipNorm": st.floats(0.0, 100.0),
        "loraPlusLrRatio": st.floats(1.0, 100.0),
    },
)

sampling_params = st.fixed_dictionaries(
    {"maxTokens": st.integers(512, 131072)},
    optional={
        "temperature": st.floats(0.0, 2.0),
        "topP": st.floats(0.0, 1.0),
        "topK": st.one_of(st.just(-1), st.integers(1, 1000)),
        "seed": st.integers(0, 2**31 - 1),
        "stop": st.lists(st.text(min_size=1, max_size=4), max_size=3),
    },
)

session_names = st.from_regex(SESSION_NAME, fullmatch=True)
group_names = session_names


def package_arn(group: str, version: int) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package/{group}/{version}"


@st.composite
def forward_requests(draw: st.DrawFn) -> dict[str, Any]:
    """A valid ``forward`` op body (changes no state, so it can run any number of times)."""
    loss_fn = draw(st.sampled_from(["cross_entropy", "importance_sampling", "ppo", "cispo"]))
    body: dict[str, Any] = {
        "lossFnName": loss_fn,
        "datumList": draw(st.lists(datums(loss_fn), min_size=1, max_size=3)),
    }
    if loss_fn in ("ppo", "cispo") and draw(st.booleans()):
        body["lossFnConfig"] = draw(loss_fn_configs)
    return {"forward": body}


# -- invalid names and ARNs ------------------------------------------------------------------

#: Strings aimed at the filesystem: traversal, absolute paths, NUL bytes, overlong names.
HOSTILE = [
    "..",
    "../etc",
    "../../../../tmp/pwned",
    "/etc/passwd",
    "/tmp",
    "a/b",
    "a\\b",
    "a\x00b",
    "\x00",
    "a" * 64,
    "a" * 5000,
    "name\n",
    "-lead",
    "trail-",
    "sp ace",
    "%2e%2e",
    "~root",
    "",
    ".",
    "ünïcode",
]
hostile_text = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(max_size=80),
    st.builds(lambda a, b: a + b, st.sampled_from(HOSTILE), st.text(max_size=10)),
)


def is_session_name(value: Any) -> bool:
    return isinstance(value, str) and SESSION_NAME.fullmatch(value) is not None


def is_package_arn(value: Any) -> bool:
    return isinstance(value, str) and PACKAGE_ARN.fullmatch(value) is not None


hostile_arns = st.one_of(
    hostile_text,
    st.builds(lambda g: package_arn(g, 1), hostile_text),
    st.builds(
        lambda g, v: f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package/{g}/{v}",
        st.sampled_from(["g", "..", "a/..", "g\x00"]),
        st.sampled_from(["0", "-1", "1/..", "01x", "1\n", "../1"]),
    ),
)

# -- invalid training requests ---------------------------------------------------------------

#: Values of the wrong JSON type for a field that wants something else.
wrong_types = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
not_numbers = st.one_of(
    st.text(max_size=4),
    st.booleans(),
    st.lists(st.floats(), max_size=1),
    st.just(math.nan),
    st.just(math.inf),
    st.just(-math.inf),
)


def _fb(seq: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"sequenceNumber": seq, "clientToken": f"fuzz-{seq}", "operationConfig": body}


@st.composite
def bad_training_requests(draw: st.DrawFn, seq: int = 1) -> Bad:
    """A training request with one thing broken, and where and how it must be refused."""
    loss_fn = draw(st.sampled_from(["cross_entropy", "ppo"]))
    good = {
        "forwardBackward": {
            "lossFnName": loss_fn,
            "datumList": draw(st.lists(datums(loss_fn), min_size=1, max_size=2)),
        }
    }
    req = _fb(seq, good)
    fb = req["operationConfig"]["forwardBackward"]
    d0 = fb["datumList"][0]
    kind = draw(
        st.sampled_from(
            [
                "seq",
                "token",
                "top_unknown",
                "union",
                "loss_fn",
                "loss_cfg",
                "datum_list",
                "datum",
                "model_input",
                "chunk",
                "token_id",
                "tensor",
                "adam",
                "save",
                "load",
                "len_mismatch",
                "missing_key",
                "unsupported_key",
                "non_finite",
                "vocab",
            ]
        )
    )
    if kind == "seq":
        value = draw(st.one_of(st.integers(max_value=0), st.floats(), wrong_types))
        if value is None:
            del req["sequenceNumber"]
        else:
            req["sequenceNumber"] = value
        return Bad(req, SUBMIT, "sequenceNumber", f"sequenceNumber={value!r}")
    if kind == "token":
        value = draw(
            st.one_of(
                st.just(""),
                st.just("a" * 129),
                st.text(min_size=1, max_size=20).filter(
                    lambda t: re.fullmatch(r"[a-zA-Z0-9-]{1,128}", t) is None
                ),
                st.integers(),
                st.booleans(),
                st.lists(st.integers(), max_size=1),
            )
        )
        req["clientToken"] = value
        return Bad(req, SUBMIT, "clientToken", f"clientToken={value!r}")
    if kind == "top_unknown":
        key = draw(
            st.sampled_from(["trainingSessionName", "labels", "sequence_number", "x", "__proto__"])
        )
        req[key] = draw(wrong_types)
        return Bad(req, SUBMIT, key, f"unknown top-level {key}")
    if kind == "union":
        choice = draw(st.sampled_from(["missing", "empty", "two", "unknown", "not_obj"]))
        if choice == "missing":
            del req["operationConfig"]
        elif choice == "empty":
            req["operationConfig"] = {}
        elif choice == "two":
            req["operationConfig"]["saveState"] = {}
        elif choice == "unknown":
            req["operationConfig"] = {"train": fb}
        else:
            req["operationConfig"] = {"forwardBackward": draw(wrong_types.filter(_not_dict))}
        return Bad(req, SUBMIT, "operationConfig", f"operationConfig {choice}")
    if kind == "loss_fn":
        value = draw(
            st.one_of(
                st.text(max_size=12).filter(
                    lambda t: t not in ("cross_entropy", "importance_sampling", "ppo", "cispo")
                ),
                wrong_types,
            )
        )
        fb["lossFnName"] = value
        return Bad(req, SUBMIT, "lossFnName", f"lossFnName={value!r}")
    if kind == "loss_cfg":
        choice = draw(st.sampled_from(["unknown", "low", "high", "nan", "type"]))
        if choice == "unknown":
            fb["lossFnConfig"] = {draw(st.sampled_from(["clip", "epsilon", "beta"])): 0.2}
        elif choice == "low":
            fb["lossFnConfig"] = {
                "clip_low_threshold": draw(
                    st.one_of(st.floats(max_value=-1e-9), st.floats(min_value=1.000001))
                )
            }
        elif choice == "high":
            fb["lossFnConfig"] = {
                "clip_high_threshold": draw(
                    st.one_of(st.floats(max_value=0.999999), st.floats(min_value=10.000001))
                )
            }
        elif choice == "nan":
            fb["lossFnConfig"] = {"clip_low_threshold": draw(not_numbers)}
        else:
            fb["lossFnConfig"] = draw(st.one_of(st.text(max_size=3), st.lists(st.integers())))
        return Bad(req, SUBMIT, "lossFnConfig", f"lossFnConfig {choice}")
    if kind == "datum_list":
        value = draw(st.one_of(st.just([]), wrong_types.filter(lambda v: v != [])))
        if value is None:
            del fb["datumList"]
        else:
            fb["datumList"] = value
        return Bad(req, SUBMIT, "datumList", f"datumList={value!r}")
    if kind == "datum":
        if draw(st.booleans()):
            fb["datumList"][0] = draw(wrong_types.filter(_not_dict))
            return Bad(req, SUBMIT, "datumList[0]", "datum not an object")
        key = draw(st.sampled_from(["labels", "model_input", "loss_fn_inputs", "x"]))
        d0[key] = {}
        return Bad(req, SUBMIT, key, f"datum unknown member {key}")
    if kind == "model_input":
        choice = draw(st.sampled_from(["missing", "type", "chunks_type", "empty", "unknown"]))
        if choice == "missing":
            del d0["modelInput"]
        elif choice == "type":
            d0["modelInput"] = draw(wrong_types.filter(_not_dict))
        elif choice == "chunks_type":
            d0["modelInput"]["chunks"] = draw(wrong_types.filter(lambda v: not isinstance(v, list)))
        elif choice == "empty":
            d0["modelInput"]["chunks"] = []
        else:
            d0["modelInput"]["text"] = "hello"
        return Bad(req, SUBMIT, "modelInput", f"modelInput {choice}")
    if kind == "chunk":
        chunk = d0["modelInput"]["chunks"][0]
        choice = draw(st.sampled_from(["not_obj", "no_tokens", "tokens_type", "type", "unknown"]))
        if choice == "not_obj":
            d0["modelInput"]["chunks"][0] = draw(wrong_types.filter(_not_dict))
        elif choice == "no_tokens":
            del chunk["tokens"]
        elif choice == "tokens_type":
            chunk["tokens"] = draw(wrong_types.filter(lambda v: not isinstance(v, list)))
        elif choice == "type":
            chunk["type"] = draw(st.one_of(st.sampled_from(["image", "text", ""]), st.integers()))
        else:
            chunk["image"] = {}
        return Bad(req, SUBMIT, "chunks[0]", f"chunk {choice}")
    if kind == "token_id":
        value = draw(
            st.one_of(
                st.integers(max_value=-1),
                st.floats(),
                st.booleans(),
                st.text(max_size=3),
                st.none(),
            )
        )
        d0["modelInput"]["chunks"][0]["tokens"][0] = value
        return Bad(req, SUBMIT, "tokens", f"token id {value!r}")
    if kind == "tensor":
        key = draw(st.sampled_from(["target_tokens", "weights"]))
        choice = draw(
            st.sampled_from(["not_obj", "no_data", "data_type", "unknown", "dtype", "shape"])
        )
        td = d0["lossFnInputs"][key]
        if choice == "not_obj":
            d0["lossFnInputs"][key] = draw(
                st.one_of(st.lists(st.floats(0, 1), max_size=3), st.floats(), st.text(max_size=3))
            )
        elif choice == "no_data":
            del td["data"]
        elif choice == "data_type":
            td["data"] = draw(st.one_of(st.floats(), st.text(max_size=3), st.none()))
        elif choice == "unknown":
            td["values"] = td["data"]
        elif choice == "dtype":
            td["dtype"] = draw(st.one_of(st.integers(), st.booleans(), st.lists(st.text())))
        else:
            td["shape"] = draw(
                st.one_of(
                    st.integers(),
                    st.text(max_size=3),
                    st.lists(st.integers(max_value=-1), min_size=1, max_size=2),
                    st.lists(st.floats(), min_size=1, max_size=2),
                )
            )
        return Bad(req, SUBMIT, "lossFnInputs", f"TensorData {key} {choice}")
    if kind == "adam":
        return _bad_adam(draw, seq)
    if kind == "save":
        op = draw(st.sampled_from(["saveState", "saveWeights"]))
        choice = draw(st.sampled_from(["long", "type", "merge", "unknown"]))
        body: dict[str, Any] = {}
        if choice == "long":
            body["description"] = "d" * draw(st.integers(1025, 5000))
            fieldname = "description"
        elif choice == "type":
            body["description"] = draw(
                st.one_of(st.integers(), st.booleans(), st.lists(st.text(), min_size=1))
            )
            fieldname = "description"
        elif choice == "merge" and op == "saveWeights":
            body["mergeWeights"] = draw(st.one_of(st.integers(), st.text(max_size=3)))
            fieldname = "mergeWeights"
        else:
            body["path"] = "../../etc"
            fieldname = "path"
        return Bad(_fb(seq, {op: body}), SUBMIT, fieldname, f"{op} {choice}")
    if kind == "load":
        if draw(st.booleans()):
            arn = draw(hostile_arns.filter(lambda a: not is_package_arn(a)))
            body = {"modelPackageArn": arn, "loadOptimizer": True}
            return Bad(_fb(seq, {"loadState": body}), SUBMIT, "modelPackageArn", f"ARN {arn!r}")
        body = {"modelPackageArn": package_arn("g", 1)}
        if draw(st.booleans()):
            body["loadOptimizer"] = draw(st.one_of(st.integers(), st.text(max_size=3)))
        return Bad(_fb(seq, {"loadState": body}), SUBMIT, "loadOptimizer", "loadOptimizer")
    # Requests the service accepts and then fails when the op runs (docs/wire.md#5):
    # the message names the datum and the key.
    n = length(d0["modelInput"])
    if kind == "len_mismatch":
        key = draw(st.sampled_from(["target_tokens", "weights"]))
        extra = draw(st.integers(1, 3))
        data = d0["lossFnInputs"][key]["data"]
        d0["lossFnInputs"][key] = {"data": data + data[:1] * extra, "dtype": "float32"}
        if key == "target_tokens":
            d0["lossFnInputs"][key]["dtype"] = "int64"
        return Bad(req, EXECUTE, key, f"{key} has {n + extra} values for {n} tokens")
    if kind == "missing_key":
        key = draw(st.sampled_from(["target_tokens", "weights"]))
        del d0["lossFnInputs"][key]
        return Bad(req, EXECUTE, key, f"missing {key}")
    if kind == "unsupported_key":
        key = draw(st.sampled_from(["labels", "old_logprobs", "mask", "reward"]))
        d0["lossFnInputs"][key] = {"data": [0.0] * n, "dtype": "float32"}
        return Bad(req, EXECUTE, key, f"unsupported key {key}")
    if kind == "non_finite":
        d0["lossFnInputs"]["weights"]["data"][0] = draw(
            st.sampled_from([math.nan, math.inf, -math.inf])
        )
        return Bad(req, EXECUTE, "weights", "non-finite weight")
    value = draw(st.integers(VOCAB, 2**40))
    where = draw(st.sampled_from(["modelInput", "target_tokens"]))
    if where == "modelInput":
        d0["modelInput"]["chunks"][0]["tokens"][0] = value
    else:
        d0["lossFnInputs"]["target_tokens"]["data"][0] = value
    return Bad(req, EXECUTE, where, f"token id {value} outside the vocabulary in {where}")


def _not_dict(value: Any) -> bool:
    return not isinstance(value, dict)


_ADAM_RANGES = {
    "learningRate": (0.0, 0.01),
    "beta1": (0.0, 0.999999),
    "beta2": (0.0, 0.999999),
    "eps": (1e-16, 0.01),
    "weightDecay": (0.0, 1.0),
    "gradClipNorm": (0.0, 100.0),
    "loraPlusLrRatio": (1.0, 100.0),
}


def _bad_adam(draw: st.DrawFn, seq: int) -> Bad:
    params = copy.deepcopy(draw(adam_params))
    choice = draw(st.sampled_from(["range", "type", "missing_lr", "zero_lr", "unknown"]))
    if choice == "missing_lr":
        del params["learningRate"]
        key = "learningRate"
    elif choice == "zero_lr":
        params["learningRate"] = 0.0
        key = "learningRate"
    elif choice == "unknown":
        key = draw(st.sampled_from(["lr", "momentum", "learning_rate"]))
        params[key] = 0.1
    else:
        key = draw(st.sampled_from(sorted(_ADAM_RANGES)))
        lo, hi = _ADAM_RANGES[key]
        if choice == "range":
            params[key] = draw(
                st.one_of(
                    st.floats(max_value=lo - max(lo * 1e-6, 1e-12), allow_infinity=False),
                    st.floats(min_value=hi, exclude_min=True, allow_infinity=False),
                )
            )
        else:
            params[key] = draw(not_numbers)
    request = _fb(seq, {"optimizerStep": {"adamParamsConfig": params}})
    return Bad(request, SUBMIT, key, f"adamParamsConfig {choice} {key}={params.get(key)!r}")


# -- invalid sampling requests ---------------------------------------------------------------


@st.composite
def bad_sampling_requests(draw: st.DrawFn) -> Bad:
    """A sampling request with one thing broken; all are refused at submit."""
    body: dict[str, Any] = {
        "prompt": draw(model_inputs()),
        "numSamples": draw(st.integers(1, 4)),
        "samplingParams": copy.deepcopy(draw(sampling_params)),
    }
    req = {"operationConfig": {"sample": body}}
    params = body["samplingParams"]
    kind = draw(
        st.sampled_from(
            [
                "max_tokens",
                "temperature",
                "top_p",
                "top_k",
                "seed",
                "stop",
                "params_unknown",
                "num_samples",
                "prompt",
                "topk_prompt",
                "include",
                "arn",
                "unknown",
                "top_unknown",
            ]
        )
    )
    if kind == "max_tokens":
        value = draw(st.one_of(st.integers(max_value=511), st.integers(131073), not_numbers))
        params["maxTokens"] = value
        return Bad(req, SUBMIT, "maxTokens", f"maxTokens={value!r}")
    if kind in ("temperature", "top_p"):
        key, hi = ("temperature", 2.0) if kind == "temperature" else ("topP", 1.0)
        value = draw(
            st.one_of(
                st.floats(max_value=-1e-12),
                st.floats(min_value=hi, exclude_min=True),
                not_numbers,
            )
        )
        params[key] = value
        return Bad(req, SUBMIT, key, f"{key}={value!r}")
    if kind == "top_k":
        value = draw(st.one_of(st.integers(max_value=-2), st.just(0), st.floats(), st.text()))
        params["topK"] = value
        return Bad(req, SUBMIT, "topK", f"topK={value!r}")
    if kind == "seed":
        value = draw(st.one_of(st.floats(), st.text(max_size=3), st.booleans()))
        params["seed"] = value
        return Bad(req, SUBMIT, "seed", f"seed={value!r}")
    if kind == "stop":
        value = draw(
            st.one_of(
                st.text(max_size=3),
                st.lists(st.one_of(st.integers(), st.just("")), min_size=1, max_size=2),
            )
        )
        params["stop"] = value
        return Bad(req, SUBMIT, "stop", f"stop={value!r}")
    if kind == "params_unknown":
        key = draw(st.sampled_from(["max_tokens", "logprobs", "n"]))
        params[key] = 1
        return Bad(req, SUBMIT, key, f"samplingParams unknown {key}")
    if kind == "num_samples":
        value = draw(st.one_of(st.integers(max_value=0), st.integers(1001), not_numbers))
        body["numSamples"] = value
        return Bad(req, SUBMIT, "numSamples", f"numSamples={value!r}")
    if kind == "prompt":
        body["prompt"] = draw(
            st.one_of(
                wrong_types.filter(_not_dict),
                st.just({"chunks": []}),
                st.just({"chunks": [{"tokens": [-1]}]}),
            )
        )
        return Bad(req, SUBMIT, "prompt", f"prompt={body['prompt']!r}")
    if kind == "topk_prompt":
        value = draw(st.one_of(st.integers(max_value=-1), st.floats(), st.text(max_size=2)))
        body["topkPromptLogprobs"] = value
        return Bad(req, SUBMIT, "topkPromptLogprobs", f"topkPromptLogprobs={value!r}")
    if kind == "include":
        value = draw(st.one_of(st.integers(), st.text(max_size=3)))
        body["includePromptLogprobs"] = value
        return Bad(req, SUBMIT, "includePromptLogprobs", f"includePromptLogprobs={value!r}")
    if kind == "arn":
        arn = draw(hostile_arns.filter(lambda a: not is_package_arn(a)))
        op = draw(st.sampled_from(["sample", "loadWeightsForSampling", "computeLogprobs"]))
        if op == "sample":
            body["modelPackageArn"] = arn
        elif op == "computeLogprobs":
            req = {"operationConfig": {op: {"prompt": body["prompt"], "modelPackageArn": arn}}}
        else:
            req = {"operationConfig": {op: {"modelPackageArn": arn}}}
        return Bad(req, SUBMIT, "modelPackageArn", f"{op} ARN {arn!r}")
    if kind == "unknown":
        body["temperature"] = 0.5  # belongs in samplingParams
        return Bad(req, SUBMIT, "temperature", "sample unknown member temperature")
    req["sequenceNumber"] = 1  # training-only member
    return Bad(req, SUBMIT, "sequenceNumber", "sampling request with sequenceNumber")
