"""The ``localsession_tinker`` fixture with a model map: a mapped name is listed, its
tokenizer is in the offline HF cache before any training client exists (tinker-cookbook's
``sl_loop`` calls ``get_tokenizer(model_name)`` first), and it trains on its target.
"""

from __future__ import annotations

from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
types = tinker.types

ALIAS = "Qwen/Qwen3-4B-Instruct-2507"
pytestmark = pytest.mark.localsession_tinker(model_map={ALIAS: "localsession/tiny"})


def test_a_mapped_name_is_listed_tokenized_offline_and_trains(localsession_tinker: Any) -> None:
    from transformers import AutoTokenizer

    sc = tinker.ServiceClient()
    listed = [m.model_name for m in sc.get_server_capabilities().supported_models]
    assert ALIAS in listed and "localsession/tiny" in listed
    # Before any model exists: the byte-level tiny tokenizer under the alias' id.
    tok = AutoTokenizer.from_pretrained(ALIAS)
    assert tok.encode("hi") == [257, ord("h"), ord("i")]
    assert tok.convert_tokens_to_ids("<|im_end|>") == 258
    tc = sc.create_lora_training_client(base_model=ALIAS, rank=4, seed=0).result()
    assert tc.get_info().model_data.model_name == ALIAS
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([257, 104]),
        loss_fn_inputs={"target_tokens": [104, 105], "weights": [1.0, 1.0]},
    )
    out = tc.forward_backward([datum], "cross_entropy").result()
    logprobs = out.loss_fn_outputs[0]["logprobs"].tolist()
    assert out.metrics["loss:sum"] == pytest.approx(-sum(logprobs), rel=1e-5)
    sc.close("success").result()
