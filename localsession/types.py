"""The public value types of the training-session API: what users build and what ops return.

The names, fields, defaults and enum values are the SDK's (``tests/test_parity.py`` compares
them); the code is ours. Three groups:

* inputs users build: ``Datum``, ``ModelInput`` and its chunks, ``TensorData``,
  ``AdamParams``, ``SamplingParams``, ``VpcConfig``;
* views of service records: ``ModelPackageInfo``, ``TrainingSessionSummary``,
  ``ModelPackageDeletion``;
* op results: ``ForwardBackwardOutput`` and friends, ``SampleResponse``.

Every type also has a private wire form: ``_to_api()`` writes the runtime's camelCase JSON,
``_from_api()`` / ``_from_summary()`` read it. Inputs are forgiving (``from_any`` reads dicts,
look-alike objects, numpy and torch values) but never silently drop what the caller meant:
a value that cannot be read raises and says what to pass instead. numpy and torch are only
touched through duck typing, so importing this module imports neither.

Length: one module, as in the SDK (``sagemaker.train.training_session.types``): pydantic field
annotations name their types' module, and ``tests/test_parity.py`` compares those annotations.
"""

from __future__ import annotations

import logging
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_serializer,
    model_validator,
)

_log = logging.getLogger("localsession.types")

# The SDK's LoRA defaults for new sessions (the service alone would pick rank 8).
DEFAULT_LORA_RANK: int = 32
DEFAULT_LORA_ALPHA: int = 64


class _ForbidExtraBase(BaseModel):
    """Base of the types users write by hand: a misspelt field is an error, not ignored."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid")


class _AllowExtraBase(BaseModel):
    """Base of the types also built from foreign objects: unknown fields are kept."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="allow")


def _without_nones(fields: Dict[str, Any]) -> Dict[str, Any]:
    # ``None`` means "not set here", so the field's own default applies.
    return {name: v for name, v in fields.items() if v is not None}


def _params_from(model: Any, source: Any) -> Any:
    """An all-defaults params model from a dict, or from a foreign object's same-named
    attributes. An object sharing no field name at all is refused: it would otherwise quietly
    become the defaults, with none of the caller's settings used."""
    if isinstance(source, dict):
        return model(**_without_nones(source))
    names = sorted(model.model_fields)
    found = {name: getattr(source, name) for name in model.model_fields if hasattr(source, name)}
    if found:
        return model(**_without_nones(found))
    kind = model.__name__
    problem = (
        f"cannot read {kind} fields from {type(source).__name__}: none of {names} are "
        f"present. Pass a {kind}, a dict, or an object using these field names."
    )
    raise TypeError(problem)


def _required(record: Dict[str, Any], key: str) -> Any:
    return record[key]


def _renamed(record: Dict[str, Any], **keys: str) -> Dict[str, Any]:
    """Our field names for a service record's optional keys (absent ones become None)."""
    return {field: record.get(key) for field, key in keys.items()}


class SessionStatus(str, Enum):
    """The states a training session goes through, as the service spells them."""

    CREATED = "Created"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    FAILED = "Failed"
    BLOCKED = "Blocked"
    EXPIRED = "Expired"
    DELETING = "Deleting"
    DELETION_FAILED = "DeletionFailed"


class ModelPackageKind(str, Enum):
    """What a save registered: ``CHECKPOINT`` (``save_state``: weights and optimizer, to
    resume training) or ``MODEL`` (``save_weights_for_sampler``: weights only, to sample or
    to start new training from)."""

    CHECKPOINT = "checkpoint"
    MODEL = "model"


class ModelPackageInfo(_ForbidExtraBase):
    """One model package version of a session's group, as listed.

    ``kind`` is known only after a describe, so ``list_model_packages`` leaves it ``None``
    while the ``get_latest_*`` helpers fill it in.
    """

    model_package_arn: str
    version: Optional[int] = None
    creation_time: Optional[datetime] = None
    description: Optional[str] = None
    kind: Optional[ModelPackageKind] = None

    @classmethod
    def _from_summary(cls, summary: Dict[str, Any]) -> ModelPackageInfo:
        return cls(
            model_package_arn=_required(summary, "ModelPackageArn"),
            **_renamed(
                summary,
                version="ModelPackageVersion",
                creation_time="CreationTime",
                description="ModelPackageDescription",
            ),
        )


