"""Tinker's resources mapped onto the runtime: models, futures, samplers, checkpoints.

A Tinker *model* (``create_model``) is one runtime training session, created relaxed
(``strict=False``, since Tinker has no 512-token floor) and named ``tinker-<hex>``. Each
Tinker request that runs on a model becomes the typed runtime command of the same meaning
(``port_commands``), with the SDK's ``seq_id`` as its sequence number, and the request id
the SDK polls names that operation. A request refused here, before it reaches the runtime,
still tells the runtime its number was used (``Service.refuse_sequence``), so the requests
numbered after it run at once instead of waiting out the gap timeout. A *checkpoint* is a
model package keyed by its ``tinker://`` path (checkpoints.py), so ``localsession packages
list`` shows it and a restarted server still resolves it. A *sampling session* names the weights it
reads (a package, or the base model) and runs on the model's own session when it is alive,
else on one hidden sampler session per base model.

Nothing here imports torch or tinker: the HTTP layer (routes.py) parses and encodes, this
module only holds the mapping and calls :class:`Service`'s typed calls (its typed runtime
calls and ``Service.control``), never a SageMaker-shaped request or response.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

from localsession import vocab
from localsession.port import TrainingDatum
from localsession.port_commands import (
    ForwardCommand,
    LoadCommand,
    OptimCommand,
    SaveCommand,
    SessionCommand,
)
from localsession.runtime import errors
from localsession.runtime.errors import ServiceError
from localsession.runtime.models import hub
from localsession.runtime.models.catalog import public_id
from localsession.runtime.service import Service
from localsession.server.tinker import dro, sequence_plans, session_index, topk_targets
from localsession.server.tinker import tinker_commands as parse
from localsession.server.tinker.checkpoints import CheckpointIndex, Saving, description, ttl_seconds
from localsession.server.tinker.expiry import Reaper
from localsession.server.tinker.future_table import Future, FutureTable
from localsession.server.tinker.heartbeats import Heartbeats
from localsession.server.tinker.model_table import Model, ModelTable
from localsession.server.tinker.numbering import Numbering
from localsession.server.tinker.sampler_table import SamplerTable
from localsession.server.tinker.samplers import Samplers
from localsession.server.tinker.served import check_served
from localsession.server.tinker.stability import StabilityRecords


def _seed(seed: Any) -> int:
    """A model's LoRA init seed: ``lora_config.seed``, or a random one when it is None (the
    SDK documents None as a random seed, so two unseeded clients start apart)."""
    if seed is None:
        return random.SystemRandom().randrange(2**31)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise errors.validation(f"lora_config.seed={seed!r} must be an integer or None")
    return seed


class Dialect:
    """The Tinker dialect over one :class:`Service`: its state in owners, each with its data
    and lock (heartbeats, models, futures, samplers, checkpoints, stability records, the
    session index), and the logic composed over them (numbering, sampler placement)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.heartbeats = Heartbeats()  # live and finished Tinker sessions (heartbeats.py)
        self.models = ModelTable()  # model id -> its runtime session (model_table.py)
        self.futures = FutureTable()  # the request ids the SDK polls
        self.samplers = SamplerTable()  # samplers, hidden sampler sessions (sampler_table.py)
        self.reaper = Reaper(self)
        self.checkpoints = CheckpointIndex(service)  # paths, TTLs, metadata, recipients
        self.stability = StabilityRecords()  # record_stability_info samples (stable_reinforce)
        self.index = session_index.SessionIndex()  # every session seen (list_sessions)
        self.numbering = Numbering(service, self.models)  # seq_id -> runtime numbers
        self.sampling = Samplers(  # which weights a sampler reads, which session runs it
            service,
            self.samplers,
            self.models,
            self.checkpoints,
            self.index,
            self._new_session,
            self.tokenizer_id,
            self.reaper.ensure,
        )

    # -- sessions ------------------------------------------------------------------------

    def create_session(self, request: dict[str, Any] | None = None) -> str:
        """A new session; ``request``'s ``user_metadata`` and ``display_name`` are kept for
        ``get_session`` (session_index.py)."""
        session_id = str(uuid.uuid4())
        self.heartbeats.beat(session_id)
        self.index.add(session_id, **session_index.described(request or {}))
        self.reaper.ensure()
        return session_id

    def heartbeat(self, session_id: str) -> bool:
        """Note a heartbeat; False if the session has finished or expired (410). A session
        this server does not know (it restarted) is adopted."""
        if not self.heartbeats.beat(session_id):
            return False
        self.index.add(session_id)  # adopted: listed from now on
        self.reaper.ensure()
        return True

    def finish(self, session_id: str) -> None:
        """End a session (``ServiceClient.close``): its heartbeats get 410 and its models'
        runtime sessions stop, freeing their engines."""
        self.end_session(session_id)

    def end_session(self, session_id: str) -> None:
        """End a session (closed, or expired by expiry.py): later heartbeats get 410, its
        samplers are forgotten and its models' runtime sessions stop."""
        self.heartbeats.finish(session_id)
        names = [m.session for m in self.models.of_session(session_id)]
        self.samplers.drop_session(session_id)
        self.stability.drop_session(session_id)
        for name in names:
            try:
                self.service.control.stop(name)
            except ServiceError:
                pass  # already stopping or gone

    # -- models --------------------------------------------------------------------------

    def models_list(self) -> list[str]:
        return self.service.list_base_models()

    def _new_session(
        self, base_model: str, rank: int, seed: int | None, unembed: bool = False
    ) -> str:
        name = f"tinker-{uuid.uuid4().hex[:16]}"
        command = SessionCommand(
            name=name,
            base_model=base_model,
            rank=rank,
            alpha=vocab.TINKER_LORA_ALPHA,
            seed=_seed(seed),
            train_unembed=unembed,
            strict=False,
        )
        self.service.create_session(command)
        return name

    def create_model(self, request: dict[str, Any]) -> str:
        session_id = str(request.get("session_id") or "")
        seq = int(request.get("model_seq_id") or 0)
        base_model = request.get("base_model")
        if not isinstance(base_model, str) or not base_model:
            raise errors.validation("base_model is required; see get_server_capabilities")
        check_served(self.service, base_model)
        lora = dict(request.get("lora_config") or {"rank": vocab.TINKER_LORA_RANK})
        rank = lora.get("rank")
        low, high = vocab.LORA_RANK_MIN, vocab.LORA_RANK_MAX
        if not isinstance(rank, int) or not low <= rank <= high:
            raise errors.validation(
                f"lora_config.rank={rank!r} must be an integer in [{low}, {high}]"
            )
        for key in ("train_mlp", "train_attn"):
            if lora.get(key, True) is False:
                raise errors.validation(
                    f"lora_config.{key}=False is not supported locally: LoRA always adapts "
                    "every attention and MLP projection (docs/tinker.md); leave it True"
                )
        optimizer = (request.get("optimizer_config") or {}).get("type", "adamw")
        if optimizer != "adamw":
            raise errors.validation(f"optimizer {optimizer!r} is not supported; use adamw")
        unembed = lora.get("train_unembed", True) is not False  # the SDK's default: True
        name = self._new_session(base_model, rank, lora.get("seed"), unembed)
        model_id = f"{session_id}:train:{seq}"
        model = Model(model_id, name, base_model, rank, lora, request.get("user_metadata"))
        self.models.add(model)
        return self.futures.add(Future("create_model", session=name, model_id=model_id))

    def model(self, model_id: Any) -> Model:
        found = self.models.get(str(model_id))
        if found is None:
            raise errors.not_found(
                f"model {model_id!r} is unknown to this server; create it with "
                "create_lora_training_client (models do not survive a restart; resume from a "
                "checkpoint with create_training_client_from_state)",
                runtime=True,
            )
        self.models.touch(found)
        self.touch(found.owner)
        return found

    def touch(self, session_id: str | None) -> None:
        """A request of a session counts as its heartbeat."""
        self.heartbeats.touch(session_id)

    def canonical(self, base_model: str) -> str:
        return self.service.catalog.canonical_name(base_model)

    def tokenizer_id(self, base_model: str) -> str:
        """The id the SDK's ``get_tokenizer()`` loads, exported (once) into the offline HF
        cache that ``serve`` hands clients as ``HF_HUB_CACHE``."""
        canonical = self.canonical(base_model)
        try:
            hub.export_tokenizer(self.service.catalog, canonical, self.service.hub_cache)
        except Exception:  # noqa: BLE001 - the model still trains; only get_tokenizer fails
            pass
        return public_id(canonical)

    def info(self, model_id: Any) -> dict[str, Any]:
        model = self.model(model_id)
        name = self.tokenizer_id(model.base_model)
        return {
            "type": "get_info",
            "model_id": model.model_id,
            "model_data": {"arch": "llama", "model_name": name, "tokenizer_id": name},
            "is_lora": True,
            "lora_rank": model.rank,
            "model_name": name,
        }

    # -- training ops --------------------------------------------------------------------

    def forward_backward(
        self,
        model_id: str,
        seq_id: int,
        loss_fn: str,
        config: dict[str, Any],
        forward_only: bool,
        datums: list[TrainingDatum],
        shapes: list[dict[str, list[int]]],
    ) -> str:
        """Queue a Tinker forward / forward_backward; ``shapes``: each datum's input shapes."""
        model = self.model(model_id)
        with self.numbering.numbered(model, seq_id) as number:
            if loss_fn in sequence_plans.TWO_OP_LOSSES:  # a forward, a cross-entropy backward
                parsed = sequence_plans.parse(
                    self.stability, model_id, loss_fn, config, datums, shapes
                )
                future = Future(vocab.OpKind.FORWARD, model_id=model_id)
                return self.futures.add(
                    dro.submit(
                        self, model, number, config, forward_only, datums, shapes, future, parsed
                    )
                )
            if loss_fn not in vocab.TINKER_RUN_LOSSES:
                raise parse.unsupported_loss(loss_fn)
            # (N, K) targets: K datums each (topk_targets.py)
            expanded, groups = topk_targets.expand(loss_fn, datums, shapes)
            weighted = [parse.weighted(d) for d in expanded]
            config_ = parse.loss_config(config)
            command = ForwardCommand(weighted, loss_fn, config_, not forward_only)
            op = self.numbering.submit(model, number, command)
        kind = command.kind
        extra = {"groups": groups} if topk_targets.wide(groups) else {}
        return self.futures.add(
            Future(kind, session=model.session, op_id=op, model_id=model_id, extra=extra)
        )

    def optim_step(self, request: dict[str, Any]) -> str:
        model = self.model(request.get("model_id"))
        with self.numbering.numbered(model, request.get("seq_id")) as number:
            params = request.get("adam_params") or request.get("optim_params")
            if not isinstance(params, dict) or params.get("type", "adamw") not in ("adamw", "adam"):
                raise errors.validation(
                    "optim_step takes adam_params; other optimizers are not run"
                )
            op = self.numbering.submit(model, number, OptimCommand(parse.adam_params(params)))
        return self.futures.add(
            Future(
                vocab.OpKind.OPTIMIZER_STEP,
                session=model.session,
                op_id=op,
                model_id=model.model_id,
            )
        )

    def checkpoint_path(self, model: Model, segment: str, name: Any) -> str:
        label = str(name) if name else f"{segment}-{uuid.uuid4().hex[:12]}"
        if "/" in label or not label.strip():
            raise errors.validation(f"path {name!r} must be a plain name without '/'")
        return f"tinker://{model.model_id}/{segment}/{label}"

    def save(self, request: dict[str, Any], *, sampler: bool) -> str:
        model = self.model(request.get("model_id"))
        with self.numbering.numbered(model, request.get("seq_id")) as number:
            segment = "sampler_weights" if sampler else "weights"
            path = self.checkpoint_path(model, segment, request.get("path"))
            if not request.get("overwrite") and self.checkpoints.package_of(path, required=False):
                raise errors.conflict(
                    f"checkpoint {path} exists; pass overwrite=True or a new name"
                )
            metadata = request.get("user_metadata")
            ttl = ttl_seconds(request.get("ttl_seconds"))
            then: Callable[[str], None] | None = None
            extra: dict[str, Any] = {"path": path}
            if sampler and request.get("sampling_session_seq_id") is not None:
                # save_weights_and_get_sampling_client: a sampler over the saved weights,
                # made when the save completes (samplers.py), its id known now
                then, extra["sampling_session_id"] = self.sampling.expect(model, path)
                extra["unnamed"] = not request.get("path")  # its answer has no path (0.16)
            saving = Saving(path, ttl, metadata if isinstance(metadata, dict) else None, then=then)
            command = SaveCommand(not sampler, description(path), key=path)
            op = self.numbering.submit(model, number, command)
        kind = command.kind
        self.checkpoints.expect(model.session, op, saving)  # recorded when the save completes
        return self.futures.add(
            Future(kind, session=model.session, op_id=op, model_id=model.model_id, extra=extra)
        )

    def load(self, request: dict[str, Any]) -> str:
        path = str(request.get("path") or "")
        with_optimizer = bool(request.get("optimizer"))
        if request.get("session_id") is None:  # a load into a model: its number is used
            model = self.model(request.get("model_id"))
            with self.numbering.numbered(model, request.get("seq_id")) as number:
                command = LoadCommand(self.checkpoints.package_of(path), with_optimizer)
                op = self.numbering.submit(model, number, command)
        else:  # create-via-load: a new model, whose first op is the load
            info = self.checkpoints.info(path)
            arn, rank, unembed = info.arn, info.rank, info.adapts_head
            base = str(request.get("base_model") or info.base_model)
            name = self._new_session(base, rank, 0, unembed)  # the load sets the adapter
            # the load is the model's first op: it needs the engine up (a few seconds)
            self.service.wait_for_session(name, vocab.TINKER_START_WAIT_S)
            model_id = f"{request['session_id']}:train:{int(request.get('model_seq_id') or 0)}"
            model = Model(
                model_id,
                name,
                base,
                rank,
                {"rank": rank, "train_unembed": unembed},
                request.get("user_metadata"),
                offset=1,
            )
            self.models.add(model)
            first = self.numbering.number(model, 0)
            op = self.numbering.submit(model, first, LoadCommand(arn, with_optimizer))
        return self.futures.add(
            Future(
                vocab.OpKind.LOAD_STATE,
                session=model.session,
                op_id=op,
                model_id=model.model_id,
                extra={"path": path},
            )
        )
