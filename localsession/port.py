"""The engine port: the seam between the runtime (no torch) and an engine (torch, or the fakes').

A leaf: it imports nothing in the package but ``vocab``, ``port_results`` and
``engine_options`` (the engine's settings, carried on :class:`EngineSpec`), so ``runtime/``,
``engine/``, ``numerics/`` and the fakes all stand on it and none of them on another.

The runtime owns ordering, futures, sessions and limits; an engine owns tensors. Everything
that crosses this seam is plain Python: typed values the runtime parsed once
(:class:`TrainingDatum`, :class:`LossConfig`, :class:`AdamHyperparams`, :class:`SampleRequest`)
going in, typed results (:mod:`localsession.port_results`) coming back, never a wire key, so
the runtime never imports torch, each dialect serialises results its own way, and a fake
engine can stand in for the real one.

Threading contract: the runtime calls ``forward_backward``/``optim_step`` from one training
worker per session, and ``sample``/``compute_logprobs`` from the sampling scheduler. An engine
serialises its own compute (one lock), so a sampling batch never sees a half-applied update.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from localsession import vocab
from localsession.engine_options import EngineOptions
from localsession.port_results import ForwardResult, OptimResult, SampleResult


class EngineConfigError(Exception):
    """The engine cannot start because of a setting, e.g. ``LOCALSESSION_DEVICE``.

    The message names the setting and its fix; the session fails with it, and it is logged
    as one line, without a traceback.
    """


#: The largest finite float32: a step size (learning rate) past it makes the adapter inf.
FLOAT32_MAX = 3.4028234663852886e38

#: ``on_token(sample_index, token_id, logprob)``: called by the engine as each token of a
#: request's sample ``sample_index`` is decoded (streaming); engines that cannot stream
#: never call it, and the final result is authoritative either way.
TokenCallback = Callable[[int, int, float], None]

#: ``admit(check)``: continuous batching. An engine whose ``admits_requests`` is true takes
#: ``sample(..., admit=)`` and calls it between decode steps; it returns requests for the same
#: weights that arrived since, each passed through ``check`` (the engine's validation; a
#: request that fails it is finished by the caller and left out). The engine decodes them in
#: the running batch and returns their responses after the batch's own, in admission order.
Admit = Callable[[Callable[["SampleRequest"], "SampleRequest"]], list["SampleRequest"]]

#: ``admit(check)`` of a batch that mixes weights: an engine whose ``mixes_weights`` is true
#: takes ``sample_mixed(items, admit=)``, ``items`` (weights, request) pairs, and decodes them
#: in one batch, each row with its own adapter. This ``admit`` returns pairs that arrived
#: since for the same session, any weights, each passed through ``check(weights, request)``
#: (which also reads the package: a bad one raises ``EngineInputError`` for that job alone).
MixedAdmit = Callable[
    [Callable[[str | None, "SampleRequest"], "SampleRequest"]],
    list[tuple[str | None, "SampleRequest"]],
]


class EngineInputError(Exception):
    """An operation's inputs are well-formed on the wire but cannot be run.

    Examples: a per-token loss input whose length differs from its datum, a token id outside
    the vocabulary, an unknown ``loss_fn_config`` key. The operation finishes ``Failed`` with
    this message, and the engine guarantees it changed no state (no gradient accumulated).
    Messages name the datum index and the key, and say how to fix it.
    """


@dataclass(frozen=True)
class ProvenanceSpan:
    """One run of a datum's provenance: ``length`` consecutive positions are positions
    ``[offset, offset + length)`` of the named sampled sequence's tokens (``sampled``) or of
    its sampling request's prompt (not ``sampled``)."""

    sequence_id: str
    offset: int
    length: int
    sampled: bool