class TrainingSessionSummary(_ForbidExtraBase):
    """One training session, as ``list_sessions`` reports it.

    A status this version does not know stays a plain string instead of failing the list.
    """

    training_session_arn: str
    status: Optional[Union[SessionStatus, str]] = None
    creation_time: Optional[datetime] = None
    last_modified_time: Optional[datetime] = None

    @property
    def training_session_name(self) -> str:
        """The name part of the session's ARN."""
        return self.training_session_arn.split("/")[-1]

    @classmethod
    def _from_summary(cls, summary: Dict[str, Any]) -> TrainingSessionSummary:
        raw = summary.get("TrainingSessionStatus")
        known = raw in SessionStatus._value2member_map_ if isinstance(raw, str) else False
        return cls(
            training_session_arn=_required(summary, "TrainingSessionArn"),
            status=SessionStatus(raw) if known else raw,  # a newer status stays a string
            **_renamed(
                summary, creation_time="CreationTime", last_modified_time="LastModifiedTime"
            ),
        )


class ModelPackageDeletion(_ForbidExtraBase):
    """What ``delete_model_package`` did.

    ``model_package_deleted`` is False when the package was already gone. When artifacts were
    kept (``artifacts_retained``), ``s3_uri`` is where they still are and ``retained_reason``
    says why; ``objects_deleted`` counts S3 objects removed, not bytes.
    """

    model_package_arn: str
    model_package_deleted: bool
    s3_uri: Optional[str] = None
    objects_deleted: int = 0
    artifacts_retained: bool = True
    retained_reason: Optional[str] = None


class VpcConfig(_ForbidExtraBase):
    """Subnets and security groups a session's compute runs in."""

    subnets: List[str]
    security_group_ids: List[str]

    @classmethod
    def from_any(cls, value: Any) -> "VpcConfig":
        """A ``VpcConfig`` from itself, a dict, or an object with the two attributes."""
        return value if isinstance(value, VpcConfig) else cls._read(value)

    @classmethod
    def _read(cls, source: Any) -> VpcConfig:
        if isinstance(source, dict):
            return cls(**source)
        subnets = [*source.subnets]  # read (and checked) before the groups, as the SDK does
        return cls(subnets=subnets, security_group_ids=[*source.security_group_ids])

    def _to_api(self) -> Dict[str, Any]:
        return {"Subnets": [*self.subnets], "SecurityGroupIds": [*self.security_group_ids]}


