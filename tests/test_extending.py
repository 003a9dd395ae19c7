"""docs/extending.md's checklists, held to the code.

- **A new engine**, added through exactly the page's five steps: a toy engine (a learnable
  unigram over the byte vocabulary, pure Python) implements the port, reads its one setting
  from ``spec.options``, is made by a factory, is wired with ``wiring.build_service`` and a
  listed catalog, and is driven by the real in-process client. Its losses, gradients, AdamW
  step, seeded samples and logprobs are checked against closed forms computed here.
- **A new loss**, added through exactly the page's steps: a toy loss (``ℓ = -w·A·lp``, cross
  entropy weighted by each token's advantage) named in the vocabulary's tables (step 1),
  given its elementwise tensor function in ``numerics.losses.ELEMENTWISE`` (step 2) and its
  per-token function in the light fake's ``light_math.TOKEN_LOSSES`` (step 3), each by
  monkeypatch (the page's edits, undone after the test), and checked against its closed form
  through the real client on the torch engine and on the light fake (step 4). And every
  built-in loss is registered at each point the checklist names (vocab tables, its own
  ``ELEMENTWISE`` entry, the light fake, the semantics table), so a loss added without one
  of the steps fails here.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fakes.tokenizer import ByteTokenizer
from localsession import AdamParams, Datum, ModelInput, SamplingParams, ServiceClient, vocab
from localsession.port import (
    AdamHyperparams,
    EngineInputError,
    EngineSpec,
    LossConfig,
    SampleRequest,
    TrainingDatum,
)
from localsession.port_results import (
    DatumOutput,
    ForwardResult,
    OptimResult,
    SampledSequence,
    SampleResult,
)
from localsession.runtime.config import ServiceConfig

ROOT = Path(__file__).resolve().parent.parent
ROLE = "arn:aws:iam::000000000000:role/localsession-tests"
V = 16  # the toy's vocabulary: token ids 0..15


# -- a new engine, step 1: implement the Engine protocol ------------------------------------


class UnigramEngine:
    """log p(t | anything) = theta_t - logsumexp(theta): one learnable logit per token."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        # step 2: settings come from the spec's EngineOptions, never the environment
        self.snapshot_budget = spec.options.snapshot_cache_bytes
        self.theta = [0.0] * V
        self.grad = [0.0] * V
        self.m, self.v, self.steps = [0.0] * V, [0.0] * V, 0

    def _logprobs(self, theta: Sequence[float]) -> list[float]:
        top = max(theta)
        norm = top + math.log(sum(math.exp(x - top) for x in theta))
        return [x - norm for x in theta]

    def forward_backward(
        self,
        datums: Sequence[TrainingDatum],
        loss_fn: str,
        loss_fn_config: LossConfig | None,
        *,
        backward: bool,
    ) -> ForwardResult:
        if loss_fn != vocab.LossFunction.CROSS_ENTROPY:
            raise EngineInputError(f"the unigram engine runs cross_entropy only, not {loss_fn}")
        lp = self._logprobs(self.theta)
        p = [math.exp(x) for x in lp]
        outputs, tokens = [], 0
        for d in datums:
            targets = [int(t) for t in d.loss_fn_inputs["target_tokens"]]
            weights = [float(w) for w in d.loss_fn_inputs["weights"]]
            if any(not 0 <= t < V for t in targets):
                raise EngineInputError(f"a target token is outside 0..{V - 1}")
            row = [lp[t] for t in targets]
            outputs.append(DatumOutput(row, [-w * x for w, x in zip(weights, row, strict=True)]))
            tokens += len(d.tokens)
            if backward:  # d(-sum w lp_t)/d theta_j = sum w (p_j - [j = t])
                for t, w in zip(targets, weights, strict=True):
                    for j in range(V):
                        self.grad[j] += w * (p[j] - (1.0 if j == t else 0.0))
        loss = sum(sum(o.elementwise_loss) for o in outputs) / len(outputs)
        metrics = {vocab.Metric.LOSS: loss, vocab.Metric.GLOBAL_TOKEN_NUM: float(tokens)}
        return ForwardResult(metrics, outputs)

    def optim_step(self, adam_params: AdamHyperparams) -> OptimResult:
        adam_params.check()
        hp, self.steps = adam_params, self.steps + 1
        for j in range(V):
            g = self.grad[j]
            self.m[j] = hp.beta1 * self.m[j] + (1 - hp.beta1) * g
            self.v[j] = hp.beta2 * self.v[j] + (1 - hp.beta2) * g * g
            m_hat = self.m[j] / (1 - hp.beta1**self.steps)
            v_hat = self.v[j] / (1 - hp.beta2**self.steps)
            self.theta[j] -= hp.learning_rate * m_hat / (math.sqrt(v_hat) + hp.eps)
        norm = math.sqrt(sum(g * g for g in self.grad))
        self.grad = [0.0] * V
        return OptimResult(
            {vocab.Metric.LEARNING_RATE: hp.learning_rate, vocab.Metric.GRAD_NORM: norm}
        )

    def _theta_of(self, weights: str | None) -> list[float]:
        if weights is None:
            return [0.0] * V
        return list(json.loads((Path(weights) / "unigram.json").read_text())["theta"])

    def sample(self, weights: str | None, requests: list[SampleRequest]) -> list[SampleResult]:
        lp = self._logprobs(self._theta_of(weights))
        results = []
        for r in requests:
            rng = random.Random(r.seed)
            sequences = []
            for _ in range(r.num_samples):
                drawn = rng.choices(range(V), weights=[math.exp(x) for x in lp], k=r.max_tokens)
                sequences.append(SampledSequence(drawn, [lp[t] for t in drawn], "length"))
            results.append(SampleResult(sequences))
        return results

    def compute_logprobs(self, weights: str | None, tokens: list[int]) -> list[float | None]:
        lp = self._logprobs(self._theta_of(weights))
        return [None, *(lp[t] for t in tokens[1:])]

    def save_package(self, directory: str, *, include_optimizer: bool, merge_weights: bool) -> None:
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        (target / "unigram.json").write_text(json.dumps({"theta": self.theta}))

    def load_package(self, directory: str, *, load_optimizer: bool) -> None:
        self.theta, self.grad = self._theta_of(directory), [0.0] * V

    def get_tokenizer(self) -> Any:
        return ByteTokenizer()

    def close(self) -> None:
        pass


