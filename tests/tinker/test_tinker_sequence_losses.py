"""Tinker's ``gspo`` and ``stable_reinforce`` through the unmodified ``tinker`` SDK.

For each: ``loss:sum`` is the formula computed here from the model's own logprobs (GSPO as
Tinker documents it; StableReinforce as docs/semantics.md defines it), and one step's update
equals the one the SDK's client-side ``forward_backward_custom`` makes from the same loss
written in torch (two models with the same seed start equal; after one step each, their
logprobs agree). ``stable_reinforce`` samples with ``record_stability_info=True`` and names
the returned ``sequence_id``s in provenance, as the cookbook's ``rl_loop`` does; unknown ids,
another session's ids and claims that do not match the recording are refused by name."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
torch = pytest.importorskip("torch")
types = tinker.types

TOKENS = [257, 68, 82, 79, 32, 108, 111, 115, 115]
PROMPT = [257, 68, 82, 79, 32]


def _pair(sc: Any, seed: int) -> tuple[Any, Any]:
    """Two training clients that start equal (same seed): one trains server-side, one
    through the SDK's client-side custom-loss path."""

    def make() -> Any:
        return sc.create_lora_training_client(
            base_model="localsession/tiny", rank=4, seed=seed
        ).result()

    return make(), make()


def _ce(model_input: list[int], targets: list[int]) -> Any:
    return types.Datum(
        model_input=types.ModelInput.from_ints(model_input),
        loss_fn_inputs={"target_tokens": targets, "weights": [1.0] * len(targets)},
    )


def _logprobs(tc: Any, model_input: list[int], targets: list[int]) -> list[float]:
    out = tc.forward([_ce(model_input, targets)], "cross_entropy").result()
    return list(out.loss_fn_outputs[0]["logprobs"].tolist())


def _same_update(
    server_side: Any,
    client_side: Any,
    model_input: list[int],
    targets: list[int],
    before: list[float],
) -> None:
    adam = types.AdamParams(learning_rate=1e-2)
    server_side.optim_step(adam).result()
    client_side.optim_step(adam).result()
    a = _logprobs(server_side, model_input, targets)
    b = _logprobs(client_side, model_input, targets)
    assert max(abs(x - y) for x, y in zip(a, before, strict=True)) > 1e-3  # it moved
    assert a == pytest.approx(b, abs=1e-5)


def test_gspo_loss_and_update_match_the_documented_formula(localsession_tinker: Any) -> None:
    sc = tinker.ServiceClient()
    server_side, client_side = _pair(sc, 11)
    model_input, targets = TOKENS[:-1], TOKENS[1:]
    n = len(targets)
    q = [-5.4 + 0.2 * i for i in range(n)]
    adv = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    mask = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    config = {"epsilon_low": 0.2, "epsilon_high": 5.0}
    lp = _logprobs(server_side, model_input, targets)

    def documented(lp_T: Any) -> Any:  # Tinker's GSPO page, line by line
        q_T, a_T, m_T = torch.tensor(q), torch.tensor(adv), torch.tensor(mask)
        log_ratio = (lp_T.detach() - q_T)[m_T != 0].mean()
        ratio = torch.exp(log_ratio + lp_T - lp_T.detach())
        clipped = torch.clamp(ratio, 1 - config["epsilon_low"], 1 + config["epsilon_high"])
        return -torch.minimum(ratio * a_T, clipped * a_T).sum()

    expected = float(documented(torch.tensor(lp)))
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(model_input),
        loss_fn_inputs={
            "target_tokens": targets,
            "logprobs": q,
            "advantages": adv,
            "sequence_ratio_mask": mask,
        },
    )
    out = server_side.forward_backward([datum], "gspo", config).result()
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    assert out.loss_fn_outputs[0]["logprobs"].tolist() == pytest.approx(lp, abs=1e-6)
    custom = client_side.forward_backward_custom(
        [_ce(model_input, targets)], lambda data, lps: (documented(lps[0]), {})
    ).result()
    assert custom.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    _same_update(server_side, client_side, model_input, targets, lp)
    no_mask = types.Datum(
        model_input=types.ModelInput.from_ints(model_input),
        loss_fn_inputs={"target_tokens": targets, "logprobs": q, "advantages": adv},
    )
    with pytest.raises(tinker.BadRequestError, match="sequence_ratio_mask"):
        server_side.forward([no_mask], "gspo").result()
    with pytest.raises(tinker.BadRequestError, match="epsilon_low"):
        server_side.forward([datum], "gspo", {"epsilon_low": -1.0}).result()
    server_side.forward([datum], "gspo").result()  # the refusals released their numbers
    sc.close("success").result()


def _provenanced(prompt: list[int], seq: Any, advantage: float) -> Any:
    """The datum the cookbook's rl_loop builds for one sampled sequence."""
    sampled = list(seq.tokens)
    p = len(prompt)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(prompt + sampled[:-1]),
        loss_fn_inputs={
            "target_tokens": [0] * (p - 1) + sampled,
            "logprobs": [0.0] * (p - 1) + list(seq.logprobs),
            "advantages": [0.0] * (p - 1) + [advantage] * len(sampled),
        },
    )
    sid = seq.sequence_id
    return datum.with_provenance(
        model_input=[
            types.PromptProvenanceSpan(sequence_id=sid, length=p),
            types.SampledProvenanceSpan(sequence_id=sid, length=len(sampled) - 1),
        ],
        loss_fn_inputs=[
            types.PromptProvenanceSpan(sequence_id=sid, offset=1, length=p - 1),
            types.SampledProvenanceSpan(sequence_id=sid, length=len(sampled)),
        ],
    )


