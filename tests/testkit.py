"""What many test modules share: one configurable stub engine, a service over it, one running
server, builders for wire requests, and a package as a home written before keys holds it.
Imported as ``testkit`` (pytest puts ``tests/`` on ``sys.path`` for the root conftest).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localsession.port import (
    AdamHyperparams,
    EngineInputError,
    EngineSpec,
    LossConfig,
    SampleRequest,
    TrainingDatum,
)
from localsession.port_results import ForwardResult, OptimResult, SampleResult
from localsession.runtime.models.catalog import StaticCatalog
from localsession.runtime.packages.registry import CHECKPOINT, INDEX_FILE, Registry
from localsession.runtime.service import Service, ServiceConfig
from localsession.wiring import build_service


class StubEngine:
    """An engine that computes nothing and records the ops that reach it, in order.

    ``calls`` holds ``"fb<first token>"`` per forward(_backward), ``"step"``, ``"sample"``.
    ``fail_loss``: a forward with that ``loss_fn`` fails the op (``EngineInputError``).
    """

    def __init__(self, spec: EngineSpec, *, fail_loss: str | None = None) -> None:
        self.spec = spec
        self.fail_loss = fail_loss
        self.calls: list[str] = []
        #: Each op's typed argument as the engine received it: the ``loss_fn_config`` of a
        #: forward(_backward), the hyperparameters of an optimizer step.
        self.received: list[LossConfig | AdamHyperparams | None] = []

    def forward_backward(
        self,
        datums: Sequence[TrainingDatum],
        loss_fn: str,
        loss_fn_config: LossConfig | None,
        *,
        backward: bool,
    ) -> ForwardResult:
        if loss_fn == self.fail_loss:
            raise EngineInputError("datum 0: `advantages` is missing")
        self.calls.append(f"fb{datums[0].tokens[0]}")
        self.received.append(loss_fn_config)
        return ForwardResult({"loss": 1.0, "global_token_num": 1.0}, [])

    def optim_step(self, adam_params: AdamHyperparams) -> OptimResult:
        self.calls.append("step")
        self.received.append(adam_params)
        return OptimResult({"learning_rate": adam_params.learning_rate})

    def sample(self, weights: str | None, requests: list[SampleRequest]) -> list[SampleResult]:
        self.calls.append("sample")
        return [SampleResult([]) for _ in requests]

    def compute_logprobs(self, weights: str | None, tokens: list[int]) -> list[float | None]:
        return [None] + [0.0] * (len(tokens) - 1)

    def save_package(self, directory: str, *, include_optimizer: bool, merge_weights: bool) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)

    def load_package(self, directory: str, *, load_optimizer: bool) -> None:
        pass

    def get_tokenizer(self) -> Any:
        return None

    def close(self) -> None:
        pass


def create_request(name: str, *, model: str = "localsession/tiny", rank: int = 4,
                   **extra: Any) -> dict[str, Any]:  # fmt: skip
    """A CreateTrainingSession request body."""
    return {
        "TrainingSessionName": name,
        "LoraConfig": {"Rank": rank, "Alpha": 2 * rank},
        "ModelConfig": {"BaseModelArn": model},
        **extra,
    }


def stub_service(
    home: Path, *, session: str | None = "s1", fail_loss: str | None = None, **config: Any
) -> tuple[Service, list[StubEngine]]:
    """A service over :class:`StubEngine` (any model name) on ``home``, with a Running
    session ``session`` (None: none); the engines it made, in order."""
    engines: list[StubEngine] = []

    def factory(spec: EngineSpec) -> StubEngine:
        engines.append(StubEngine(spec, fail_loss=fail_loss))
        return engines[-1]

    config = ServiceConfig(home=home, engine_factory=factory, **config)
    service = build_service(config, catalog=StaticCatalog(["localsession/tiny"], accept_any=True))
    if session is not None:
        service.create_training_session(create_request(session))
        assert service.wait_for_session(session, 10) == "Running"
    return service, engines


def old_package(home: Path, description: str, *, targets: Sequence[str] | None = None) -> str:
    """Save a rank-8 checkpoint of ``localsession/tiny`` in ``home`` as the code before keys
    wrote it: no ``key`` in its ``package.json`` (the Tinker dialect kept its path in the
    description then). ``targets``: the adapter's ``target_modules`` written to
    ``adapter_config.json`` (None: no adapter config). Returns the package's ARN."""
    config = ServiceConfig(home=home)
    registry = Registry(home, config.region, config.account)

    def write(folder: Path) -> None:
        if targets is not None:
            adapter = {"target_modules": list(targets)}
            (folder / "adapter_config.json").write_text(json.dumps(adapter))

    info = registry.create(
        "sagemaker-default",
        kind=CHECKPOINT,
        base_model="localsession/tiny",
        lora_rank=8,
        lora_alpha=16,
        description=description,
        session="tinker-0123456789abcdef",
        merged=False,
        write=write,
    )
    index = registry.path(info.arn) / INDEX_FILE
    record = json.loads(index.read_text())
    del record["key"]
    index.write_text(json.dumps(record))
    return info.arn


