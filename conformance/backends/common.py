"""What the built-in backends share: the session settings they send and where their known
divergences live. A leaf of ``conformance.backends``: the backends import it, and it imports
none of them (``backends/__init__.py`` picks a backend; the backends never import it back)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
ROLE = "arn:aws:iam::123456789012:role/conformance"
REGION = "us-west-2"
GROUP = f"arn:aws:sagemaker:{REGION}:123456789012:model-package-group/conformance"
S3 = "s3://conformance-bucket/out"


def xfail_file(name: str) -> Path | None:
    """``<name>.xfail`` beside the backends, the built-in backend's known divergences."""
    path = HERE / f"{name}.xfail"
    return path if path.exists() else None
