"""``stop=None`` and ``stop=[]`` through the unmodified ``tinker`` SDK (0.38 semantics):
``None`` keeps the implicit end-of-sequence stop, ``[]`` turns off every stop token, EOS
included, so generation runs to ``max_tokens``.

A model that reaches EOS is made by training the tiny model to put its EOS id (258,
``<|im_end|>``) after a one-token prompt until greedy decoding draws it first.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
types = tinker.types

EOS = 258
PROMPT = [257, 65]


@pytest.fixture
def sc(localsession_tinker: Any) -> Iterator[Any]:
    client = tinker.ServiceClient()
    yield client
    client.close("success").result()


def test_stop_none_ends_at_eos_and_empty_stop_runs_to_max_tokens(sc: Any) -> None:
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4, seed=0).result()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(PROMPT),
        loss_fn_inputs={"target_tokens": [65, EOS], "weights": [0.0, 1.0]},
    )
    for _ in range(60):  # until EOS is the likeliest next token, by a margin
        out = tc.forward_backward([datum], "cross_entropy").result()
        if out.loss_fn_outputs[0]["logprobs"].tolist()[1] > math.log(0.9):
            break
        tc.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    else:
        pytest.fail("training never made EOS the likeliest token after the prompt")
    sampler = tc.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(PROMPT)

    def greedy(stop: Any) -> Any:
        params = types.SamplingParams(max_tokens=8, temperature=0.0, stop=stop)
        return sampler.sample(prompt, num_samples=1, sampling_params=params).result().sequences[0]

    implicit = greedy(None)
    assert (implicit.tokens, implicit.stop_reason) == ([EOS], "stop")
    unstopped = greedy([])
    assert unstopped.stop_reason == "length"
    assert len(unstopped.tokens) == 8 and unstopped.tokens[0] == EOS
