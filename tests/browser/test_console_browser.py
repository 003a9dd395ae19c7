"""The console in a real browser: Debian's Chromium driven by Playwright (`make
test-browser`; skipped with the reason where Chromium or Playwright is missing).

One server serves both dialects; a short loop runs through the unmodified SageMaker SDK and
another through the ``tinker`` SDK; then the console is opened in headless Chromium and
checked: both sessions listed, each timeline shows every training op of its loop in sequence
order, the loss chart holds the losses the loops got back, the trace downloaded from the
page covers every op, no request leaves loopback, and the browser logs no error. Screenshots
land in ``runs/browser/`` (or ``$LOCALSESSION_ARTIFACTS``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from testkit import spans_nest

from localsession.mocking.hooks import scoped_environ
from localsession.runtime.trace import BATCH_TID, TRAINING_TID
from localsession.server.endpoints import client_env

from .loops import REGION, Loop, sagemaker_loop, tinker_loop

pytestmark = [pytest.mark.browser, pytest.mark.integration]

CHROMIUM = os.environ.get("LOCALSESSION_CHROMIUM", "/usr/bin/chromium")
#: Flags that keep a headless Chromium from calling home or needing a GPU or a sandbox.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]


def artifacts() -> Path:
    where = Path(os.environ.get("LOCALSESSION_ARTIFACTS") or ROOT / "runs" / "browser")
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Any, Loop, Loop]]:
    """A server (torch engine, built-in tiny model) after both loops ran against it."""
    pytest.importorskip("tinker", reason="the tinker SDK is not installed (make sdk)")
    pytest.importorskip("sagemaker.train.training_session", reason="no SageMaker SDK (make sdk)")
    from localsession.mocking.tinker_server import TinkerServer

    server = TinkerServer()
    try:
        env = {**server.environment(), **client_env(server.url, REGION)}
        with scoped_environ(env):
            sagemaker = sagemaker_loop()
            tinker = tinker_loop()
        yield server, sagemaker, tinker
    finally:
        server.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; make test-browser)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed (make test-browser)"
    )
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield chromium
        chromium.close()


class Watched:
    """A page whose every request and console error is recorded; a request to anywhere but
    the loopback server is refused and recorded."""

    def __init__(self, browser: Any, base: str) -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.outside: list[str] = []
        self.errors: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.context.route("**/*", self._route)
        self.base = base

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text}")

    def _route(self, route: Any) -> None:
        url = route.request.url
        self.requests.append(url)
        host = urlparse(url).hostname
        if url.startswith(("data:", "blob:")) or host in ("127.0.0.1", "localhost", "::1"):
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()


def timeline(page: Any) -> list[dict[str, Any]]:
    """The training ops the timeline drew, left to right."""
    rects = page.eval_on_selector_all(
        "#timeline rect.op",
        "els => els.map(e => ({x: +e.getAttribute('x'), seq: +e.dataset.seq, "
        "kind: e.dataset.kind, status: e.dataset.status}))",
    )
    return sorted(rects, key=lambda r: (r["x"], r["seq"]))


def open_session(watched: Watched, name: str, loop: Loop) -> dict[str, Any]:
    page = watched.page
    page.goto(f"{watched.base}/console/#/session/{name}")
    page.wait_for_function(
        "n => document.querySelectorAll('#timeline rect.op').length >= n", arg=len(loop.kinds)
    )
    page.wait_for_function(
        "n => window.lsConsole.charts.loss && window.lsConsole.charts.loss.y.length >= n",
        arg=len(loop.losses),
    )
    return {
        "ops": timeline(page),
        "loss": page.evaluate("[...window.lsConsole.charts.loss.y]"),
        "loss_x": page.evaluate("[...window.lsConsole.charts.loss.x]"),
        # the chart's canvas has something drawn on it (not one flat colour)
        "inked": page.evaluate(
            "(() => { const c = document.querySelector('.chart[data-metric=\"loss\"] canvas');"
            " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            " const s = new Set(); for (let i = 0; i < d.length; i += 4 * 97)"
            " s.add(d[i] + ',' + d[i+1] + ',' + d[i+2] + ',' + d[i+3]); return s.size; })()"
        ),
    }


def test_the_console_shows_both_loops(browser: Any, served: tuple[Any, Loop, Loop]) -> None:
    server, sagemaker, tinker = served
    tinker_session = next(
        s.name for s in server.service.sessions() if s.name.startswith("tinker-") and s.ops
    )
    tinker.session = tinker_session
    watched = Watched(browser, server.url)
    page = watched.page
    out = artifacts()

    page.goto(f"{server.url}/console/")
    page.wait_for_selector(f'tr[data-session="{sagemaker.session}"]')
    page.wait_for_selector(f'tr[data-session="{tinker.session}"]')
    page.wait_for_selector("#tinker tr[data-tinker-session]")
    rows = page.eval_on_selector_all(
        "#sessions tbody tr", "els => els.map(e => [e.dataset.session, e.dataset.dialect])"
    )
    assert [sagemaker.session, "sagemaker"] in rows and [tinker.session, "tinker"] in rows
    page.screenshot(path=str(out / "console-sessions.png"), full_page=True)

    for loop, name in ((sagemaker, "sagemaker"), (tinker, "tinker")):
        seen = open_session(watched, loop.session, loop)
        if name == "sagemaker":  # live: a step taken now appears without a reload
            before = len(seen["ops"])
            loop.extra["one_more"]()
            page.wait_for_function(
                "n => document.querySelectorAll('#timeline rect.op').length > n", arg=before
            )
            page.wait_for_function(
                "n => window.lsConsole.charts.loss.y.length >= n", arg=len(loop.losses)
            )
            seen = open_session(watched, loop.session, loop)
        # every training op of the loop, in sequence order, left to right, all Completed
        assert [op["seq"] for op in seen["ops"]] == list(range(1, len(loop.kinds) + 1))
        assert [op["kind"] for op in seen["ops"]] == loop.kinds
        assert {op["status"] for op in seen["ops"]} == {"Completed"}
        # the chart holds the losses the SDK returned, at the forward_backward numbers
        assert seen["loss"] == pytest.approx(loop.losses, rel=1e-6)
        assert seen["loss_x"] == [i + 1 for i, k in enumerate(loop.kinds) if k == "forwardBackward"]
        assert seen["inked"] > 2
        page.wait_for_selector("#samples pre")
        assert page.locator("#samples pre").count() >= 1
        assert page.locator("#packages tbody tr").count() >= 1
        page.screenshot(path=str(out / f"console-{name}.png"), full_page=True)
        with page.expect_download() as download:
            page.click("#trace-one")
        trace = json.loads(Path(download.value.path()).read_text())
        events = trace["traceEvents"]
        spans = [e for e in events if e["ph"] == "X" and e["tid"] == TRAINING_TID]
        spans.sort(key=lambda e: e["ts"])
        assert [e["args"]["seq"] for e in spans] == list(range(1, len(loop.kinds) + 1))
        assert [e["args"]["kind"] for e in spans] == loop.kinds
        assert spans_nest(spans)
        batches = [e for e in events if e["ph"] == "X" and e["tid"] == BATCH_TID]
        assert spans_nest(batches)
        # every sampling request of the loop closed, each inside the batch it rode in
        requests = {e["id"]: e for e in events if e["ph"] == "e" and e["cat"] == "sampling"}
        sampled = [r for r in requests.values() if r["name"] == "sample"]
        assert sum(len(b["args"]["ops"]) for b in batches if "sample" in b["name"]) == len(sampled)
        assert len(sampled) == (1 if name == "sagemaker" else 3)
        for batch in batches:
            for op in batch["args"]["ops"]:
                assert batch["ts"] <= requests[op]["ts"] <= batch["ts"] + batch["dur"] + 0.2

    assert watched.outside == [], "the console asked for something beyond loopback"
    assert any(u.endswith("uPlot.iife.min.js") for u in watched.requests)
    assert watched.errors == [], watched.errors
    watched.context.close()


def test_under_auth_the_page_asks_for_the_key(browser: Any, tmp_path: Path) -> None:
    from testkit import forward_backward, stub_service

    from localsession.server.auth import Credential
    from localsession.server.hosting import ServerThread

    service, _ = stub_service(tmp_path)
    try:
        op = service.execute_training_operation("s1", forward_backward(1, 1))["operationId"]
        assert service.wait_operation("s1", op, 60)
        with ServerThread(service, credential=Credential("AKID", "s3cret")) as url:
            watched = Watched(browser, url)
            page = watched.page
            page.goto(f"{url}/console/")
            page.wait_for_selector("#key-form", state="visible")
            page.fill("#key-input", "tml-wrong")
            page.click("#key-form button")
            page.wait_for_timeout(1500)  # a poll or two: still refused
            assert page.is_visible("#key-form")
            assert page.locator('tr[data-session="s1"]').count() == 0
            page.fill("#key-input", "tml-s3cret")
            page.click("#key-form button")
            page.wait_for_selector('tr[data-session="s1"]')
            assert page.is_hidden("#key")
            page.screenshot(path=str(artifacts() / "console-auth.png"))
            # the only errors: Chromium's own lines for the refused (403) requests
            assert watched.errors and all("403" in e for e in watched.errors), watched.errors
            assert watched.outside == []
            watched.context.close()
    finally:
        service.close()


def test_a_long_session_draws_its_newest_ops(browser: Any, tmp_path: Path) -> None:
    from testkit import forward_backward, stub_service

    from localsession.server.hosting import ServerThread

    service, _ = stub_service(tmp_path, max_queued_ops=4096)
    try:
        total = 1600  # more than the timeline's 1500
        ids = [
            service.execute_training_operation("s1", forward_backward(n, 1))["operationId"]
            for n in range(1, total + 1)
        ]
        assert all(service.wait_operation("s1", op, 60) for op in ids)
        with ServerThread(service) as url:
            watched = Watched(browser, url)
            page = watched.page
            page.goto(f"{url}/console/#/session/s1")
            page.wait_for_selector("#timeline rect.op")
            seqs = [op["seq"] for op in timeline(page)]
            assert seqs == list(range(total - 1500 + 1, total + 1))
            assert page.evaluate("window.lsConsole.charts.loss.y.length") == total
            assert watched.errors == [] and watched.outside == []
            watched.context.close()
    finally:
        service.close()