class TensorDtype(str, Enum):
    """Element types a tensor can carry on the wire."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    INT32 = "int32"
    INT64 = "int64"


# Names with no wire slot of their own. Floats go out as float32 (with a warning: that can
# lose precision); integers and booleans as int64 (exact). ``half`` is float16 by another name.
_FLOAT_NAMES = {"double", "float", "longdouble"}
_INT_NAMES = {"bool", "int8", "int16", "uint8", "uint16", "uint32", "uint64"}
_INT_NAMES |= {"int", "long", "short"}


def _bare_dtype_name(spec: Any) -> str:
    """``torch.float32``, ``<class 'numpy.int8'>``, ``dtype('int8')``: the last name part."""
    text = str(spec)
    if text[:8] == "<class '" and text[-2:] == "'>":
        text = text[8:-2]
    return text.split(".")[-1]


def _numeric_family(spec: Any, name: str) -> str:
    """``"float"``, ``"int"`` or ``""`` (neither), asking the dtype object before its name."""
    torch_float = getattr(spec, "is_floating_point", None)
    if type(torch_float) is bool:  # a torch.dtype
        if torch_float:
            return "float"
        return "" if getattr(spec, "is_complex", False) else "int"
    code = getattr(spec, "kind", None)  # a numpy dtype: one-letter kind code
    if isinstance(code, str) and code != "":
        return {"f": "float", "i": "int", "u": "int", "b": "int"}.get(code, "")
    if name.startswith("float") or name in _FLOAT_NAMES:
        return "float"
    return "int" if name in _INT_NAMES else ""


_NARROWED = (
    "dtype %s is not supported on the wire; sending as float32. Cast to float32 yourself to "
    "control the rounding."
)


def _to_wire_dtype(spec: Any) -> TensorDtype:
    if isinstance(spec, TensorDtype):
        return spec
    name = _bare_dtype_name(spec)
    exact = TensorDtype._value2member_map_.get(name)
    if exact is not None or name == "half":
        return TensorDtype.FLOAT16 if exact is None else TensorDtype(exact)
    family = _numeric_family(spec, name)
    if family in ("int", "float"):
        if family == "float":
            _log.warning(_NARROWED, name)
        return TensorDtype.INT64 if family == "int" else TensorDtype.FLOAT32
    choices = ", ".join(member.value for member in TensorDtype)
    problem = (
        f"unsupported tensor dtype {name!r}: expected a float or integer dtype (one of "
        f"{choices}, or a numpy/torch dtype convertible to one)"
    )
    raise ValueError(problem)


def _rect_flatten(nested: List[Any]) -> tuple[List[Any], List[int]]:
    """Flatten a rectangular nested list of any depth; returns (values, shape)."""
    dims: List[int] = []
    node: Any = nested
    while isinstance(node, list):
        dims.append(len(node))
        node = node[0] if node else None
    values: List[Any] = []
    todo: List[tuple[int, Any]] = [(0, nested)]  # depth-first, left to right
    while todo:
        depth, node = todo.pop()
        if not isinstance(node, list):
            if depth != len(dims):
                problem = (
                    f"tensor data mixes nesting depths: expected {dims} but found a value "
                    f"{len(dims) - depth} level(s) above the deepest row"
                )
                raise ValueError(problem)
            values.append(node)
        elif depth < len(dims) and len(node) == dims[depth]:
            todo += [(depth + 1, child) for child in reversed(node)]
        else:
            problem = (
                f"tensor data is ragged: expected {dims} but a row at depth {depth} has "
                f"{len(node)} entries; rows must all be the same length"
            )
            raise ValueError(problem)
    return values, dims


class TensorData(_ForbidExtraBase):
    """Numbers with a dtype and an optional shape, e.g. per-token advantages or weights.

    ``data`` may be a list (nested lists are flattened, filling in ``shape``) or anything with
    ``tolist()`` such as a torch tensor or numpy array; such a source is converted only when
    the values are first read or sent, not when the datum is built.
    """

    dtype: TensorDtype = TensorDtype.FLOAT32
    shape: Optional[List[int]] = None

    _data: Optional[List[Any]] = PrivateAttr(default=None)
    _source: Any = PrivateAttr(default=None)
    _flat: bool = PrivateAttr(default=False)

    def __init__(self, data: Any = None, **kwargs: Any) -> None:
        if data is None:  # checked before the fields, as the SDK does
            raise ValueError("TensorData requires 'data'")  # before pydantic sees the fields
        BaseModel.__init__(self, **kwargs)
        listed = isinstance(data, list)
        self._data, self._source = (data, None) if listed else (None, data)

    @property
    def data(self) -> List[Any]:
        """The values, as one flat list."""
        if self._flat:
            return self._data  # type: ignore[return-value]
        values = self._data
        if values is None:
            src = self._source
            if hasattr(src, "tolist"):
                listed = src.tolist()
                values = listed if isinstance(listed, list) else [listed]
            else:
                values = list(src)
        if any(isinstance(v, list) for v in values):
            values, dims = _rect_flatten(values)
            self.shape = dims if self.shape is None else self.shape
        self._data, self._flat = values, True
        return values

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, TensorData):
            same_values = self.data == other.data
            return same_values and (self.dtype, self.shape) == (other.dtype, other.shape)
        unknown: bool = NotImplemented  # the other operand may know how to compare
        return unknown

    @model_serializer(mode="wrap")
    def _dump_with_values(self, handler: Any) -> Dict[str, Any]:
        fields = dict(handler(self))  # fields first: reading ``data`` may then fill ``shape``
        return {**fields, "data": [*self.data]}

    @field_validator("dtype", mode="before")
    @classmethod
    def _any_dtype(cls, dtype: Any) -> Any:
        return dtype if dtype is None else _to_wire_dtype(dtype)

    @classmethod
    def from_any(cls, value: Any) -> "TensorData":
        """A ``TensorData`` from itself, a wire dict, a tensor or array, a list, or any object
        with ``data`` and ``dtype``."""
        return value if isinstance(value, TensorData) else cls._read(value)

    @classmethod
    def _read(cls, source: Any) -> TensorData:
        if isinstance(source, dict):
            spec = source.get("dtype", TensorDtype.FLOAT32)
            return cls(data=source["data"], dtype=_to_wire_dtype(spec), shape=source.get("shape"))
        dims = getattr(source, "shape", None)
        if dims is not None and type(dims) is not list:
            dims = [*dims]
        values = source if hasattr(source, "tolist") else getattr(source, "data", source)
        if not (isinstance(values, list) or hasattr(values, "tolist")):
            values = [*values]
        spec = getattr(source, "dtype", TensorDtype.FLOAT32)
        return cls(data=values, dtype=_to_wire_dtype(spec), shape=dims)

    def tolist(self) -> List[Any]:
        """The values as a flat list."""
        values: List[Any] = self.data
        return values

    def to_torch(self) -> Any:
        """The values as a ``torch.Tensor`` of this dtype and shape (imports torch)."""
        import torch

        tensor = torch.tensor(self.data, dtype=getattr(torch, self.dtype.value))
        return tensor if self.shape is None else tensor.reshape(self.shape)

    def to_numpy(self) -> Any:
        """The values as a ``numpy.ndarray`` (bfloat16 becomes float32: numpy has none)."""
        import numpy

        name = self.dtype.value
        array = numpy.asarray(self.data, dtype=numpy.dtype(name.replace("bfloat16", "float32")))
        return array if self.shape is None else array.reshape(self.shape)

    def _to_api(self) -> Dict[str, Any]:
        values = self.data  # before ``shape`` is read: flattening may set it
        wire: Dict[str, Any] = {"data": values, "dtype": self.dtype.value}
        return wire if self.shape is None else {**wire, "shape": self.shape}


# A bare list under these loss-input names gets this dtype; other names are int64 when every
# value is an int (or bool), else float32. The values alone cannot tell: [0, 1, 1] is both a
# mask and a token list.
_NAMED_INPUT_DTYPES: Dict[str, str] = dict.fromkeys(
    ("weights", "advantages", "logprobs", "old_logprobs", "ref_log_prob", "temperature"),
    TensorDtype.FLOAT32.value,
)
_NAMED_INPUT_DTYPES["target_tokens"] = TensorDtype.INT64.value


def _list_input_to_api(key: str, values: List[Any]) -> Dict[str, Any]:
    """A loss input given as a 1-D or rectangular 2-D list, as a wire TensorData."""
    rows = False
    for kind in set(map(type, values)):  # one issubclass per distinct type, not per value
        rows = rows or issubclass(kind, list)
    flat, dims = _flattened_rows(key, values) if rows else (values, [len(values)])
    dtype = _NAMED_INPUT_DTYPES.get(key) or _dtype_of_values(flat)
    return {"data": flat, "dtype": dtype, "shape": dims}


def _flattened_rows(key: str, values: List[Any]) -> Tuple[List[Any], List[int]]:
    """A rectangular list of rows as one flat list and its ``[rows, columns]`` shape."""
    row_lengths = [len(v) for v in values if isinstance(v, list)]
    if len(row_lengths) < len(values):
        problem = (
            f"loss_fn_inputs[{key!r}] mixes numbers and lists; pass either a flat list of "
            "values or a list of equal-length rows"
        )
        raise ValueError(problem)
    if len(set(row_lengths)) > 1:
        problem = (
            f"loss_fn_inputs[{key!r}] is a ragged nested list (row lengths {sorted(row_lengths)}); "
            "rows must all be the same length"
        )
        raise ValueError(problem)
    flat = [x for row in values for x in row]
    if any(isinstance(x, list) for x in flat):
        problem = (
            f"loss_fn_inputs[{key!r}] nests more than two levels deep; pass a tensor or "
            "a flat list instead"
        )
        raise ValueError(problem)
    return flat, [len(values), row_lengths[0]]


def _dtype_of_values(flat: List[Any]) -> str:
    """int64 when every value is an int (or bool), else float32."""
    integral = bool(flat) and all(isinstance(x, int) for x in flat)
    return TensorDtype.INT64.value if integral else TensorDtype.FLOAT32.value


def _loss_inputs_to_api(loss_fn_inputs: Dict[str, Any]) -> Dict[str, Any]:
    """Every ``loss_fn_inputs`` value in its wire form (a TensorData dict where it can be)."""
    wire: Dict[str, Any] = {}
    for name, given in loss_fn_inputs.items():
        if isinstance(given, list):
            wire[name] = _list_input_to_api(name, given)
        elif isinstance(given, TensorData):
            wire[name] = given._to_api()
        elif (hasattr(given, "tolist") and hasattr(given, "shape")) or (
            not isinstance(given, dict) and hasattr(given, "data") and hasattr(given, "dtype")
        ):
            wire[name] = TensorData.from_any(given)._to_api()
        else:
            wire[name] = given  # an already wire-shaped dict, or a scalar
    return wire


# Kept under the name other modules import.
_serialize_loss_fn_inputs = _loss_inputs_to_api


def _text_chunk(tokens: Any) -> Dict[str, Any]:
    """The wire form of one chunk of token IDs."""
    return {"tokens": tokens, "type": "encoded_text"}


class EncodedTextChunk(_ForbidExtraBase):
    """A run of token IDs: the one chunk type a model input is made of."""

    tokens: List[int]

    @property
    def length(self) -> int:
        """How many tokens the chunk holds."""
        count: int = len(self.tokens)
        return count

    @classmethod
    def from_any(cls, value: Any) -> "EncodedTextChunk":
        """A chunk from itself, a ``ModelInputChunk``, a wire dict, a token list, or an object
        with ``tokens``; text and token-less values raise ``TypeError``."""
        part = value  # unwrapped until it is a chunk, a token list, or refused
        while not isinstance(part, EncodedTextChunk):
            if isinstance(part, str):
                problem = (
                    "a chunk holds token IDs, not text; encode the text with the model's "
                    f"tokenizer first (got {part!r})"
                )
                raise TypeError(problem)
            if isinstance(part, list):
                return cls(tokens=[*part])
            if isinstance(part, dict):
                if "chunk" not in part and "tokens" not in part:
                    raise TypeError(f"chunk dict carries no 'tokens': {part!r}")
                if "chunk" not in part:
                    return cls(tokens=[*part["tokens"]])
                part = part["chunk"]
                continue
            wrapped = getattr(part, "chunk", None)
            if wrapped is not None:
                part = wrapped
                continue
            ids = getattr(part, "tokens", None)
            if ids is None:
                problem = (
                    f"cannot read token IDs from {type(part).__name__}; pass a list of token "
                    "IDs or an EncodedTextChunk"
                )
                raise TypeError(problem)
            return cls(tokens=[*ids])
        return part

    def _to_api(self) -> Dict[str, Any]:
        return _text_chunk(self.tokens)


class ModelInputChunk(_AllowExtraBase):
    """A wrapper around one ``EncodedTextChunk`` (room for other chunk kinds later)."""

    chunk: EncodedTextChunk

    def _to_api(self) -> Dict[str, Any]:
        inner: Dict[str, Any] = self.chunk._to_api()
        return inner


_BOTH_INPUTS = (
    "a {kind} takes either {first} or prompt, not both. Pass {first} for {use}, or prompt for "
    "token IDs or text."
)


def _chunk_to_api(chunk: Any) -> Dict[str, Any]:
    if isinstance(chunk, (EncodedTextChunk, ModelInputChunk)):
        return chunk._to_api()
    return chunk if isinstance(chunk, dict) else EncodedTextChunk.from_any(chunk)._to_api()


class ModelInput(_AllowExtraBase):
    """A model's input: a list of chunks, or a ``prompt`` (token IDs, or text that a client
    tokenizes when the op is submitted). Use it as a ``sample`` prompt or inside a ``Datum``."""

    chunks: Optional[List[Any]] = None
    prompt: Optional[Any] = None

    @model_validator(mode="after")
    def _one_input_only(self) -> "ModelInput":
        both = self.chunks is not None and bool(self.prompt)  # an empty prompt is no input
        if both:
            problem = _BOTH_INPUTS.format(kind="ModelInput", first="chunks", use="pre-built input")
            raise ValueError(problem)
        return self

    @classmethod
    def from_ints(cls, tokens: List[int]) -> "ModelInput":
        """One chunk of the given token IDs."""
        return cls(chunks=[EncodedTextChunk(tokens=[*tokens])])

    @classmethod
    def from_text(cls, text: str) -> "ModelInput":
        """Text, tokenized with the session's tokenizer when the op is submitted."""
        return cls.model_validate({"prompt": text})

    @classmethod
    def empty(cls) -> "ModelInput":
        """An input with no chunks."""
        return cls.model_validate({"chunks": []})

    @classmethod
    def from_any(cls, value: Any) -> "ModelInput":
        """A ``ModelInput`` from itself, a chunk, a wire dict (``chunks``, ``prompt`` or one
        chunk's ``tokens``), a token list, or an object with ``chunks``; other values become
        the ``prompt``."""
        return value if isinstance(value, ModelInput) else cls._read(value)

    @classmethod
    def _read(cls, source: Any) -> ModelInput:
        if isinstance(source, (EncodedTextChunk, ModelInputChunk)):
            return cls(chunks=[EncodedTextChunk.from_any(source)])
        if isinstance(source, list):
            return cls.from_ints(source)
        if not isinstance(source, dict):
            parts = getattr(source, "chunks", None)
            if parts is None:
                return cls(prompt=source)
            return cls(chunks=[EncodedTextChunk.from_any(p) for p in parts])
        parts = source.get("chunks")
        if parts is not None:
            if source.get("prompt"):
                problem = _BOTH_INPUTS.format(
                    kind="ModelInput", first="chunks", use="pre-built input"
                )
                raise ValueError(problem)
            return cls(chunks=[EncodedTextChunk.from_any(p) for p in parts])
        if "prompt" in source:
            return cls(prompt=source["prompt"])
        if "tokens" in source:
            return cls(chunks=[EncodedTextChunk.from_any(source)])
        problem = (
            f"cannot build a model input from a dict with keys {sorted(source)}: pass 'chunks', "
            "'prompt', or a chunk's 'tokens'"
        )
        raise ValueError(problem)

    @property
    def length(self) -> int:
        """The number of tokens (raises ``ValueError`` for untokenized text)."""
        ids = self.to_ints()
        return len(ids)

    def to_ints(self) -> List[int]:
        """All token IDs in order (raises ``ValueError`` when the input is not token IDs)."""
        self._require_tokens("it has no token IDs")
        parts, prompt = self.chunks, self.prompt
        if parts is not None:
            return [t for part in parts for t in EncodedTextChunk.from_any(part).tokens]
        if prompt is None or isinstance(prompt, list):
            return [*(prompt or [])]
        problem = (
            f"this ModelInput holds a prompt of type {type(prompt).__name__}, which is not token "
            "IDs, so it has none to return. Pass token IDs or text."
        )
        raise ValueError(problem)

    def append(self, chunk: Any) -> "ModelInput":
        """A new input with ``chunk`` added at the end; this one is left unchanged."""
        self._require_tokens("there are no chunks to append to")
        parts = [*(self.chunks or [])]
        if not parts and self.prompt is not None:
            parts = [EncodedTextChunk.from_any(self.prompt)]
        return ModelInput(chunks=[*parts, EncodedTextChunk.from_any(chunk)])

    def append_int(self, token: int) -> "ModelInput":
        """A new input with one more token at the end."""
        return self.append([token])

    def _require_tokens(self, consequence: str) -> None:
        if self._pending_text is not None and consequence:
            problem = (
                f"this ModelInput holds text that has not been tokenized yet, so {consequence}."
                " Build it with ModelInput.from_ints(tokenizer.encode(text)) first."
            )
            raise ValueError(problem)

    @property
    def _pending_text(self) -> Optional[str]:
        prompt = self.prompt
        return prompt if isinstance(prompt, str) else None

    def _tokenized_with(self, tokenizer: Any) -> ModelInput:
        pending = self._pending_text
        return self if pending is None else ModelInput.from_ints(tokenizer.encode(pending))

    def _to_api(self) -> Dict[str, Any]:
        prompt, parts = self.prompt, self.chunks
        if parts is not None or prompt is None:
            return {"chunks": [_chunk_to_api(part) for part in parts or []]}
        if isinstance(prompt, list):
            return {"chunks": [_text_chunk(prompt)]}
        untokenized = (
            "this ModelInput holds text that was never tokenized. Submit it through a client "
            "method (which tokenizes for you), or build it from token IDs with "
            "ModelInput.from_ints(...)."
        )
        unreadable = (
            f"cannot build a model input from {type(prompt).__name__}: pass token IDs, text, "
            "or pre-built chunks"
        )
        text = isinstance(prompt, str)
        raise ValueError(untokenized) if text else TypeError(unreadable)


