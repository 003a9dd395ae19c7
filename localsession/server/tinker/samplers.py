"""Sampling sessions (the Dialect's :class:`Samplers`, over the sampler_table.py and
model_table.py owners): which weights a sampler reads, and which runtime session runs it.

A sampler reads a checkpoint's package (``model_path``) or the base model. It runs on the
runtime session of the model that saved the checkpoint while that model is alive, else on
one hidden sampler session per base model and head (rank 1: sampling reads a package's own
adapter, so the session's rank does not matter; but a package that adapts the output head,
``train_unembed``, needs a session whose adapter covers the head too). A hidden session is
made under its key's own lock, so requests arriving together on a new base model share one;
it is reclaimed once no live Tinker session holds a sampler on it (expiry.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from localsession import vocab
from localsession.runtime import errors
from localsession.runtime.errors import ServiceError
from localsession.runtime.service import Service
from localsession.server.tinker.checkpoints import CheckpointIndex
from localsession.server.tinker.model_table import ModelTable
from localsession.server.tinker.sampler_table import Sampler, SamplerTable
from localsession.server.tinker.served import check_served
from localsession.server.tinker.session_index import SessionIndex

#: Makes a runtime session: (base model, rank, seed, adapts the head) -> its name.
MakeSession = Callable[[str, int, int | None, bool], str]

#: The checkpoint name every inflight save of a model writes (``kind="inflight"``).
INFLIGHT = "inflight"


class Samplers:
    """Sampler creation and placement over the sampler and model tables. ``make_session``
    starts a runtime session for the dialect; ``tokenizer_id`` names a base model as the
    SDK loads its tokenizer; ``reap`` (re)starts expiry once a hidden session exists."""

    def __init__(
        self,
        service: Service,
        table: SamplerTable,
        models: ModelTable,
        checkpoints: CheckpointIndex,
        index: SessionIndex,
        make_session: MakeSession,
        tokenizer_id: Callable[[str], str],
        reap: Callable[[], None],
    ) -> None:
        self.service = service
        self.table = table
        self.models = models
        self.checkpoints = checkpoints
        self.index = index
        self.make_session = make_session
        self.tokenizer_id = tokenizer_id
        self.reap = reap

    def canonical(self, base_model: str) -> str:
        return self.service.catalog.canonical_name(base_model)

    def create_sampler(
        self, model_path: str | None, base_model: str | None, session_id: str | None = None
    ) -> str:
        info = self.checkpoints.info(model_path) if model_path else None
        package = info.arn if info is not None else None
        model_id = None
        if model_path and info is not None:
            model_id = model_path[len("tinker://") :].split("/")[0]
            if base_model is None:
                base_model = info.base_model
        if not base_model:
            raise errors.validation("create_sampling_client needs base_model or model_path")
        check_served(self.service, base_model)
        self.service.resolve_base_model(base_model)
        base_model = self.tokenizer_id(base_model)
        unembed = info.adapts_head if info is not None else False
        sampler_id = f"sampler-{uuid.uuid4().hex}"
        self.table.add(
            Sampler(sampler_id, base_model, model_path, package, model_id, unembed, session_id)
        )
        self.index.add_sampler(session_id, sampler_id)
        return sampler_id

    def expect(self, model: Any, path: str) -> tuple[Callable[[str], None], str]:
        """A sampler over the weights a save of ``model`` (a model_table.Model) writes to
        ``path``, for ``save_weights_and_get_sampling_client``: what to call with the
        package's ARN once the save completes (``Saving.then``), and the sampler's id. It
        belongs to the model's Tinker session; a save that fails makes none."""
        sampler_id = f"sampler-{uuid.uuid4().hex}"
        base_model = self.tokenizer_id(model.base_model)  # now: the callback stays quick
        model_id, owner = model.model_id, model.owner

        def saved(arn: str) -> None:
            try:
                unembed = self.service.control.package(arn).adapts_head
            except ServiceError:
                unembed = False  # deleted already: sampling it will say so
            self.table.add(Sampler(sampler_id, base_model, path, arn, model_id, unembed, owner))
            self.index.add_sampler(owner, sampler_id)

        return saved, sampler_id

    def package_for(self, sampler: Sampler) -> str | None:
        """The package a sampler's next request reads. An inflight sampler (its model's
        ``sampler_weights/inflight`` checkpoint, which every ``kind="inflight"`` save
        overwrites) reads the newest save of that path: the weights saved when it was made,
        or newer, as the SDK promises; a snapshot sampler the package it was made with."""
        if sampler.model_path and sampler.model_path.endswith(f"/sampler_weights/{INFLIGHT}"):
            return (
                self.checkpoints.package_of(sampler.model_path, required=False) or sampler.package
            )
        return sampler.package

    def sampler(self, sampler_id: Any) -> Sampler:
        found = self.table.get(str(sampler_id))
        if found is None:
            raise errors.not_found(f"sampling session {sampler_id!r} is unknown", runtime=True)
        return found

    def session_for(self, sampler: Sampler) -> str:
        """Which runtime session runs ``sampler``'s requests."""
        model = self.models.get(sampler.model_id or "")
        if model is not None and self.canonical(model.base_model) == self.canonical(
            sampler.base_model
        ):
            if self._running(model.session):
                return model.session
        key = sampler.key
        with self.table.maker(key):  # one maker per key; the others wait, then find it
            name = self.table.use(key)
            if name is not None and self._running(name):
                return name
            # seed 0: a hidden session samples packages or the base model (its own LoRA B
            # starts at zero), and stays reproducible
            name = self.make_session(sampler.base_model, 1, 0, sampler.unembed)
            self.table.set_hidden(key, name)
            self.reap()
            status = self.service.wait_for_session(name, vocab.TINKER_START_WAIT_S)
            if (
                status != vocab.SessionStatus.RUNNING
            ):  # a failed start is named, and the next request retries
                self.table.drop_hidden(key, name)
                detail = self.service.control.state(name).error or status
                raise ServiceError(
                    vocab.ErrorCode.INTERNAL,
                    f"the sampling session for {sampler.base_model} did not start: {detail}",
                    500,
                )
            return name

    def _running(self, name: str) -> bool:
        try:
            return self.service.control.state(name).status == vocab.SessionStatus.RUNNING
        except ServiceError:
            return False