def test_stable_reinforce_trains_on_recorded_sequences(localsession_tinker: Any) -> None:
    sc = tinker.ServiceClient()
    server_side, client_side = _pair(sc, 12)
    sampler = server_side.save_weights_and_get_sampling_client(record_stability_info=True).result()
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=5)
    prompt = types.ModelInput.from_ints(PROMPT)
    response = sampler.sample(prompt=prompt, num_samples=2, sampling_params=params).result()
    seqs = response.sequences
    assert len({s.sequence_id for s in seqs}) == 2
    seq = next(s for s in seqs if len(s.tokens) >= 2)
    advantage = 1.5
    datum = _provenanced(PROMPT, seq, advantage)
    model_input = PROMPT + list(seq.tokens)[:-1]
    targets = [0] * (len(PROMPT) - 1) + list(seq.tokens)
    lp = _logprobs(server_side, model_input, targets)
    sampled_from = len(PROMPT) - 1
    q = [0.0] * sampled_from + list(seq.logprobs)

    def objective(lp_T: Any) -> Any:  # docs/semantics.md: -Σ sg(min(r, 2))·A·lp, sampled only
        q_T = torch.tensor(q, dtype=lp_T.dtype)
        sampled = torch.arange(len(q)) >= sampled_from
        rho = torch.clamp(torch.exp(lp_T.detach() - q_T), max=2.0)
        return -(torch.where(sampled, rho * advantage * lp_T, torch.zeros_like(lp_T))).sum()

    expected = float(objective(torch.tensor(lp, dtype=torch.float64)))
    out = server_side.forward_backward([datum], "stable_reinforce").result()
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    custom = client_side.forward_backward_custom(
        [_ce(model_input, targets)], lambda data, lps: (objective(lps[0]), {})
    ).result()
    assert custom.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    _same_update(server_side, client_side, model_input, targets, lp)

    # refusals, each naming the problem; each releases its sequence number
    bad_id = SimpleNamespace(
        sequence_id="no-such-sequence", tokens=list(seq.tokens), logprobs=list(seq.logprobs)
    )
    with pytest.raises(tinker.BadRequestError, match="'no-such-sequence' is unknown"):
        server_side.forward_backward(
            [_provenanced(PROMPT, bad_id, 1.0)], "stable_reinforce"
        ).result()
    plain = types.Datum(model_input=datum.model_input, loss_fn_inputs=datum.loss_fn_inputs)
    with pytest.raises(tinker.BadRequestError, match="needs provenance"):
        server_side.forward_backward([plain], "stable_reinforce").result()
    wrong = list(seq.tokens)
    wrong[-1] = (wrong[-1] + 1) % 300
    forged = SimpleNamespace(sequence_id=seq.sequence_id, tokens=wrong, logprobs=list(seq.logprobs))
    with pytest.raises(tinker.BadRequestError, match="which was"):
        server_side.forward_backward(
            [_provenanced(PROMPT, forged, 1.0)], "stable_reinforce"
        ).result()
    other = tinker.ServiceClient()  # another session may not name this session's sequences
    stranger = other.create_lora_training_client(base_model="localsession/tiny", rank=4).result()
    with pytest.raises(tinker.BadRequestError, match="sampled in session"):
        stranger.forward_backward([datum], "stable_reinforce").result()
    server_side.forward_backward([datum], "stable_reinforce").result()  # still usable
    other.close("success").result()
    sc.close("success").result()


def test_a_sampler_without_record_stability_info_records_nothing(localsession_tinker: Any) -> None:
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4, seed=1).result()
    sampler = tc.save_weights_and_get_sampling_client().result()
    params = types.SamplingParams(max_tokens=4, temperature=1.0, seed=2)
    seq = (
        sampler.sample(
            prompt=types.ModelInput.from_ints(PROMPT), num_samples=1, sampling_params=params
        )
        .result()
        .sequences[0]
    )
    assert seq.sequence_id  # ids are always handed out; only recorded ones train
    with pytest.raises(tinker.BadRequestError, match="record_stability_info=True"):
        tc.forward_backward([_provenanced(PROMPT, seq, 1.0)], "stable_reinforce").result()
    assert not math.isnan(
        tc.forward([_ce(TOKENS[:-1], TOKENS[1:])], "cross_entropy").result().metrics["loss:sum"]
    )
    sc.close("success").result()


def test_an_overflowing_gspo_backward_fails_and_frees_its_number(localsession_tinker: Any) -> None:
    """A sequence ratio of exp(1e4) with a negative advantage (the unclipped side) has an
    infinite loss: the op fails naming it, and the backward's sequence number is released,
    so the next op runs at once instead of waiting out the gap timeout."""
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4, seed=2).result()
    n = len(TOKENS) - 1
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={
            "target_tokens": TOKENS[1:],
            "logprobs": [-1e4] * n,
            "advantages": [-1.0] * n,
            "sequence_ratio_mask": [1.0] * n,
        },
    )
    with pytest.raises(Exception, match="not finite"):
        tc.forward_backward([datum], "gspo").result(timeout=60)
    after = tc.forward([_ce(TOKENS[:-1], TOKENS[1:])], "cross_entropy").result(timeout=20)
    assert math.isfinite(after.metrics["loss:sum"])
    sc.close("success").result()