def _refuse_weight(fields: Any) -> None:
    if isinstance(fields, dict) and "weight" in fields:
        problem = (
            "Datum has no 'weight' field. Weight a datum through loss_fn_inputs={'weights': "
            "[...]}, one value per token of model_input, e.g. 0.0 to mask a token out of the "
            "loss."
        )
        raise ValueError(problem)


class Datum(_AllowExtraBase):
    """One training example: ``model_input`` (or the ``prompt`` shorthand: token IDs or
    text) and the per-token ``loss_fn_inputs`` its loss needs (``target_tokens``,
    ``weights``, ``advantages``, ``logprobs``, ...), each as long as the whole input."""

    model_config: ClassVar[ConfigDict] = ConfigDict(protected_namespaces=())

    model_input: Optional[ModelInput] = None
    prompt: Optional[Any] = None
    loss_fn_inputs: Optional[Dict[str, Any]] = None

    @model_validator(mode="after")
    def _one_input_only(self) -> "Datum":
        both = self.model_input is not None and bool(self.prompt)  # "" is no second input
        if both:
            problem = _BOTH_INPUTS.format(kind="Datum", first="model_input", use="chunked input")
            raise ValueError(problem)
        return self

    @model_validator(mode="before")
    @classmethod
    def _no_weight_field(cls, data: Any) -> Any:
        _refuse_weight(data)
        return data

    @classmethod
    def from_any(cls, value: Any) -> "Datum":
        """A ``Datum`` from itself, a model input or chunk, token IDs or text, a wire or
        snake_case dict, or an object with ``model_input``/``prompt``/``loss_fn_inputs``.

        A value carrying none of those raises ``TypeError`` rather than becoming an empty
        datum that would silently drop an example from the batch.
        """
        return value if isinstance(value, Datum) else cls._read(value)

    @classmethod
    def _read(cls, source: Any) -> Datum:
        if isinstance(source, (ModelInput, EncodedTextChunk, ModelInputChunk)):
            return cls(model_input=ModelInput.from_any(source))
        if isinstance(source, (str, list, tuple)):
            return cls(prompt=[*source] if isinstance(source, tuple) else source)
        if isinstance(source, dict):
            inp = source.get("modelInput", source.get("model_input"))
            extra = source.get("lossFnInputs", source.get("loss_fn_inputs"))
            text = source.get("prompt")
            _refuse_weight(source)
            if inp is None and extra is None and text is None:
                keys = sorted(map(str, source))
                problem = (
                    f"cannot read Datum fields from dict with keys {keys}: none of "
                    "'modelInput', 'prompt', 'lossFnInputs' are present (snake_case also "
                    "accepted)."
                )
                raise TypeError(problem)
            fields: Dict[str, Any] = {"prompt": text, "loss_fn_inputs": extra or None}
            if inp is not None:
                fields["model_input"] = ModelInput.from_any(inp)
            return cls(**fields)
        inp = getattr(source, "model_input", None)
        if inp is None and getattr(source, "chunks", None) is not None:
            return cls(model_input=ModelInput.from_any(source))
        extra, text = getattr(source, "loss_fn_inputs", None), getattr(source, "prompt", None)
        if inp is None and extra is None and text is None:
            problem = (
                f"cannot read Datum fields from {type(source).__name__}: none of 'model_input', "
                "'chunks', 'prompt', 'loss_fn_inputs' are present. Pass a Datum, a ModelInput, "
                "a token ID list, text, or a dict."
            )
            raise TypeError(problem)
        if getattr(source, "weight", None) is not None:
            _refuse_weight({"weight": source.weight})
        return cls(
            model_input=None if inp is None else ModelInput.from_any(inp),
            prompt=text,
            loss_fn_inputs=dict(extra) if extra else None,
        )

    @property
    def _pending_text(self) -> Optional[str]:
        prompt, inner = self.prompt, self.model_input
        if isinstance(prompt, str):  # the shorthand holds text
            return str(prompt)
        return None if inner is None else inner._pending_text

    def _tokenized_with(self, tokenizer: Any) -> Datum:
        pending = self._pending_text
        if pending is None:
            return self
        tokens = ModelInput.from_ints(tokenizer.encode(pending))
        return Datum(model_input=tokens, loss_fn_inputs=self.loss_fn_inputs)

    def _to_api(self) -> Dict[str, Any]:
        inner, prompt, extra = self.model_input, self.prompt, self.loss_fn_inputs
        if inner is None and prompt is not None:
            inner = ModelInput.from_any(prompt)
        wire: Dict[str, Any] = {} if inner is None else {"modelInput": inner._to_api()}
        if extra is not None:
            wire["lossFnInputs"] = _loss_inputs_to_api(extra)
        return wire