# -- step 3: a factory; step 4: wire it in the composition root ------------------------------


def unigram_factory(spec: EngineSpec) -> UnigramEngine:
    return UnigramEngine(spec)


@pytest.fixture
def service(tmp_path: Path) -> Any:
    from localsession import wiring
    from localsession.engine_options import EngineOptions

    config = ServiceConfig(
        home=tmp_path,
        engine_factory=unigram_factory,
        engine_options=EngineOptions(snapshot_cache_mb=3.0),
    )
    catalog = wiring.listed_catalog(["toy/unigram"], accept_any=False, write_tokenizers=False)
    built = wiring.build_service(config, catalog=catalog)
    yield built
    built.close()


# -- step 5: drive it with the real client ---------------------------------------------------


def _datum(targets: list[int]) -> Datum:
    return Datum(
        model_input=ModelInput.from_ints([1] * len(targets)),
        loss_fn_inputs={"target_tokens": targets, "weights": [1.0] * len(targets)},
    )


def test_a_toy_engine_added_through_the_documented_steps(service: Any) -> None:
    client = ServiceClient("us-west-2", role_arn=ROLE, backend=service, strict=False)
    tc = client.create_lora_training_client("toy/unigram", rank=4)
    engine = service.session(tc.training_session_name).engine
    assert isinstance(engine, UnigramEngine) and engine.snapshot_budget == 3 * 2**20

    # uniform start: every logprob is -log V, so a datum's loss is its token count x log V
    batch = [_datum([3, 3, 5]), _datum([3])]
    out = tc.forward_backward(batch, "cross_entropy").result()
    assert out.metrics["loss"] == pytest.approx((3 + 1) * math.log(V) / 2)
    assert out.loss_fn_outputs[0]["logprobs"]["data"] == pytest.approx([-math.log(V)] * 3)

    # AdamW's first step moves each logit by -lr * sign(gradient) (bias-corrected m/sqrt(v))
    step = tc.optim_step(AdamParams(learning_rate=0.1, eps=1e-12)).result()
    grads = [4 / V - (3 if j == 3 else 1 if j == 5 else 0) for j in range(V)]  # sum w (p - 1)
    assert step.metrics["grad_norm"] == pytest.approx(math.sqrt(sum(g * g for g in grads)))
    assert engine.theta == pytest.approx([-0.1 * math.copysign(1.0, g) for g in grads])

    # the saved weights sample and score with the closed form of the stepped logits
    sampler = tc.save_weights_and_get_sampling_client()
    theta = [-0.1 * math.copysign(1.0, g) for g in grads]
    norm = math.log(sum(math.exp(x) for x in theta))
    scored = sampler.compute_logprobs(ModelInput.from_ints([0, 3, 7])).result()
    assert scored == pytest.approx([None, theta[3] - norm, theta[7] - norm])
    params = SamplingParams(max_tokens=6, seed=11)
    first = sampler.sample(ModelInput.from_ints([1]), num_samples=2, sampling_params=params)
    again = sampler.sample(ModelInput.from_ints([1]), num_samples=2, sampling_params=params)
    seqs = first.result().sequences
    assert [s.tokens for s in seqs] == [s.tokens for s in again.result().sequences]
    assert all(len(s.tokens) == 6 and all(0 <= t < V for t in s.tokens) for s in seqs)

    # what the engine refuses reaches the caller as the op's error, the session unharmed
    rl = Datum(
        model_input=ModelInput.from_ints([1]),
        loss_fn_inputs={
            "target_tokens": [2],
            "weights": [1.0],
            "logprobs": [-1.0],
            "advantages": [1.0],
        },
    )
    with pytest.raises(Exception, match="cross_entropy only"):
        tc.forward_backward([rl], "importance_sampling").result()
    again = tc.forward_backward([_datum([3])], "cross_entropy").result()  # still serving
    assert again.metrics["loss"] == pytest.approx(-(theta[3] - norm))
    tc.stop()


