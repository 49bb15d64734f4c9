"""The console in a real browser (Debian's Chromium driven by Playwright) against the real
server: every page renders without console errors in both themes at desktop and phone width,
keyboard use, charts that move under load, load and unload, a failed load's reason, try-it's
numbers against tritonclient's, the config.pbtxt text, and a restricted server.

Screenshots of every page land in build/console-screenshots/ (CONSOLE_SCREENSHOTS overrides).
Skipped, saying why, where Chromium or Playwright is missing (`make test-browser` installs both).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from google.protobuf import json_format

from ptserve.config.parse import ModelConfig, parse_config
from tests.frontends.console.servers import HEADER, SECRET
from tests.frontends.http.rawhttp import request
from tests.serverproc import ServerProcess

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="needs Playwright for Python (make test-browser installs it)"
)
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and shutil.which("chromium") is None,
        reason=f"needs Chromium at {CHROMIUM} (apt install chromium; make test-browser does)",
    ),
]
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[3]
SHOTS = Path(os.environ.get("CONSOLE_SCREENSHOTS", ROOT / "build" / "console-screenshots"))
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# Each page and what shows that it finished rendering. (Waits are written as functions: the
# console's Content-Security-Policy forbids evaluating strings, and Playwright honours it.)
PAGES = {
    "server": '[data-field="ready"] .badge, [data-part="health"] .error',
    "models": 'article[data-model="mlp"] [data-state="READY"]',
    "models/mlp": 'pre[data-format="pbtxt"]',
    "models/versioned/2": 'pre[data-format="pbtxt"]',
    "charts/mlp": '[data-chart="requests"] path[d^="M"]',
    "try/mlp": 'fieldset[data-input="INPUT__0"]',
    "try/simple": 'fieldset[data-input="INPUT1"]',
}


class Console:
    """One browser tab on the console, collecting what the page logs as errors."""

    def __init__(self, page: Any, url: str) -> None:
        self.page = page
        self.url = url
        self.errors: list[str] = []
        page.on(
            "console",
            lambda m: self.errors.append(m.text) if m.type in ("error", "warning") else None,
        )
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def open(self, route: str, ready: str | None = None) -> None:
        self.page.goto(f"http://{self.url}/console/#/{route}")
        if ready:
            self.page.wait_for_selector(ready, state="attached", timeout=20_000)

    def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)

    def no_errors(self, allowed: str | None = None) -> None:
        errors = [e for e in self.errors if not (allowed and re.search(allowed, e))]
        assert not errors, errors
        self.errors.clear()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as driver:
        executable = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
        launched = driver.chromium.launch(executable_path=executable, args=LAUNCH_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def console(browser: Any, console_server: ServerProcess) -> Iterator[Console]:
    context = browser.new_context(viewport=DESKTOP)
    yield Console(context.new_page(), console_server.http_url)
    context.close()


def accessibility_problems(page: Any) -> list[str]:
    """Form controls without a label, buttons without a name, images without alt, headings
    that skip a level."""
    result: list[str] = page.evaluate(
        """() => {
        const problems = [];
        const named = (el) => (el.labels && el.labels.length) || el.getAttribute("aria-label")
          || el.getAttribute("aria-labelledby");
        for (const el of document.querySelectorAll("input, select, textarea")) {
          if (el.type !== "hidden" && !named(el) && el.offsetParent !== null)
            problems.push(`unlabelled ${el.tagName} ${el.id || el.outerHTML.slice(0, 60)}`);
        }
        for (const el of document.querySelectorAll("button")) {
          if (!el.textContent.trim() && !el.getAttribute("aria-label"))
            problems.push("unnamed button");
        }
        for (const el of document.querySelectorAll("img")) {
          if (!el.hasAttribute("alt")) problems.push(`img without alt ${el.src}`);
        }
        let last = 1;
        for (const el of document.querySelectorAll("main h1, main h2, main h3")) {
          const level = Number(el.tagName[1]);
          if (level > last + 1) problems.push(`heading jumps to ${el.tagName}: ${el.textContent}`);
          last = level;
        }
        return problems;
    }"""
    )
    return result


@pytest.mark.parametrize(
    ("layout", "viewport", "scheme"),
    [
        ("desktop", DESKTOP, "light"),
        ("desktop", DESKTOP, "dark"),
        ("phone", PHONE, "light"),
        ("phone", PHONE, "dark"),
    ],
)
def test_every_page_renders(
    browser: Any, console_server: ServerProcess, layout: str, viewport: dict[str, int], scheme: str
) -> None:
    context = browser.new_context(viewport=viewport, color_scheme=scheme)
    try:
        tab = Console(context.new_page(), console_server.http_url)
        backgrounds = set()
        for route, ready in PAGES.items():
            tab.open(route, ready)
            tab.page.wait_for_function("() => !document.querySelector('main[aria-busy]')")
            heading = tab.page.inner_text("main h1")
            assert heading, route
            assert accessibility_problems(tab.page) == [], route
            # Nothing wider than the screen: wide tables scroll inside their own box.
            overflow = tab.page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 1, f"{route} is {overflow} px wider than a {layout} screen"
            backgrounds.add(tab.page.evaluate("getComputedStyle(document.body).backgroundColor"))
            tab.shot(f"{layout}-{scheme}-{route.replace('/', '-')}")
            tab.no_errors()
        dark = {"rgb(15, 18, 22)"}
        assert backgrounds == (dark if scheme == "dark" else {"rgb(246, 247, 249)"})
    finally:
        context.close()


def test_theme_toggle_overrides_the_system(console: Console) -> None:
    console.open("server", PAGES["server"])
    page = console.page
    colors = []
    for expected in ("light", "dark", "system"):
        page.click("#theme")
        assert page.inner_text("#theme") == f"Theme: {expected}"
        colors.append(page.evaluate("getComputedStyle(document.body).backgroundColor"))
    assert colors[0] != colors[1]
    page.reload()  # remembered in this browser
    page.wait_for_selector(PAGES["server"])
    assert page.inner_text("#theme") == "Theme: system"
    console.no_errors()


def test_keyboard_only(console: Console) -> None:
    console.open("server", PAGES["server"])
    page = console.page

    def focused() -> str:
        return str(page.evaluate("document.activeElement.textContent.trim()"))

    page.keyboard.press("Tab")
    assert focused() == "Skip to content"
    for _ in range(10):
        page.keyboard.press("Tab")
        if focused() == "Models":
            break
    assert focused() == "Models"
    page.keyboard.press("Enter")
    page.wait_for_selector(PAGES["models"])
    assert page.evaluate("location.hash") == "#/models"
    assert page.evaluate("document.activeElement.tagName") == "H1"
    # The filter comes next, then the buttons of the model it leaves.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "model-filter"
    page.keyboard.type("versioned")
    page.wait_for_function("() => document.querySelectorAll('article.model').length === 1")
    for _ in range(6):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.action || ''") == "reload":
            break
    assert page.evaluate("document.activeElement.dataset.model") == "versioned"
    page.keyboard.press("Enter")
    assert page.is_visible("#confirm")
    assert page.evaluate("document.activeElement.value") == "cancel"  # the safe choice first
    page.keyboard.press("Escape")
    assert not page.is_visible("#confirm")
    assert "Reloading" not in page.inner_text('article[data-model="versioned"]')
    # The configuration's tabs: arrow keys move between them.
    console.open("models/mlp", PAGES["models/mlp"])
    page.focus('[role="tab"][aria-selected="true"]')
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.textContent") == "JSON"
    assert page.is_visible('pre[data-format="json"]')
    assert not page.is_visible('pre[data-format="pbtxt"]')
    console.no_errors()


def legend_value(page: Any, chart: str, series: str) -> float | None:
    text = page.get_attribute(f'[data-chart="{chart}"] li[data-series="{series}"]', "data-value")
    return float(text) if text else None


def test_charts_move_under_load(console: Console, console_server: ServerProcess) -> None:
    stop = threading.Event()
    sent = [0]

    def load() -> None:
        client = httpclient.InferenceServerClient(console_server.http_url)
        inputs = [httpclient.InferInput("INPUT__0", [2, 64], "FP32")]
        inputs[0].set_data_from_numpy(np.ones((2, 64), np.float32))
        deadline = time.monotonic() + 30
        while not stop.is_set() and time.monotonic() < deadline:
            client.infer("mlp", inputs)
            sent[0] += 1

    thread = threading.Thread(target=load)
    thread.start()
    try:
        console.open("charts/mlp", PAGES["charts/mlp"])
        page = console.page
        page.wait_for_function(
            """() => Number(document.querySelector('[data-chart="requests"] '
            + 'li[data-series="succeeded"]').dataset.value) > 0""",
            timeout=15_000,
        )
        line = '[data-chart="requests"] path[data-series="succeeded"]'
        before = page.get_attribute(line, "d")
        time.sleep(2.5)
        after = page.get_attribute(line, "d")
        assert before != after
        assert after.count("L") > before.count("L")  # more points
        rate = legend_value(page, "requests", "succeeded")
        assert rate is not None and rate > 5
        mean = legend_value(page, "latency", "mean, each second")
        p50 = legend_value(page, "latency", "p50, last 60 s")
        p99 = legend_value(page, "latency", "p99, last 60 s")
        assert mean is not None and p50 is not None and p99 is not None
        assert 0 < p50 <= p99
        compute = legend_value(page, "phases", "compute")
        assert compute is not None and compute > 0
        bars = page.eval_on_selector_all(
            '[data-chart="batches"] rect.bar',
            "els => els.map(e => [e.dataset.label, Number(e.dataset.value)])",
        )
        assert ["2", pytest.approx(bars[0][1])] in [list(b) for b in bars] and bars[0][1] > 0
        assert legend_value(page, "failures", "BACKEND") == 0
        console.shot("desktop-light-charts-under-load")
    finally:
        stop.set()
        thread.join()
    console.no_errors()


def state_of(page: Any, model: str) -> list[str]:
    return list(
        page.eval_on_selector_all(
            f'article[data-model="{model}"] [data-state]', "els => els.map(e => e.dataset.state)"
        )
    )


def test_unload_and_load_change_state(console: Console, console_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(console_server.http_url)
    assert client.is_model_ready("simple")
    console.open("models", PAGES["models"])
    page = console.page
    page.click('button[data-action="unload"][data-model="simple"]')
    assert "Unload model 'simple'?" in page.inner_text("#confirm")
    page.click('#confirm button[value="ok"]')
    page.wait_for_selector('article[data-model="simple"] .success')
    page.wait_for_function(
        """() => [...document.querySelectorAll('article[data-model="simple"] [data-state]')]
        .every(e => e.dataset.state !== "READY")"""
    )
    assert not client.is_model_ready("simple")
    assert "unloaded" in page.inner_text('article[data-model="simple"] td.reason')
    page.click('button[data-action="load"][data-model="simple"]')
    page.click('#confirm button[value="ok"]')
    page.wait_for_function(
        """() => [...document.querySelectorAll('article[data-model="simple"] [data-state]')]
        .some(e => e.dataset.state === "READY")""",
        timeout=30_000,
    )
    assert client.is_model_ready("simple")
    console.no_errors()


def test_a_failed_load_shows_the_reason(console: Console, console_server: ServerProcess) -> None:
    console.open("models", PAGES["models"])
    page = console.page
    page.fill("#model-filter", "broken")
    page.click('button[data-action="load"][data-model="broken"]')
    page.click('#confirm button[value="ok"]')
    error = page.wait_for_selector('article[data-model="broken"] .error[role="alert"]')
    text = error.inner_text()
    assert "400" in text and "failed to load" in text
    page.wait_for_selector('article[data-model="broken"] [data-state="UNAVAILABLE"]')
    reason = page.inner_text('article[data-model="broken"] td.reason')
    _, _, body = request(console_server.http_url, "POST", "/v2/repository/index", b"{}")
    index = {e["name"]: e for e in json.loads(body)}
    assert reason == index["broken"]["reason"]
    assert "not a ZIP archive" in reason or "failed to load" in reason
    console.shot("desktop-light-models-failed-load")
    # The browser logs the refused request itself; nothing else may appear.
    console.no_errors(allowed=r"status of 400")


def read_output(page: Any, name: str) -> np.ndarray:
    values = page.eval_on_selector_all(
        f'[data-output="{name}"] td[data-value]', "els => els.map(e => e.dataset.value)"
    )
    return np.array([float(v) for v in values])


def test_try_it_gives_tritonclients_numbers(
    console: Console, console_server: ServerProcess
) -> None:
    client = httpclient.InferenceServerClient(console_server.http_url)
    console.open("try/mlp", PAGES["try/mlp"])
    page = console.page
    x = np.random.default_rng(5).normal(size=(2, 64)).astype(np.float32)
    page.fill('fieldset[data-input="INPUT__0"] input.dim', "2")
    page.check('fieldset[data-input="INPUT__0"] input[value="values"]')
    page.fill('fieldset[data-input="INPUT__0"] textarea', json.dumps(x.tolist()))
    page.click('form.try button[type="submit"]')
    page.wait_for_selector('[data-output="OUTPUT__0"] td[data-value]')
    inputs = [httpclient.InferInput("INPUT__0", [2, 64], "FP32")]
    inputs[0].set_data_from_numpy(x)
    expected = client.infer("mlp", inputs).as_numpy("OUTPUT__0")
    shown = read_output(page, "OUTPUT__0").astype(np.float32).reshape(2, 10)
    assert np.array_equal(shown, expected)
    assert re.match(r"Answered in [\d.,]+ ms", page.inner_text('[data-field="timing"]'))
    console.shot("desktop-light-try-mlp-answer")

    # Random input: the request shown is the one sent, and replays to the same answer.
    page.check('fieldset[data-input="INPUT__0"] input[value="random"]')
    page.fill("#try-seed", "42")
    preview = 'pre[data-format="request"]'
    typed_request = page.text_content(preview)
    page.click('form.try button[type="submit"]')
    page.wait_for_function(
        "(old) => document.querySelector('pre[data-format=\"request\"]').textContent !== old",
        arg=typed_request,
    )
    page.wait_for_selector('[data-output="OUTPUT__0"] td[data-value]', state="attached")
    sent = json.loads(page.text_content(preview) or "")
    random_x = np.array(sent["inputs"][0]["data"], np.float32).reshape(2, 64)
    assert not np.array_equal(random_x, x)
    inputs[0].set_data_from_numpy(random_x)
    expected = client.infer("mlp", inputs).as_numpy("OUTPUT__0")
    assert np.array_equal(
        read_output(page, "OUTPUT__0").astype(np.float32).reshape(2, 10), expected
    )

    # A file of the tensor's raw bytes goes as binary data.
    raw = np.random.default_rng(9).normal(size=(2, 64)).astype("<f4")
    page.check('fieldset[data-input="INPUT__0"] input[value="file"]')
    page.set_input_files(
        'fieldset[data-input="INPUT__0"] input[type="file"]',
        files=[{"name": "x.bin", "mimeType": "application/octet-stream", "buffer": raw.tobytes()}],
    )
    page.click('form.try button[type="submit"]')
    page.wait_for_function(
        "() => document.querySelector('pre[data-format=\"request\"]').textContent"
        ".includes('binary_data_size')"
    )
    page.wait_for_selector('[data-output="OUTPUT__0"] td[data-value]', state="attached")
    inputs[0].set_data_from_numpy(raw.astype(np.float32))
    expected = client.infer("mlp", inputs).as_numpy("OUTPUT__0")
    assert np.array_equal(
        read_output(page, "OUTPUT__0").astype(np.float32).reshape(2, 10), expected
    )
    page.set_input_files(
        'fieldset[data-input="INPUT__0"] input[type="file"]',
        files=[{"name": "x.bin", "mimeType": "application/octet-stream", "buffer": b"\0" * 12}],
    )
    page.click('form.try button[type="submit"]')
    message = page.wait_for_selector(
        'fieldset[data-input="INPUT__0"] .field-error:not([hidden])'
    ).inner_text()
    assert "the file has 12 bytes; shape [2, 64] of FP32 needs 512" in message

    # A mistake is shown at its input, and nothing is sent.
    page.check('fieldset[data-input="INPUT__0"] input[value="values"]')
    page.fill('fieldset[data-input="INPUT__0"] textarea', "1 2 3")
    page.click('form.try button[type="submit"]')
    message = page.wait_for_selector(
        'fieldset[data-input="INPUT__0"] .field-error:not([hidden])'
    ).inner_text()
    assert "3 values given, the shape needs 128" in message
    console.no_errors()


def test_try_it_with_integers_and_a_body_of_ones_own(
    console: Console, console_server: ServerProcess
) -> None:
    console.open("try/simple", PAGES["try/simple"])
    page = console.page
    a, b = list(range(16)), [3] * 16
    for name, values in (("INPUT0", a), ("INPUT1", b)):
        page.check(f'fieldset[data-input="{name}"] input[value="values"]')
        page.fill(f'fieldset[data-input="{name}"] textarea', " ".join(map(str, values)))
    page.click('form.try button[type="submit"]')
    page.wait_for_selector('[data-output="OUTPUT1"] td[data-value]')
    assert read_output(page, "OUTPUT0").tolist() == [x + 3 for x in a]
    assert read_output(page, "OUTPUT1").tolist() == [x - 3 for x in a]
    # The request was copied to the second form; a model error is shown where it happens.
    body = json.loads(page.input_value("#own-body"))
    body["inputs"][0]["datatype"] = "FP32"
    page.fill("#own-body", json.dumps(body))
    page.click('section[data-section="try-own"] button[type="submit"]')
    error = page.wait_for_selector('[data-part="try-result"] .error')
    assert "400" in error.inner_text() and "INPUT0" in error.inner_text()
    console.no_errors(allowed=r"status of 400")


def test_the_config_as_pbtxt_is_the_config(console: Console, console_server: ServerProcess) -> None:
    for model in ("mlp", "versioned"):
        console.open(f"models/{model}", PAGES["models/mlp"])
        text = console.page.inner_text('pre[data-format="pbtxt"]')
        shown_json = json.loads(console.page.text_content('pre[data-format="json"]') or "")
        _, _, body = request(console_server.http_url, "GET", f"/v2/models/{model}/config")
        config = json.loads(body)
        assert shown_json == config
        assert parse_config(text, model) == json_format.ParseDict(config, ModelConfig())
        facts = console.page.inner_text('[data-section="batching"]')
        assert f"max_batch_size\n{config['max_batch_size']}" in facts
        groups = console.page.inner_text('[data-section="instances"]')
        assert config["instance_group"][0]["kind"] in groups
    console.no_errors()


def test_a_restricted_server(browser: Any, restricted_server: ServerProcess) -> None:
    """A proxy lets the console's files through (it adds the header to them); the API calls
    fail where they are shown until the person sets the header under Connection."""
    context = browser.new_context(viewport=DESKTOP)
    try:
        page = context.new_page()
        tab = Console(page, restricted_server.http_url)

        def add_header(route: Any) -> None:
            route.continue_(headers={**route.request.headers, HEADER: SECRET})

        page.route(re.compile(r".*/console/.*"), add_header)
        tab.open("server", '[data-part="about"] .error')
        about = page.inner_text('[data-part="about"]')
        assert "403" in about and f"expecting header '{HEADER}'" in about
        assert "Connection" in about  # the hint says where to fix it
        tab.shot("desktop-light-server-restricted")
        page.click("#settings-open")
        page.fill("#header-name", HEADER)
        page.fill("#header-value", SECRET)
        page.click('#settings button[value="save"]')
        page.wait_for_selector('[data-field="version"]')
        assert page.inner_text("#connection-status") == f"Sending {HEADER}"
        page.wait_for_selector('[data-field="ready"] .badge')
        assert page.inner_text('[data-field="ready"]') == "not ready"  # `broken` failed
        # The browser logs each 4xx answer: the refusals before the header was set, and
        # /v2/health/ready's 400, which is how the v2 protocol says "not ready".
        tab.no_errors(allowed=r"status of (403|400)")
    finally:
        context.close()


@pytest.fixture(scope="module")
def none_mode_server(example_repository: Path) -> Iterator[ServerProcess]:
    """Control mode none, latency summaries off."""
    with ServerProcess([example_repository]) as server:
        yield server


def test_without_explicit_mode_and_summaries(browser: Any, none_mode_server: ServerProcess) -> None:
    """The buttons are disabled and say why; the latency chart says where percentiles come
    from instead of inventing them."""
    context = browser.new_context(viewport=DESKTOP)
    try:
        tab = Console(context.new_page(), none_mode_server.http_url)
        tab.open("models", PAGES["models"])
        page = tab.page
        buttons = page.query_selector_all("button[data-action]")
        assert buttons and all(b.is_disabled() for b in buttons)
        note = page.inner_text("#control-note")
        assert "--model-control-mode=none" in note and "--model-control-mode=explicit" in note
        assert buttons[0].get_attribute("aria-describedby") == "control-note"
        tab.shot("desktop-light-models-none-mode")
        tab.open("charts/mlp", PAGES["charts/mlp"])
        page.wait_for_function(
            "() => document.querySelector('[data-chart=\"latency\"] .chart-note').textContent"
            " !== ''"
        )
        latency = page.inner_text('[data-chart="latency"]')
        assert "summary_latencies=true" in latency
        assert page.query_selector('[data-chart="latency"] li[data-series^="p50"]') is None
        assert page.query_selector('[data-chart="latency"] li[data-series="mean, each second"]')
        tab.no_errors()
    finally:
        context.close()