class LossFunction(str, Enum):
    """The built-in losses: cross_entropy, importance_sampling, ppo, cispo."""

    CROSS_ENTROPY = "cross_entropy"
    IMPORTANCE_SAMPLING = "importance_sampling"
    PPO = "ppo"
    CISPO = "cispo"


def _camel_pairs(model: BaseModel, names: Dict[str, str], required: int) -> Dict[str, Any]:
    """The first ``required`` fields always, the rest when set, under their wire names."""
    wire: Dict[str, Any] = {}
    for i, (field, key) in enumerate(names.items()):
        value = getattr(model, field)
        if i < required or value is not None:
            wire[key] = value
    return wire


_ADAM_WIRE = {
    "learning_rate": "learningRate",
    "beta1": "beta1",
    "beta2": "beta2",
    "eps": "eps",
    "weight_decay": "weightDecay",
    "grad_clip_norm": "gradClipNorm",
    "lora_plus_lr_ratio": "loraPlusLrRatio",
}


class AdamParams(_ForbidExtraBase):
    """Adam settings for ``optim_step``. ``lora_plus_lr_ratio`` (LoRA+) scales the learning
    rate of the B matrices relative to the A matrices; ``grad_clip_norm`` clips by norm."""

    model_config: ClassVar[ConfigDict] = ConfigDict(validate_assignment=True)

    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.01
    grad_clip_norm: Optional[float] = None
    lora_plus_lr_ratio: Optional[float] = None

    @classmethod
    def from_any(cls, value: Any) -> "AdamParams":
        """From itself, a dict, or an object sharing at least one field name (``None`` values
        take the default)."""
        return value if isinstance(value, AdamParams) else _params_from(cls, value)

    def _to_api(self) -> Dict[str, Any]:
        return _camel_pairs(self, _ADAM_WIRE, required=5)


