"""With ``engine="fake"``, the SDK's ``get_tokenizer()`` returns the fake model's tokenizer.

The fake engine runs every model name on the fakes' byte-level model, whose tokenizer is the
pure-Python ``fakes.ByteTokenizer`` (the built-in models' vocabulary and chat template, the
part of the ``transformers`` interface training loops use; ``tests/fakes`` checks it against
the real one). The SDK's own loader imports ``transformers``, which imports torch: seconds
that a fake, instant engine should not cost. So while the innermost live mock is a fake one,
the SDK's ``_utils.load_tokenizer`` hands back a ``ByteTokenizer`` named for the model; with
``engine="torch"`` (or no mock) the SDK's loader runs unchanged. Installed with the first
fake mock and removed with the last mock.
"""

from __future__ import annotations

import threading
from typing import Any

from localsession.mocking import hooks

_MODULE = "sagemaker.train.training_session._utils"
_lock = threading.Lock()
_installed: list[tuple[Any, Any]] = []  # (module, the SDK's own load_tokenizer)


def _innermost_is_fake() -> bool:
    live = hooks.live()
    return bool(live) and getattr(live[-1], "engine", None) == "fake"


def install() -> None:
    """Route the SDK's tokenizer loader through :func:`_load` (once; no SDK: nothing)."""
    with _lock:
        if _installed:
            return
        try:
            import importlib

            module = importlib.import_module(_MODULE)
        except ImportError:  # the SDK is not installed: nothing to route
            return
        original = module.load_tokenizer

        def load_tokenizer(
            base_model: Any = None, hub_client: Any = None, hf_model_id: Any = None
        ) -> Any:
            if not _innermost_is_fake():
                return original(base_model, hub_client, hf_model_id)
            from fakes.tokenizer import ByteTokenizer

            fake = ByteTokenizer()
            fake.name_or_path = str(hf_model_id or base_model)
            return fake

        setattr(module, "load_tokenizer", load_tokenizer)  # noqa: B010 - a module attribute
        _installed.append((module, original))


def uninstall() -> None:
    """Give the SDK its own loader back."""
    with _lock:
        while _installed:
            module, original = _installed.pop()
            setattr(module, "load_tokenizer", original)  # noqa: B010