@dataclass(frozen=True)
class TrainingDatum:
    """One datum of a ``forward``/``forward_backward``, parsed once by the runtime.

    ``tokens``: the ``modelInput`` chunks' token ids, concatenated (ints >= 0, checked).
    ``loss_fn_inputs``: each ``lossFnInputs`` key's ``TensorData.data``, flattened row by
    row, the values as sent (JSON numbers). The structure is the runtime's to check; what
    only the engine can judge (a value per token, the keys a loss needs, finite numbers, ids
    inside the vocabulary, the context length) it checks, failing the op with
    :class:`EngineInputError` ("datum 3: ...").
    """

    tokens: list[int]
    loss_fn_inputs: dict[str, list[Any]] = field(default_factory=dict)
    #: Tinker's provenance (``Datum.with_provenance``), when sent: runs tiling the tokens
    #: and the targets; only the Tinker dialect's ``stable_reinforce`` reads it.
    model_input_spans: tuple[ProvenanceSpan, ...] | None = None
    loss_fn_input_spans: tuple[ProvenanceSpan, ...] | None = None


@dataclass(frozen=True)
class LossConfig:
    """A ``forward``/``forwardBackward``'s ``lossFnConfig``, checked by the runtime.

    Each bound is the absolute ratio bound the caller gave (``clip_low_threshold`` in
    [0, 1], ``clip_high_threshold`` in [1, 10]), or ``None`` for the loss's default
    (``vocab.DEFAULT_CLIP``); see :meth:`bounds`.
    """

    clip_low_threshold: float | None = None
    clip_high_threshold: float | None = None

    def bounds(self, loss_fn: str) -> tuple[float, float]:
        """(low, high) for ``loss_fn``: the bounds given, the loss's defaults for the rest."""
        low, high = vocab.DEFAULT_CLIP[loss_fn]
        given_low, given_high = self.clip_low_threshold, self.clip_high_threshold
        return (low if given_low is None else given_low, high if given_high is None else given_high)


@dataclass(frozen=True)
class AdamHyperparams:
    """One ``optimizerStep``'s AdamW hyperparameters, parsed once by the runtime.

    The fields are the SDK's ``AdamParams`` names (wire keys: ``vocab.ADAM_WIRE_KEYS``) with
    the SDK's defaults; ``grad_clip_norm`` and ``lora_plus_lr_ratio`` are off unless given.
    The runtime checks the structure (known keys, finite numbers, the service's ranges in
    strict mode); an engine checks only what AdamW cannot run with (:meth:`check`), which
    fails the op. The type users build is ``localsession.AdamParams``; this is the port's.
    """

    learning_rate: float = vocab.ADAM_DEFAULTS["learningRate"]
    beta1: float = vocab.ADAM_DEFAULTS["beta1"]
    beta2: float = vocab.ADAM_DEFAULTS["beta2"]
    eps: float = vocab.ADAM_DEFAULTS["eps"]
    weight_decay: float = vocab.ADAM_DEFAULTS["weightDecay"]
    grad_clip_norm: float | None = None
    lora_plus_lr_ratio: float | None = None

    def check(self) -> None:
        """Raise :class:`EngineInputError` for values AdamW cannot run with (a relaxed
        service lets values outside the service's ranges through to here)."""
        problems = []
        if not self.learning_rate >= 0:
            problems.append(f"`learningRate` must be >= 0, got {self.learning_rate}")
        for key, beta in (("beta1", self.beta1), ("beta2", self.beta2)):
            if not 0.0 <= beta < 1.0:
                problems.append(f"`{key}` must be in [0, 1), got {beta}")
        if self.eps <= 0:
            problems.append(f"`eps` must be > 0, got {self.eps}")
        if self.weight_decay < 0:
            problems.append(f"`weightDecay` must be >= 0, got {self.weight_decay}")
        if self.grad_clip_norm is not None and self.grad_clip_norm < 0:
            problems.append(f"`gradClipNorm` must be >= 0, got {self.grad_clip_norm}")
        if self.lora_plus_lr_ratio is not None and self.lora_plus_lr_ratio <= 0:
            problems.append(f"`loraPlusLrRatio` must be > 0, got {self.lora_plus_lr_ratio}")
        elif self.learning_rate >= 0:
            step = self.learning_rate * (self.lora_plus_lr_ratio or 1.0)
            if not step <= FLOAT32_MAX:  # the adapter would be inf after the step
                problems.append(
                    f"the step size (`learningRate` x `loraPlusLrRatio`) {step:g} is past "
                    f"float32's range ({FLOAT32_MAX:.3g}): the adapter would not be finite "
                    "after the step; use a learning rate like 1e-4"
                )
        if problems:
            raise EngineInputError("adam_params: " + "; ".join(problems))