_SAMPLING_WIRE = {
    "max_tokens": "maxTokens",
    "temperature": "temperature",
    "top_p": "topP",
    "top_k": "topK",
    "seed": "seed",
    "stop": "stop",
}


class SamplingParams(_ForbidExtraBase):
    """Generation settings. ``temperature`` ≥ 0 (0 is greedy), ``top_p`` in [0, 1],
    ``top_k`` -1 for off, ``stop`` text sequences (one string is accepted as a list of one).
    The service requires ``max_tokens`` ≥ 512."""

    model_config: ClassVar[ConfigDict] = ConfigDict(validate_assignment=True)

    max_tokens: int = 512
    temperature: Optional[float] = Field(default=None, ge=0)
    top_p: Optional[float] = Field(default=None, ge=0, le=1)
    top_k: Optional[int] = None
    seed: Optional[int] = None
    stop: Optional[List[str]] = None

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_as_list(cls, stop: Any) -> Any:
        token_ids = isinstance(stop, (list, tuple)) and any(isinstance(s, int) for s in stop)
        if token_ids:
            problem = (
                "stop takes text sequences, not token IDs; the service matches stop sequences "
                "on decoded text. Pass the text form instead."
            )
            raise ValueError(problem)
        return [stop] if isinstance(stop, str) else stop

    @classmethod
    def from_any(cls, value: Any) -> "SamplingParams":
        """From itself, a dict, or an object sharing at least one field name (``None`` values
        take the default)."""
        return value if isinstance(value, SamplingParams) else _params_from(cls, value)

    def _to_api(self) -> Dict[str, Any]:
        return _camel_pairs(self, _SAMPLING_WIRE, required=1)


