"""The metric names users read (``vocab.Metric``): one enum, each with its Tinker reduction.

- The Tinker names are the ones the hosted service and the SDK's cookbook read (a table
  written out here, not derived from the enum): counts and FLOP figures ``:sum``, the rest
  ``:mean``.
- The Tinker serialiser reports each runtime metric under that name, ``loss:sum`` as the
  sum of the elementwise losses, leaves the two per-datum loss means out, and reports a
  custom loss's own metric as a mean unless it names its reduction.
- Every metric the fakes' engine and the shared numerics emit is a member (so a new metric
  name fails here until it is added), and the vocabulary rule (tests/test_layout.py) finds
  a metric name written as a literal outside vocab.py.
"""

from __future__ import annotations

from pathlib import Path

from localsession import vocab
from localsession.port_results import DatumOutput, ForwardResult
from localsession.server.tinker.results import fwd_metrics

#: What Tinker calls each metric (its ``name:reduction``), written out independently.
TINKER_NAMES = {
    "loss": "loss:sum",
    "actor/pg_loss": "actor/pg_loss:mean",
    "actor/grad_norm": "actor/grad_norm:mean",
    "actor/pg_clipfrac": "actor/pg_clipfrac:mean",
    "actor/ppo_kl": "actor/ppo_kl:mean",
    "actor/kl_ref": "actor/kl_ref:mean",
    "global_token_num": "global_token_num:sum",
    "estimated_flops": "estimated_flops:sum",
    "promised_flops": "promised_flops:sum",
    "mfu": "mfu:mean",
    "learning_rate": "learning_rate:mean",
    "grad_norm": "grad_norm:mean",
    "num_params_updated": "num_params_updated:mean",
    "surrogate_loss": "surrogate_loss:mean",
}


def test_every_metric_states_its_tinker_reduction() -> None:
    assert {m.value: m.tinker_name for m in vocab.Metric} == TINKER_NAMES
    assert set(vocab.METRIC_REDUCTIONS) == set(vocab.Metric)
    assert set(vocab.METRIC_REDUCTIONS.values()) == {"sum", "mean"}


def test_the_tinker_serialiser_uses_the_stated_reductions() -> None:
    outputs = [
        DatumOutput(logprobs=[-1.0, -2.0], elementwise_loss=[1.0, 2.0]),
        DatumOutput(logprobs=[-0.5], elementwise_loss=[0.5]),
    ]
    metrics = {
        vocab.Metric.LOSS: 1.75,  # per-datum mean: replaced by Tinker's own sum
        vocab.Metric.PG_LOSS: 1.75,
        vocab.Metric.GLOBAL_TOKEN_NUM: 3.0,
        vocab.Metric.ESTIMATED_FLOPS: 1e9,
        vocab.Metric.MFU: 0.25,
        vocab.Metric.ACTOR_GRAD_NORM: 0.5,
        "my_reward": 0.9,  # a custom loss's own metric
        "my_count:sum": 4.0,  # ...that names its reduction
    }
    got = fwd_metrics(ForwardResult(metrics, outputs))
    assert got == {
        "loss:sum": 3.5,
        "global_token_num:sum": 3.0,
        "estimated_flops:sum": 1e9,
        "mfu:mean": 0.25,
        "actor/grad_norm:mean": 0.5,
        "my_reward:mean": 0.9,
        "my_count:sum": 4.0,
    }
    assert all(type(name) is str for name in got)  # plain names on the wire


def test_the_fakes_and_the_numerics_emit_only_members() -> None:
    import fakes

    names = {m.value for m in vocab.Metric}
    with fakes.FakeServiceClient() as client:
        tc = client.create_lora_training_client("localsession/tiny", rank=4)
        datum = {
            "model_input": {"chunks": [{"tokens": [1, 2, 3, 4]}]},
            "loss_fn_inputs": {
                "target_tokens": [2, 3, 4, 5],
                "weights": [1.0] * 4,
                "logprobs": [-1.0] * 4,
                "advantages": [0.5] * 4,
                "ref_log_prob": [-1.1] * 4,
            },
        }
        seen: set[str] = set()
        for loss in vocab.LOSS_FUNCTIONS:
            seen |= set(tc.forward_backward([datum], loss).result().metrics)
        seen |= set(tc.optim_step({"learning_rate": 1e-3}).result().metrics)
    assert seen and seen <= names, seen - names
    assert {"loss", "actor/pg_loss", "actor/ppo_kl", "learning_rate", "grad_norm"} <= seen


def test_the_vocabulary_rule_finds_a_planted_metric_literal(tmp_path: Path) -> None:
    from test_layout import vocabulary_literals, vocabulary_words

    (tmp_path / "localsession").mkdir()
    (tmp_path / "fakes").mkdir()
    (tmp_path / "localsession" / "x.py").write_text(
        'metrics = {"actor/ppo_kl": 0.0}\nok = {vocab.Metric.PPO_KL: 0.0}\n'
    )
    found = vocabulary_literals(tmp_path, vocabulary_words())
    assert found == ["localsession/x.py:1 'actor/ppo_kl' (Metric)"]
