"""External weights: ``save_weights_external`` and the files the SDK, the ``tinker checkpoint
download`` command and tinker-cookbook's ``weights.download`` fetch.

``save_weights_external(name)`` saves the model's LoRA adapter (a ``saveWeights`` package,
never merged: PEFT's ``adapter_config.json`` + ``adapter_model.safetensors``) under
``tinker://<model_id>/external_weights/<name>``. ``get_external_weights_urls`` answers one
URL per file of that package, served by this server under
``/api/v1/external_weights_files/<model_id>/<name>/<file>``; with
``age_encryption_recipients`` each file is listed with a ``.age`` suffix and encrypted to
them as it is served (needs the ``pyrage`` package). The recipients are kept in memory: a
restarted server serves that export unencrypted, under its plain names. The URLs carry no
credential: with ``serve --auth`` the Tinker API key is needed to fetch them too.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localsession import vocab
from localsession.port_commands import SaveCommand
from localsession.runtime import errors
from localsession.server.tinker.checkpoints import Saving, description, ttl_seconds

if TYPE_CHECKING:
    from localsession.server.tinker.dialect import Dialect

SEGMENT = "external_weights"
AGE_SUFFIX = ".age"
#: How long the answered URLs are said to be valid (they never expire here).
URL_LIFETIME = timedelta(hours=1)
#: The recipients an export may name (the SDK's limit).
MAX_RECIPIENTS = 10


def check_recipients(recipients: Any) -> list[str]:
    """The ``age_encryption_recipients`` of a request, checked: each must parse, and
    ``pyrage`` must be installed to encrypt to them."""
    if not recipients:
        return []
    if not isinstance(recipients, list) or not all(isinstance(r, str) for r in recipients):
        raise errors.validation("age_encryption_recipients must be a list of strings")
    if len(recipients) > MAX_RECIPIENTS:
        raise errors.validation(f"age_encryption_recipients takes at most {MAX_RECIPIENTS}")
    for recipient in recipients:
        _recipient(recipient)
    return list(recipients)


def _recipient(text: str) -> Any:
    try:
        import pyrage
    except ImportError:
        raise errors.validation(
            "age_encryption_recipients needs the pyrage package on the server "
            "(pip install pyrage); or export without encryption"
        ) from None
    kind = pyrage.ssh if text.startswith("ssh-") else pyrage.x25519
    try:
        return kind.Recipient.from_str(text)
    except Exception as exc:  # noqa: BLE001 - pyrage raises its own error types
        raise errors.validation(f"age recipient {text[:24]!r}... does not parse: {exc}") from None


def save(dialect: Dialect, request: dict[str, Any]) -> str:
    """Queue the export of ``request['model_id']``'s adapter; returns the request id."""
    from localsession.server.tinker.future_table import Future

    recipients = check_recipients(request.get("age_encryption_recipients"))
    model = dialect.model(request.get("model_id"))
    with dialect.numbering.numbered(model, request.get("seq_id")) as number:
        path = dialect.checkpoint_path(model, SEGMENT, request.get("path"))
        if dialect.checkpoints.package_of(path, required=False):
            raise errors.conflict(f"checkpoint {path} exists; export under a new name")
        ttl = ttl_seconds(request.get("ttl_seconds"))
        command = SaveCommand(checkpoint=False, description=description(path), key=path)
        op = dialect.numbering.submit(model, number, command)
    # recorded when the export completes (checkpoints.py)
    dialect.checkpoints.expect(model.session, op, Saving(path, ttl, recipients=recipients))
    extra = {"path": path, "external": True}
    future = Future(
        vocab.OpKind.SAVE_WEIGHTS, session=model.session, op_id=op, model_id=model.model_id
    )
    future.extra = extra
    return dialect.futures.add(future)


def package_files(root: Path) -> list[str]:
    """Every file of a package directory, as paths relative to it (sorted)."""
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )


def files(dialect: Dialect, path: str) -> tuple[Path, list[str], list[str]]:
    """An export's package directory, its files and the recipients it is encrypted to."""
    run, _, checkpoint = path[len("tinker://") :].partition("/")
    if not checkpoint.startswith(SEGMENT + "/"):
        raise errors.validation(
            f"{path} is not an external weights checkpoint (tinker://<run>/{SEGMENT}/<name>); "
            "save one with TrainingClient.save_weights_external"
        )
    arn = dialect.checkpoints.package_of(path)
    root = dialect.service.control.package_dir(arn)
    recipients = dialect.checkpoints.recipients(path)
    return root, package_files(root), recipients


def urls(dialect: Dialect, path: str, base_url: str) -> dict[str, Any]:
    """The ``ExternalWeightsUrlsResponse`` of an export."""
    _, names, recipients = files(dialect, path)
    run, _, checkpoint = path[len("tinker://") :].partition("/")
    name = checkpoint[len(SEGMENT) + 1 :]
    suffix = AGE_SUFFIX if recipients else ""
    prefix = f"{base_url.rstrip('/')}/api/v1/external_weights_files/{run}/{name}/"
    expires = datetime.now(timezone.utc) + URL_LIFETIME
    return {
        "urls": {n + suffix: prefix + n + suffix for n in names},
        "expires": expires.isoformat(),
    }


def content(dialect: Dialect, run: str, name: str, file: str) -> bytes:
    """One file of an export, encrypted to its recipients if it has any."""
    path = f"tinker://{run}/{SEGMENT}/{name}"
    root, names, recipients = files(dialect, path)
    plain = file[: -len(AGE_SUFFIX)] if recipients and file.endswith(AGE_SUFFIX) else file
    if plain not in names or (recipients and plain == file):
        raise errors.not_found(f"{path} has no file {file!r}", runtime=True)
    data = (root / plain).read_bytes()
    if not recipients:
        return data
    import pyrage

    return bytes(pyrage.encrypt(data, [_recipient(r) for r in recipients]))