class StopReason(str, Enum):
    """Why a sequence ended: a stop condition, or the token limit."""

    STOP = "stop"
    LENGTH = "length"


class SampledSequence(_ForbidExtraBase):
    """One generated sequence: its tokens, why it stopped, and logprobs when available."""

    stop_reason: StopReason
    tokens: List[int]
    logprobs: Optional[List[float]] = None

    @classmethod
    def _from_api(cls, raw: Dict[str, Any]) -> SampledSequence:
        reason = StopReason(raw["stopReason"])
        return cls(stop_reason=reason, tokens=raw["tokens"], logprobs=raw.get("logprobs"))


class TokenLogprob(_ForbidExtraBase):
    """A candidate token and its log probability."""

    token_id: int
    logprob: float

    @classmethod
    def _from_api(cls, raw: Dict[str, Any]) -> TokenLogprob:
        token, logprob = raw["tokenId"], raw["logprob"]
        return cls(token_id=token, logprob=logprob)


class _OperationResult(_ForbidExtraBase):
    """Base of the op results: keeps the raw ``operationResult`` and reads from it."""

    _raw: Dict[str, Any] = PrivateAttr(default_factory=dict)

    @classmethod
    def _from_api(cls, raw: Dict[str, Any]) -> Any:
        made = cls()
        made._raw = raw
        return made

    def _section(self, *names: str) -> Dict[str, Any]:
        found = next((name for name in names if name in self._raw), None)
        return {} if found is None else (self._raw[found] or {})


