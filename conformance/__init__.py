"""A reusable pytest suite that checks a training-session backend against the spec.

Run it with ``pytest -p conformance.plugin --backend=inprocess|http|http=URL|fakes|remote``
(or ``localsession conformance --backend ...``). The suite in :mod:`conformance.suite` uses
only the public API of ``sagemaker.train.training_session`` (which localsession mirrors);
:mod:`conformance.plugin` supplies the ``backend`` fixture, capability-gated skips, the
backend's xfail file and the JSON report. See ``conformance/README.md``.
"""

from __future__ import annotations

from conformance.adapter import Backend, BackendUnavailable, Limits
from conformance.capabilities import CAPABILITIES

__version__ = "0.1.0"

__all__ = ["CAPABILITIES", "Backend", "BackendUnavailable", "Limits", "__version__"]
