"""The unmodified ``tinker`` SDK through the dialect, on the built-in tiny model.

Every test gets ``TINKER_BASE_URL`` from the ``localsession_tinker`` fixture (one loopback
server per test session) and drives only the SDK's public clients. Expected values are
closed forms over what the SDK returns (loss sums, PPO at ratio 1, truncation at a stop id),
or a second run that must agree bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
types = tinker.types

MODEL = "localsession/tiny"
TOKENS = [1, 5, 9, 13, 17, 21, 25, 29, 33]


def sft_datum(tokens: list[int], weights: list[float] | None = None) -> Any:
    """Next-token prediction over ``tokens``."""
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs=dict(
            target_tokens=tokens[1:],
            weights=weights if weights is not None else [1.0] * (len(tokens) - 1),
        ),
    )


def train(tc: Any, steps: int, lr: float = 1e-2) -> list[float]:
    losses = []
    for _ in range(steps):
        fwd = tc.forward_backward([sft_datum(TOKENS)], "cross_entropy")
        opt = tc.optim_step(types.AdamParams(learning_rate=lr))
        losses.append(fwd.result().metrics["loss:sum"])
        opt.result()
    return losses


@pytest.fixture
def sc(localsession_tinker: Any) -> Any:
    client = tinker.ServiceClient()
    yield client
    client.close("success").result()


def test_sft_loop_loss_falls_and_loss_sum_is_the_weighted_nll(sc: Any) -> None:
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4, seed=0).result()
    weights = [0.0, 1.0, 2.0, 1.0, 0.5, 1.0, 1.0, 3.0]
    out = tc.forward([sft_datum(TOKENS, weights)], "cross_entropy").result()
    lp = out.loss_fn_outputs[0]["logprobs"].tolist()
    # closed form: loss:sum = -sum_t w_t * logp_t (Tinker's reported loss)
    assert out.metrics["loss:sum"] == pytest.approx(
        -math.fsum(w * p for w, p in zip(weights, lp, strict=True))
    )
    elementwise = out.loss_fn_outputs[0]["elementwise_loss"].tolist()
    assert elementwise == pytest.approx(
        [-w * p for w, p in zip(weights, lp, strict=True)], rel=1e-6
    )
    losses = train(tc, 8)
    assert losses[-1] < 0.5 * losses[0], losses


def test_rl_step_with_ppo_at_ratio_one_is_minus_the_advantage_sum(sc: Any) -> None:
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4, seed=1).result()
    sampler = tc.save_weights_and_get_sampling_client()
    prompt = [1, 2, 3, 4]
    res = sampler.sample(
        types.ModelInput.from_ints(prompt),
        num_samples=4,
        sampling_params=types.SamplingParams(max_tokens=6, seed=7, temperature=1.0),
    ).result()
    advantages = [1.0, -1.0, 0.5, -0.5]
    datums, expected = [], 0.0
    for seq, adv in zip(res.sequences, advantages, strict=True):
        full = prompt + seq.tokens
        n_prompt = len(prompt) - 1
        weights = [0.0] * n_prompt + [1.0] * len(seq.tokens)
        datums.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(full[:-1]),
                loss_fn_inputs={
                    "target_tokens": full[1:],
                    "weights": weights,
                    "logprobs": [0.0] * n_prompt + list(seq.logprobs or []),
                    "advantages": [0.0] * n_prompt + [adv] * len(seq.tokens),
                },
            )
        )
        expected -= adv * len(seq.tokens)
    out = tc.forward_backward(datums, "ppo").result()
    # the trainer's weights are the sampler's: ratio exp(lp - q) = 1, unclipped, so ℓ = -w·A
    assert out.metrics["loss:sum"] == pytest.approx(expected, abs=1e-3)
    assert len(out.loss_fn_outputs) == 4
    tc.optim_step(types.AdamParams(learning_rate=1e-3)).result()


def test_save_load_and_resume_are_bit_identical(sc: Any) -> None:
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4, seed=2).result()
    train(tc, 2)
    path = tc.save_state("resume-point").result().path
    assert path.endswith("/weights/resume-point")
    after = train(tc, 2)
    resumed = sc.create_training_client_from_state_with_optimizer(path).result()
    assert train(resumed, 2) == after  # weights and Adam moments restored exactly
    weights_only = sc.create_training_client_from_state(path).result()
    first = weights_only.forward([sft_datum(TOKENS)], "cross_entropy").result()
    assert first.metrics["loss:sum"] == after[0]
    tc.load_state(path).result()  # the deprecated in-place load, without the optimizer
    again = tc.forward([sft_datum(TOKENS)], "cross_entropy").result()
    assert again.metrics["loss:sum"] == after[0]


def test_seeded_sampling_is_reproducible_and_stops_at_token_ids(sc: Any) -> None:
    sampler = sc.create_sampling_client(base_model=MODEL)
    prompt = types.ModelInput.from_ints([1, 2, 3])

    def draw(seed: int, stop: Any = None) -> Any:
        params = types.SamplingParams(max_tokens=12, seed=seed, temperature=1.0, stop=stop)
        return sampler.sample(prompt, num_samples=3, sampling_params=params).result()

    a, b = draw(11), draw(11)
    assert [s.tokens for s in a.sequences] == [s.tokens for s in b.sequences]
    assert [s.logprobs for s in a.sequences] == [s.logprobs for s in b.sequences]
    assert len(a.sequences) == 3 and all(len(s.tokens) == 12 for s in a.sequences)
    stop_id = a.sequences[0].tokens[4]
    cut = draw(11, stop=[stop_id]).sequences[0]
    first = a.sequences[0].tokens.index(stop_id)
    assert cut.tokens == a.sequences[0].tokens[: first + 1]
    assert cut.stop_reason == "stop"


def test_prompt_logprobs_topk_and_compute_logprobs_agree_with_forward(sc: Any) -> None:
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4, seed=3).result()
    train(tc, 1)
    sampler = tc.save_weights_and_get_sampling_client()
    fwd = tc.forward([sft_datum(TOKENS)], "cross_entropy").result()
    from_forward = fwd.loss_fn_outputs[0]["logprobs"].tolist()
    computed = sampler.compute_logprobs(types.ModelInput.from_ints(TOKENS)).result()
    assert computed[0] is None
    assert computed[1:] == pytest.approx(from_forward, abs=1e-4)
    res = sampler.sample(
        types.ModelInput.from_ints(TOKENS),
        num_samples=1,
        sampling_params=types.SamplingParams(max_tokens=1, seed=0),
        include_prompt_logprobs=True,
        topk_prompt_logprobs=3,
    ).result()
    assert res.prompt_logprobs[0] is None
    assert res.prompt_logprobs[1:] == pytest.approx(from_forward, abs=1e-4)
    topk = res.topk_prompt_logprobs
    assert topk[0] is None
    for row, actual in zip(topk[1:], from_forward, strict=True):
        assert len(row) == 3 and row[0][1] >= actual - 1e-4
        assert [lp for _, lp in row] == sorted((lp for _, lp in row), reverse=True)


def test_custom_loss_runs_client_side_and_matches_cross_entropy(sc: Any) -> None:
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4, seed=4).result()
    ce = tc.forward([sft_datum(TOKENS)], "cross_entropy").result().metrics["loss:sum"]

    def neg_ll(data: list[Any], logprobs: list[Any]) -> tuple[Any, dict[str, float]]:
        total = sum(
            -(lp * d.loss_fn_inputs["weights"].to_torch()).sum()
            for d, lp in zip(data, logprobs, strict=True)
        )
        return total, {"custom:mean": 1.0}

    out = tc.forward_backward_custom([sft_datum(TOKENS)], neg_ll).result()
    assert out.metrics["loss:sum"] == pytest.approx(ce, rel=1e-5)
    assert out.metrics["surrogate_loss:sum"] == pytest.approx(ce, rel=1e-5)


def test_unimplemented_losses_are_refused_by_name(sc: Any) -> None:
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4).result()
    with pytest.raises(Exception, match="'custom' is not implemented"):
        tc.forward_backward([sft_datum(TOKENS)], "custom").result()
    with pytest.raises(Exception, match="gspo. does not take weights"):  # run, given its inputs
        tc.forward_backward([sft_datum(TOKENS)], "gspo").result()


def test_rest_client_lists_deletes_and_sets_ttl(sc: Any, localsession_tinker: Any) -> None:
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4).result()
    kept = tc.save_state("kept").result().path
    gone = tc.save_weights_for_sampler("gone").result().path
    rest = tinker.RestClient()
    listed = {c.tinker_path for c in rest.list_checkpoints(tc.model_id).result().checkpoints}
    assert {kept, gone} <= listed
    packages = localsession_tinker.service.registry.list("sagemaker-default")
    assert {kept, gone} <= {p.key for p in packages}  # the path is the package's key
    descriptions = {p.description for p in packages}  # `localsession packages list` shows
    assert {f"Tinker checkpoint {kept}", f"Tinker checkpoint {gone}"} <= descriptions
    rest.delete_checkpoint_from_tinker_path(gone).result()
    listed = {c.tinker_path for c in rest.list_checkpoints(tc.model_id).result().checkpoints}
    assert gone not in listed and kept in listed
    rest.set_checkpoint_ttl_from_tinker_path(kept, 3600).result()
    (entry,) = [
        c for c in rest.list_checkpoints(tc.model_id).result().checkpoints if c.tinker_path == kept
    ]
    assert entry.expires_at is not None
    run = rest.get_training_run(tc.model_id).result()
    assert run.base_model == MODEL and run.lora_rank == 4
    assert run.last_checkpoint is not None and run.last_checkpoint.tinker_path == kept


def test_capabilities_list_the_catalog_and_the_tokenizer_loads_offline(sc: Any) -> None:
    names = [m.model_name for m in sc.get_server_capabilities().supported_models]
    assert MODEL in names and "localsession/small" in names
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4).result()
    info = tc.get_info()
    assert info.model_data.model_name == MODEL and info.lora_rank == 4
    tok = tc.get_tokenizer()
    ids = tok.encode("the quick brown fox")
    assert ids and tok.decode(ids).strip().endswith("fox")
