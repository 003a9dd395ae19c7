"""How fast ``localsession.mock()`` runs the launch post's GRPO loop through the real SDK.

Each measurement runs the blog's loop (tests/mock/mock_blog.py: two GRPO steps, 2 prompts x 4
samples, ``importance_sampling``, ``optim_step``, a fresh sampler per step, through the
unmodified ``sagemaker.train.training_session``) inside ``localsession.mock(engine="fake")``,
entering and leaving a fresh mock every time, in a fresh interpreter:

- cold: imports (SDK, localsession) + the first mock and loop, as a CI job's first test sees;
- first after import: the same, from once the SDK is imported: ``sagemaker.train.training_session``
  and the ``sagemaker.core`` modules its ``ServiceClient()`` imports lazily (several seconds of
  the cold time here). The issue's target: ≤ 1.5 s, with no torch imported (the fake engine
  and ``ByteTokenizer``);
- warm: the median of later mocks + loops in that process: the issue's target, two steps
  ≤ 1 s once the SDK is imported. Most of it is the SDK's own: ``ServiceClient()`` builds
  eight botocore clients, parsing their service models each time.

For scale, the same loop against a ``serve`` app on a thread (uvicorn, real HTTP, the same
fake engine) is timed interleaved with the warm runs; the ratio is information only.

Run: python bench/bench_mock.py [--smoke] [--runs 5]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import Row, bench_args, emit  # noqa: E402

SCRIPT = """
import json, statistics, sys, time
t0 = time.perf_counter()
import sagemaker.train.training_session
# what ServiceClient() imports lazily
import sagemaker.core.helper.session_helper, sagemaker.train.defaults
import localsession
sys.path.insert(0, "tests/mock")
from mock_blog import grpo
t1 = time.perf_counter()

def once():
    with localsession.mock(engine="fake", model_map={"openai/gpt-oss-20b": "localsession/tiny"}):
        seen = grpo("openai/gpt-oss-20b", steps=2)
    assert len(seen["metrics"]) == 2

def over_http():
    import os
    from fakes.fake_service import FakeService
    from localsession.wiring import listed_catalog
    from localsession.server.hosting import ServerThread
    from localsession.server.serve import serve_exports
    from localsession.mocking.hooks import scoped_environ

    mapped = {"openai/gpt-oss-20b": "localsession/tiny"}
    service = FakeService(catalog=listed_catalog(mapped, accept_any=False))
    with ServerThread(service, long_poll=0.9) as url:
        env = serve_exports(url, service)
        with scoped_environ(env):  # huggingface_hub's import-time copy of the cache too
            seen = grpo("openai/gpt-oss-20b", steps=2)
    service.close()
    assert len(seen["metrics"]) == 2

once()
t2 = time.perf_counter()
assert "torch" not in sys.modules, "the fake mock imported torch"
over_http()  # serve's imports bring torch in
warm, http = [], []
for _ in range(RUNS):  # interleaved, so load bursts hit both
    start = time.perf_counter()
    once()
    warm.append(time.perf_counter() - start)
    start = time.perf_counter()
    over_http()
    http.append(time.perf_counter() - start)
print(json.dumps({"cold": t2 - t0, "first": t2 - t1, "warm": statistics.median(warm),
                  "warm_max": max(warm), "http": statistics.median(http)}))
"""


def measure(runs: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("RUNS", str(runs))],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def collect(smoke: bool = False, runs: int = 5) -> list[Row]:
    """Cold, first-after-import and warm times of the blog's two GRPO steps in the mock."""
    t = measure(1 if smoke else runs)
    return [
        Row(
            "mock cold: imports + first mock + 2 blog GRPO steps (s)", t["cold"], "s", "info", None
        ),
        Row(
            "mock first after SDK import: mock + 2 steps (s)",
            t["first"],
            "s",
            "≤ 1.5 s",
            t["first"] <= 1.5,
        ),
        Row(
            "mock warm: fresh mock + 2 blog GRPO steps, median (s)",
            t["warm"],
            "s",
            "≤ 1 s",
            t["warm"] <= 1.0,
        ),
        Row("mock warm: slowest of the runs (s)", t["warm_max"], "s", "info", None),
        Row(
            "mock warm vs the same loop over HTTP (serve on a thread)",
            t["warm"],
            "s",
            "info",
            None,
            baseline=t["http"],
            ratio=t["warm"] / t["http"],
        ),
    ]


def main() -> None:
    parser = bench_args(__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    emit(collect(args.smoke, args.runs), args, "localsession.mock(): the blog's loop via the SDK")


if __name__ == "__main__":
    main()
