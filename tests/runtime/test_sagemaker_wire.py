"""The SageMaker wire form of a typed ``sample`` result carries every score it was asked for.

``runtime/sagemaker_wire.py`` is the one writer of these keys (engines return typed values),
so each typed field of ``SampleResult`` / ``SampledSequence`` must come out under its wire
key, and a field left unset must leave its key out.
"""

from __future__ import annotations

from localsession.port_results import PromptAltTokens, SampledSequence, SampleResult, TopLogprob
from localsession.runtime.sagemaker_wire import result_body


def test_every_sample_score_is_written_under_its_wire_key() -> None:
    seq = SampledSequence(
        [5, 6], [-0.5, -1.25], "length", [[TopLogprob(5, -0.5)], [TopLogprob(7, -0.75)]]
    )
    result = SampleResult(
        [seq],
        prompt_logprobs=[0.0, -2.0, -3.0],
        topk_prompt_logprobs=[[], [TopLogprob(9, -1.5)], [TopLogprob(4, -2.5)]],
        target_prompt_logprobs=[[None, -2.0], [-3.0, -4.5]],
        prompt_alt_tokens=PromptAltTokens([[1, 2], [3, 4]], [[-0.25, -1.0], [-2.0, -0.5]]),
        prompt_tokens=3,
    )
    assert result_body(result) == {
        "sequences": [
            {
                "stopReason": "length",
                "tokens": [5, 6],
                "logprobs": [-0.5, -1.25],
                "tokenUsage": {"prefill": 3, "decode": 2},
                "topkLogprobs": [
                    [{"tokenId": 5, "logprob": -0.5}],
                    [{"tokenId": 7, "logprob": -0.75}],
                ],
            }
        ],
        "promptLogprobs": [0.0, -2.0, -3.0],
        "topkPromptLogprobs": [
            [],
            [{"tokenId": 9, "logprob": -1.5}],
            [{"tokenId": 4, "logprob": -2.5}],
        ],
        "targetPromptLogprobs": [[None, -2.0], [-3.0, -4.5]],
        "promptAltTokens": {"tokens": [[1, 2], [3, 4]], "logprobs": [[-0.25, -1.0], [-2.0, -0.5]]},
    }


def test_scores_not_asked_for_leave_their_keys_out() -> None:
    body = result_body(SampleResult([SampledSequence([1], [-0.5], "stop")], prompt_tokens=2))
    assert body == {
        "sequences": [
            {
                "stopReason": "stop",
                "tokens": [1],
                "logprobs": [-0.5],
                "tokenUsage": {"prefill": 2, "decode": 1},
            }
        ]
    }