@dataclass(frozen=True)
class SampleRequest:
    """One ``sample`` operation, with the local defaults (docs/semantics.md#3) applied."""

    prompt: list[int]
    num_samples: int = 1
    max_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    #: Sample i uses the stream ``seed + i``. The runtime always fills this in (drawing a
    #: fresh seed when the caller gave none), so an engine never draws its own.
    seed: int = 0
    stop: tuple[str, ...] = ()
    #: Token ids that end a sample the step they are drawn (``stop_reason`` ``"stop"``, the
    #: id kept as the last token), beside EOS and the stop strings. The runtime fills in the
    #: id of a stop string that is one special token (its text decodes to nothing, so the
    #: string could never match); the engine checks each id is inside its vocabulary.
    stop_token_ids: tuple[int, ...] = ()
    #: End a sample at the model's end-of-sequence ids. False (Tinker's ``stop=[]``): no id
    #: ends it, it runs to ``max_tokens`` unless a stop string or stop id matches.
    stop_at_eos: bool = True
    #: Per sampled token, the top-k (id, logprob) of the distribution it was drawn from
    #: (tempered, before top-k / top-p filtering, like ``logprobs``); 0: none.
    topk_sample_logprobs: int = 0
    #: Token ids whose prompt logprobs to return: row i lists the ids scored at prompt
    #: position i + 1 (``len(prompt) - 1`` rows of K); -1 asks nothing. None: none.
    target_prompt_logprobs: tuple[tuple[int, ...], ...] | None = None
    #: k independent draws (with replacement, at ``temperature``, from stream ``seed``) from
    #: the next-token distribution at each prompt position after the first; 0: none.
    prompt_alt_tokens_k: int = 0
    include_prompt_logprobs: bool = False
    topk_prompt_logprobs: int | None = None
    #: streaming hook (see ``TokenCallback``); not part of the request's identity
    on_token: TokenCallback | None = field(default=None, compare=False, repr=False)


#: How a resolved base model is loaded: a built-in model the engine builds itself, a
#: ``from_pretrained`` directory (a local one, or a snapshot in the Hugging Face cache), or a
#: GGUF file the engine converts once into a cached directory.
ModelKind = Literal["builtin", "local", "hf_cache", "gguf"]


@dataclass(frozen=True)
class ResolvedModel:
    """Where a base-model name points, as a model catalog (runtime/models/catalog.py) resolved it.

    ``name`` is the model's canonical name (the id sessions and packages carry, and the
    tokenizer's ``name_or_path``); ``target`` is the built-in id (``kind == "builtin"``), a
    directory ``from_pretrained`` loads (``"local"``, ``"hf_cache"``), or a ``.gguf`` file
    (``"gguf"``). ``hf_id`` is the Hugging Face id of an HF-cache model. ``cache_root`` is
    where a ``"gguf"`` model's converted directory is cached. ``max_context``, set by a model
    map entry, is the context length (prompt plus ``max_tokens``) sessions accept, instead of
    the model's own ``max_position_embeddings``.
    """

    name: str
    kind: ModelKind
    target: str
    hf_id: str | None = None
    cache_root: str | None = None
    max_context: int | None = None