def forward_backward(seq: int, tag: int = 1, *, token: str = "",
                     loss: str = "cross_entropy") -> dict[str, Any]:  # fmt: skip
    """An ExecuteTrainingOperation body: a one-token forwardBackward whose token is ``tag``."""
    return {
        "sequenceNumber": seq,
        "clientToken": token or f"token-{seq}",
        "operationConfig": {
            "forwardBackward": {
                "lossFnName": loss,
                "datumList": [{"modelInput": {"chunks": [{"tokens": [tag]}]}}],
            }
        },
    }


@dataclass
class Served:
    """A service on a fresh home with a server in front of it, and raw HTTP helpers."""

    service: Service
    url: str
    home: Path

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """One raw HTTP request; (status, lower-cased headers, parsed JSON body or text)."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            raw = response.read()
            found = {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
        try:
            parsed: Any = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode("utf-8", "replace")
        return response.status, found, parsed

    def control(self, operation: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        """One control-plane call (json 1.1, ``X-Amz-Target: SageMaker.<operation>``)."""
        return self.request(
            "POST",
            "/",
            json.dumps(body).encode(),
            {
                "X-Amz-Target": f"SageMaker.{operation}",
                "Content-Type": "application/x-amz-json-1.1",
            },
        )


@contextmanager
def running_server(home: Path, *, long_poll: float = 5.0, **config: Any) -> Iterator[Served]:
    """A :class:`Service` on ``home`` (``config``: ServiceConfig fields) served on port 0 on
    a background thread; closed on exit."""
    from localsession.server.hosting import ServerThread

    service = build_service(ServiceConfig(home=home, **config))
    try:
        with ServerThread(service, long_poll=long_poll) as url:
            yield Served(service, url, home)
    finally:
        service.close()


def containers(tree: Any) -> list[int]:
    """The ids of every list and dict inside ``tree`` (itself included): what a copy of it
    must not share."""
    if isinstance(tree, dict):
        return [id(tree), *(i for item in tree.values() for i in containers(item))]
    if isinstance(tree, (list, tuple)):
        own = [id(tree)] if isinstance(tree, list) else []
        return [*own, *(i for item in tree for i in containers(item))]
    return []


def spans_nest(spans: list[dict[str, Any]]) -> bool:
    """Whether complete trace spans (``ts``, ``dur``) on one track are each disjoint from,
    or inside, every other (what a trace viewer draws as a stack)."""
    open_ends: list[float] = []
    for span in sorted(spans, key=lambda s: (s["ts"], -s["dur"])):
        while open_ends and open_ends[-1] <= span["ts"]:
            open_ends.pop()
        end = span["ts"] + span["dur"]
        if open_ends and end > open_ends[-1]:
            return False
        open_ends.append(end)
    return True
