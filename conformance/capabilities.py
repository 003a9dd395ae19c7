"""The capabilities a backend may declare: localsession's local decisions, one name each.

Each names a rule of ``docs/semantics.md`` that the real service leaves open; its description
starts with the section (``§N`` is ``docs/semantics.md#N``). Tests of such a rule carry
``@pytest.mark.requires("<name>")`` and are skipped, with the name, on backends that do not
declare it. An unknown name, in a marker, a backend
declaration or ``--drop-capability``, stops the run (:func:`check_names`).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

CAPABILITIES: dict[str, str] = {
    # The surfaces: every test of suite/ requires the first, of suite_tinker/ the second
    # (plugin.py); a backend answers them from its ``surface``, not its declarations.
    "surface.sagemaker": "SageMaker-only: the sagemaker.train.training_session API, with "
    "model packages in a model-package group, Hub base models, S3 output and ARNs",
    "surface.tinker": "the Tinker API through the unmodified tinker SDK",
    "loss.outputs": "§1 each datum's loss_fn_outputs hold float32 `logprobs` and "
    "`elementwise_loss`, one per position",
    "loss.formulas": "§1 per-token losses: cross_entropy, importance_sampling, ppo, cispo, "
    "with absolute clip bounds (defaults ppo 0.8/1.2, cispo 0.0/4.0)",
    "loss.sum_reduction": "§1 gradients are the plain sum over positions and datums; the `loss` "
    "metric is the mean over datums of each datum's summed loss",
    "loss.rl_metrics": "§1 RL losses report `actor/pg_clipfrac` and `actor/ppo_kl`",
    "loss.temperature_input": "§1 a per-token `temperature` input tempers the trainer's logits",
    "loss.stable_reinforce": "§1 stable_reinforce's objective (Tinker publishes none): "
    "-Σ over sampled positions of sg(min(exp(lp − q_recorded), 2))·A·lp",
    "forward.bit_exact": "§1 forward and forward_backward logprobs agree bit for bit",
    "optim.metrics": "§2 optim_step reports learning_rate, grad_norm (before clipping), "
    "num_params_updated",
    "optim.empty_step_noop": "§2 an optim_step with no accumulated gradient changes nothing",
    "lora.zero_init": "§2 LoRA B starts at zero: a new session scores like the base model",
    "lora.seeded_init": "§2 two sessions created with the same arguments start bit-identical",
    "sampling.reproducible_seeds": "§3 same weights, prompt, params and seed give the same tokens",
    "sampling.seed_streams": "§3 sample i of a request uses the stream seed + i",
    "sampling.stop_inclusive": "§3 returned tokens include the EOS token or the token that "
    "completed a stop string",
    "sampling.tempered_logprobs": "§3 sampled-token logprobs are log-softmax(logits / T)",
    "sampling.prompt_logprobs_zero_first": "§3 prompt_logprobs has one entry per prompt "
    "token, entry 0 is 0.0",
    "sampling.snapshot_weights": "§3 a sampler reads saved packages, never live training weights",
    "sampling.loaded_weights_default": "§3 without an ARN a request uses the package last "
    "loaded by loadWeightsForSampling, else the base model",
    "sampling.batch_invariance": "§3 batching concurrent requests never changes a seeded "
    "request's output",
    "failure.isolated": "§4 a failed op changes no state; later ops run; the session stays Running",
    "stop.skips_queued": "§4 stopping a session ends queued training ops Skipped; completed "
    "results stay readable",
    "sequence.gap_recovery": "§4 a sequence number refused at submit stops blocking later ops "
    "after the gap timeout",
    "session.quota": "§4 creating more than max_sessions sessions fails ResourceLimitExceeded",
    "limits.strict": "§4 a strict client enforces every limit of docs/wire.md#10 with the "
    "SDK's error surface",
    "checkpoint.exact": "§5 load_state restores the saved weights bit for bit",
    "checkpoint.rank_check": "§5 loading a package of another LoRA rank fails the load op",
    "determinism": "§6 a seeded loop (train, sample, save, resume) is bit-identical run to run",
    "accounting.tokens": "§6 BillableTokenUsage counts prefill, sample and training tokens "
    "per operation",
}


#: Capabilities that name what the SDKs and services document: spec, not a local decision.
#: Every backend is checked on them whatever it declares (``--capabilities=none`` too), so a
#: third party running the README's command gets the same checks as a full declaration; the
#: names stay so that markers read as before and ``--drop-capability`` can still skip one
#: explicitly (the report then lists the backend without it).
SPEC: frozenset[str] = frozenset(
    {
        "loss.outputs",  # loss_fn_outputs: logprobs and elementwise_loss per position
        "loss.formulas",  # the documented per-token losses and clip bounds
        "loss.sum_reduction",  # loss values: sums over positions and datums
        "sampling.reproducible_seeds",  # a seed reproduces a sample
        "sampling.snapshot_weights",  # a sampler reads the saved package, not live weights
        "sequence.gap_recovery",  # a refused sequence number stops blocking later ops
    }
)


def check_names(names: Iterable[str], where: str) -> None:
    """Stop the run (``pytest.UsageError``) if any name is not a known capability."""
    unknown = sorted(set(names) - set(CAPABILITIES))
    if unknown:
        raise pytest.UsageError(
            f"{where}: unknown capability {', '.join(map(repr, unknown))}; known capabilities "
            f"are listed in conformance/capabilities.py: {', '.join(sorted(CAPABILITIES))}"
        )