# -- a new loss: every built-in one is registered at each step of the checklist --------------

#: One batch row where every loss differs: lp, the sampler's q, advantages, weights.
LP, Q, ADV, W = (
    [-1.0, -2.0, -0.3, -0.8],
    [-1.2, -1.5, -0.3, -2.5],
    [0.5, -1.0, 2.0, 1.5],
    [
        1.0,
        1.0,
        0.5,
        1.0,
    ],
)


def _numerics_terms(loss: str) -> list[float]:
    import torch

    from localsession.numerics import losses
    from localsession.numerics.inputs import ClipConfig

    inputs = losses.LossInputs(
        weights=torch.tensor([W]),
        sampler_logprobs=torch.tensor([Q]),
        advantages=torch.tensor([ADV]),
    )
    clip = ClipConfig(*vocab.DEFAULT_CLIP[loss])
    return losses.loss_terms(loss, torch.tensor([LP]), inputs, clip)[0].tolist()  # [1, T] -> [T]


@pytest.mark.parametrize("loss", list(vocab.LOSS_FUNCTIONS))
def test_every_loss_follows_the_loss_checklist(loss: str) -> None:
    from fakes import light_math
    from localsession.numerics.inputs import ClipConfig

    # step 1: the vocabulary's tables
    assert loss in vocab.REQUIRED_INPUT_KEYS and loss in vocab.DEFAULT_CLIP
    # step 2: its own entry of the tensor functions: no other loss gives its terms here
    from localsession.numerics import losses

    assert loss in losses.ELEMENTWISE and loss in light_math.TOKEN_LOSSES
    terms = _numerics_terms(loss)
    for other in vocab.LOSS_FUNCTIONS:
        if other != loss:
            assert _numerics_terms(other) != pytest.approx(terms), (loss, other)
    # step 3: the light fake computes the same terms, token by token
    clip = ClipConfig(*vocab.DEFAULT_CLIP[loss])
    light = [
        light_math.token_loss(loss, lp, {"weights": w, "advantages": a, "logprobs": q}, clip)[0]
        for lp, q, a, w in zip(LP, Q, ADV, W, strict=True)
    ]
    assert light == pytest.approx(terms, rel=1e-6, abs=1e-7)
    # step 4: the semantics table lists it
    semantics = (ROOT / "docs" / "semantics.md").read_text(encoding="utf-8")
    assert f"| `{loss}` |" in semantics


# -- a new loss, added through exactly the page's steps --------------------------------------

TOY = "advantage_weighted"
TINY = "localsession/tiny"


def _toy_terms(lp_BT: Any, x: Any, clip: Any) -> Any:
    """Step 2: ℓ = -w·A·lp, ``[B, T]`` in, ``[B, T]`` out (``x``: the batch's LossInputs)."""
    return -x.weights * x.advantages * lp_BT


def _toy_token(lp: float, inputs: dict[str, float], clip: Any) -> tuple[float, float, float]:
    """Step 3: one token's (ℓ, dℓ/dlp, clipped)."""
    w, a = inputs["weights"], inputs["advantages"]
    return -w * a * lp, -w * a, 0.0


@pytest.fixture
def toy_loss(monkeypatch: pytest.MonkeyPatch) -> str:
    from fakes import light_math
    from localsession.client import training_client
    from localsession.numerics import losses

    # step 1: name it (the vocabulary's tables); not a policy-gradient loss, so not RL_LOSSES
    monkeypatch.setattr(vocab, "LOSS_FUNCTIONS", (*vocab.LOSS_FUNCTIONS, TOY))
    needs = ("target_tokens", "weights", "advantages")
    monkeypatch.setitem(vocab.REQUIRED_INPUT_KEYS, TOY, needs)
    monkeypatch.setitem(vocab.DEFAULT_CLIP, TOY, (0.0, 10.0))
    # step 2: the math; step 3: the light fake
    monkeypatch.setitem(losses.ELEMENTWISE, TOY, _toy_terms)
    monkeypatch.setitem(light_math.TOKEN_LOSSES, TOY, _toy_token)
    # the SDK sends only the names of its own enum, the service's: its next release, once
    # the service names the loss, knows it too
    monkeypatch.setattr(training_client, "_LOSS_NAMES", training_client._LOSS_NAMES | {TOY})
    return TOY


