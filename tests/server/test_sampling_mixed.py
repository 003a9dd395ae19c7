"""Multi-adapter batches through the service (issue 56 item 2), in process: concurrent
samples of two packages of one training session, and of another session's base sampler on
the same base, decode as one batch (one decode loop), and each gives what it gives alone.

The batch is made deterministic with the sampler's step hook: a first sample holds the
scheduler's thread until the others are queued, so the next batch takes them all at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from localsession import ServiceClient as LocalServiceClient
from localsession.engine import sampling
from localsession.runtime.events import Phase
from localsession.runtime.service import Service, ServiceConfig
from localsession.wiring import build_service

from .common import GROUP, ROLE, S3

MODEL = "localsession-tiny"
TEXT = [257, *b"the quick brown fox jumps over the lazy dog"]


@pytest.fixture(scope="module")
def local_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    service = build_service(ServiceConfig(home=tmp_path_factory.mktemp("home"), max_sessions=8))
    yield service
    service.close()


def _tokens(result: Any) -> list[tuple[list[int], list[float]]]:
    return [(list(s.tokens), list(s.logprobs)) for s in result.sequences]


@pytest.mark.slow  # two sessions, six training steps and seven sample ops: ~10-25 s
def test_two_packages_and_another_sessions_base_are_one_batch(local_service: Service) -> None:
    import localsession as ls

    svc = LocalServiceClient(
        role_arn=ROLE,
        model_package_group_arn=GROUP,
        s3_output_path=S3,
        backend=local_service,
        strict=False,  # 16-token samples (the service's floor is 512)
    )
    datum = ls.Datum(
        model_input=ls.ModelInput.from_ints(TEXT[:-1]),
        loss_fn_inputs={"target_tokens": TEXT[1:], "weights": [1.0] * (len(TEXT) - 1)},
    )
    params = ls.SamplingParams(max_tokens=16, temperature=1.0, seed=7)
    with (
        svc.create_lora_training_client(base_model=MODEL, rank=8, alpha=16) as tc,
        svc.create_sampling_client(base_model=MODEL) as base,
    ):
        arns = []
        for _ in range(2):  # two checkpoints, a few steps apart
            for _ in range(3):
                tc.forward_backward([datum], "cross_entropy").result()
                tc.optim_step(ls.AdamParams(learning_rate=5e-2)).result()
            arns.append(tc.save_weights_for_sampler("m").result().model_package_arn)
        samplers = [tc.create_sampling_client(arn) for arn in arns] + [base]
        alone = [_tokens(s.sample(TEXT[:8], 2, params).result()) for s in samplers]
        assert alone[0] != alone[1] != alone[2]  # the checkpoints and the base differ

        running, release = threading.Event(), threading.Event()

        def hold(steps: int) -> None:  # holds the first batch until the others are queued
            if not running.is_set():
                running.set()
                assert release.wait(30)

        remove = sampling.add_step_hook(hold)
        try:
            blocker = base.sample(TEXT[:4], 1, ls.SamplingParams(max_tokens=2, seed=1))
            assert running.wait(30)
            futures = [s.sample(TEXT[:8], 2, params) for s in samplers]
            release.set()
            mixed = [_tokens(f.result()) for f in futures]
            blocker.result()
        finally:
            release.set()
            remove()
    for a, b in zip(alone, mixed, strict=True):
        for (a_tokens, a_lps), (b_tokens, b_lps) in zip(a, b, strict=True):
            assert a_tokens == b_tokens
            assert b_lps == pytest.approx(a_lps, abs=1e-5)
    # one batch: the training session's two ops logged together, at the base session's start
    batches = {
        name: [e for e in local_service.events.events(name) if e.phase == Phase.BATCH][-1]
        for name in (tc.training_session_name, base.training_session_name)
    }
    mine, theirs = batches.values()
    assert len(mine.ops) == 2 and len(theirs.ops) == 1 and mine.t == theirs.t