class ForwardBackwardOutput(_OperationResult):
    """The outcome of ``forward_backward`` or ``forward``."""

    @property
    def metrics(self) -> Dict[str, float]:
        """Scalar metrics of the pass (``loss``, ``actor/*`` mirrors, token and FLOP counts)."""
        return self._section("forward", "forwardBackward").get("metrics", {})

    @property
    def loss_fn_outputs(self) -> Optional[List[Dict[str, Any]]]:
        """Per-datum loss outputs (``actor/*`` keys), one entry per datum, if returned."""
        return self._section("forward", "forwardBackward").get("lossFnOutputs")


class OptimStepResponse(_OperationResult):
    """The outcome of ``optim_step``."""

    @property
    def metrics(self) -> Dict[str, float]:
        """Optimizer-step metrics such as the learning rate used."""
        return self._section("optimizerStep").get("metrics", {})


class SaveStateResponse(_OperationResult):
    """The outcome of ``save_state``."""

    @property
    def model_package_arn(self) -> Optional[str]:
        """The ARN of the CHECKPOINT package the save registered."""
        return self._section("saveState").get("modelPackageArn")


class SaveWeightsResponse(_OperationResult):
    """The outcome of ``save_weights_for_sampler``."""

    @property
    def model_package_arn(self) -> Optional[str]:
        """The ARN of the MODEL package the save registered."""
        return self._section("saveWeights").get("modelPackageArn")


class LoadStateResponse(_OperationResult):
    """The outcome of ``load_state`` / ``load_state_with_optimizer``: resolving is the news."""


class SampleResponse(_ForbidExtraBase):
    """The outcome of ``sample``: the sequences, and prompt logprobs when asked for."""

    sequences: List[SampledSequence]
    prompt_logprobs: Optional[List[float]] = None
    topk_prompt_logprobs: Optional[List[List[TokenLogprob]]] = None

    @classmethod
    def _from_api(cls, raw: Dict[str, Any]) -> SampleResponse:
        top = raw.get("topkPromptLogprobs")
        return cls(
            sequences=[SampledSequence._from_api(seq) for seq in raw.get("sequences") or []],
            prompt_logprobs=raw.get("promptLogprobs", None),
            topk_prompt_logprobs=(
                [[TokenLogprob._from_api(t) for t in row] for row in top] if top else None
            ),
        )