def _toy_batch(weighted: bool) -> list[Datum]:
    """Two datums of different lengths; ``weighted``: cross_entropy's datums whose weights
    are the toy's w·A (the same gradient, by the chain rule through lp)."""
    rows = [([5, 9, 14, 3, 7], [1.0, 0.5, 0.0, 1.0, 2.0], [1.5, -1.0, 3.0, 0.5, -0.25])]
    rows.append(([2, 11, 6], [1.0, 1.0, 1.0], [0.75, 2.0, -1.5]))
    batch = []
    for tokens, w, a in rows:
        if weighted:
            inputs: dict[str, Any] = {"weights": [x * y for x, y in zip(w, a, strict=True)]}
        else:
            inputs = {"weights": w, "advantages": a}
        inputs["target_tokens"] = [*tokens[1:], 1]
        batch.append(Datum(model_input=ModelInput.from_ints(tokens), loss_fn_inputs=inputs))
    return batch


def _check_closed_form(out: Any, batch: list[Datum]) -> None:
    """Each datum's elementwise loss is -w·A·lp of its own logprobs; ``loss`` their mean sum."""
    sums = []
    for datum, got in zip(batch, out.loss_fn_outputs, strict=True):
        lp = got["logprobs"]["data"]
        w, a = datum.loss_fn_inputs["weights"], datum.loss_fn_inputs["advantages"]
        want = [-x * y * z for x, y, z in zip(w, a, lp, strict=True)]
        assert got["elementwise_loss"]["data"] == pytest.approx(want, rel=1e-6, abs=1e-7)
        sums.append(math.fsum(want))
    assert out.metrics["loss"] == pytest.approx(sum(sums) / len(sums), rel=1e-6)


@pytest.mark.slow  # ~20 s on a busy 2-core machine; the fakes' twin below runs by default
def test_a_toy_loss_added_through_the_documented_steps(toy_loss: str, tmp_path: Path) -> None:
    from localsession import wiring

    built = wiring.build_service(ServiceConfig(home=tmp_path, gap_timeout=0.0))
    try:
        client = ServiceClient("us-west-2", role_arn=ROLE, backend=built, strict=False)
        toy = client.create_lora_training_client(TINY, rank=4, seed=3)
        ce = client.create_lora_training_client(TINY, rank=4, seed=3)
        out = toy.forward_backward(_toy_batch(False), toy_loss).result()
        _check_closed_form(out, _toy_batch(False))
        # the gradient: cross_entropy with weights w·A at the same weights has the same one
        same = ce.forward_backward(_toy_batch(True), "cross_entropy").result()
        for a, b in zip(out.loss_fn_outputs, same.loss_fn_outputs, strict=True):
            assert a["elementwise_loss"]["data"] == pytest.approx(b["elementwise_loss"]["data"])
        adam = AdamParams(learning_rate=1e-2)
        norms = [tc.optim_step(adam).result().metrics["grad_norm"] for tc in (toy, ce)]
        assert norms[0] > 0 and norms[0] == pytest.approx(norms[1], rel=1e-5)
        after = [tc.forward(_toy_batch(True)).result().loss_fn_outputs for tc in (toy, ce)]
        moved = after[0][0]["logprobs"]["data"]
        assert moved != pytest.approx(out.loss_fn_outputs[0]["logprobs"]["data"], abs=1e-4)
        for a, b in zip(*after, strict=True):
            assert a["logprobs"]["data"] == pytest.approx(b["logprobs"]["data"], abs=1e-5)
        # a datum without the loss's inputs is refused, naming the key
        bare = [
            Datum(
                model_input=ModelInput.from_ints([5, 9]),
                loss_fn_inputs={"target_tokens": [9, 1], "weights": [1.0, 1.0]},
            )
        ]
        with pytest.raises(Exception, match="advantages"):
            toy.forward_backward(bare, toy_loss).result()
        toy.stop()
        ce.stop()
    finally:
        built.close()


@pytest.mark.parametrize("numerics", [False, True], ids=["light", "numeric"])
def test_the_toy_loss_runs_on_the_fakes(toy_loss: str, numerics: bool) -> None:
    """The same closed form on the light fake (step 3's function) and on the numeric fake
    (the bigram model through step 2's tensor function): each a real runtime behind the
    real client."""
    from fakes import FakeServiceClient

    with FakeServiceClient(strict=False, numerics=numerics) as fake:
        tc = fake.create_lora_training_client("fake/model", rank=4)
        batch = _toy_batch(False)
        _check_closed_form(tc.forward_backward(batch, toy_loss).result(), batch)