@dataclass
class EngineSpec:
    """What a session asks an engine for: a base model and a LoRA adapter on it.

    ``model`` is the already-resolved base model (the service resolves ``base_model``
    through its catalog); an engine never resolves names itself, except that a spec built
    by hand for a built-in model may leave ``model`` out.
    """

    base_model: str
    rank: int = 32
    alpha: int = 64
    #: Seed for the LoRA initialisation (docs/semantics.md#2: seeded, so equal specs start
    #: bit-identical on one device).
    seed: int = 0
    #: Also put LoRA on the output head (Tinker's ``train_unembed``); with tied embeddings
    #: the adapter changes the head's output only, never the input embedding.
    train_unembed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    model: ResolvedModel | None = None
    #: The engine's settings (``LOCALSESSION_DEVICE`` ...), read once by the wiring; a spec
    #: built by hand runs with the defaults.
    options: EngineOptions = field(default_factory=EngineOptions)


class Engine(Protocol):
    """One session's model: the trainable adapter plus the weights samplers may read.

    Training calls come one at a time, usually from the session's worker thread. An engine
    may also offer ``runs_in_caller()``: True when the calling thread may make them too
    (a caller running its own op, runtime/sessions/runner.py). Without it, they come
    only from the worker.
    """

    def forward_backward(
        self,
        datums: Sequence[TrainingDatum],
        loss_fn: str,
        loss_fn_config: LossConfig | None,
        *,
        backward: bool,
    ) -> ForwardResult:
        """Run the loss over parsed datums; accumulate gradients when ``backward``.

        ``loss_fn`` is one of ``vocab.LOSS_FUNCTIONS``; ``loss_fn_config`` ``None`` means the
        loss's default clip bounds.

        Returns the batch's metrics and one :class:`~localsession.port_results.DatumOutput`
        per datum. Raises :class:`EngineInputError`, with no state change, when the inputs
        cannot be run.
        """
        ...

    def optim_step(self, adam_params: AdamHyperparams) -> OptimResult:
        """Apply and zero the accumulated gradients with AdamW; return the step's metrics.

        Raises :class:`EngineInputError`, with no state change, when ``adam_params.check()``
        does.
        """
        ...

    def sample(self, weights: str | None, requests: list[SampleRequest]) -> list[SampleResult]:
        """Run several sample requests against one set of weights as one batch.

        ``weights`` is ``None`` for the base model, or the directory of a saved package: the
        engine samples that adapter snapshot (loaded lazily, cached), never the live training
        weights. Returns one :class:`~localsession.port_results.SampleResult` per request
        (its ``prompt_tokens`` left 0: the runtime fills it in).
        """
        ...

    def compute_logprobs(self, weights: str | None, tokens: list[int]) -> list[float | None]:
        """Per-token log p(tokens[i] | tokens[:i]) at T = 1; entry 0 is ``None``.

        An engine may also offer ``compute_logprobs_batch(weights, prompts)``: the same for
        several prompts, one list per prompt, the whole call raising if any prompt would. The
        runtime then hands it concurrent calls on the same weights together.
        """
        ...

    def save_package(self, directory: str, *, include_optimizer: bool, merge_weights: bool) -> None:
        """Write the current adapter into ``directory`` (an empty, private temporary dir).

        Always: ``adapter_config.json`` + ``adapter_model.safetensors`` in the layout
        ``peft.PeftModel.from_pretrained(base, directory)`` loads. With ``include_optimizer``:
        ``optimizer.safetensors`` (AdamW moments) + ``optimizer.json`` (step count, last
        hyperparameters). With ``merge_weights``: ``merged/``, a full model and its tokenizer
        that ``AutoModelForCausalLM.from_pretrained`` loads on its own. No pickle. The
        runtime renames the directory into place afterwards, so the engine never writes
        anywhere else. Accumulated gradients are left as they are.
        """
        ...

    def load_package(self, directory: str, *, load_optimizer: bool) -> None:
        """Restore the adapter (and, with ``load_optimizer``, the AdamW state) from a package.

        Zeroes accumulated gradients. Without ``load_optimizer`` the optimizer starts fresh.
        The runtime has already checked base model and rank; a package the engine still
        cannot load raises :class:`EngineInputError` with nothing changed.
        """
        ...

    def get_tokenizer(self) -> Any:
        """The model's tokenizer (a ``transformers`` tokenizer for the torch engine)."""
        ...

    def close(self) -> None:
        """Release the model's memory."""
        ...
