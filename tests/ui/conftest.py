"""A real headless Chromium against a real uvicorn server on 127.0.0.1 with the example data.

The browser is Debian's ``chromium`` driven by Debian's ``chromedriver`` through Selenium (the
driver path is given, so Selenium never looks for a driver to download). Host names resolve
to nothing (``--host-resolver-rules``): the pages must work with the network unplugged.

The server holds the bundled example domains and dataset (``dmf_hybrid._internal.examples``) and a
small story written on top: Chinese places, edits with actors, reasons and trace ids, a trip
whose budget cut raises a rule constraint, and a suggestion for it. The story is written under
a ticking clock, so its times are the same on every run (the screenshots in docs/http.md show them).
Keys: ``ui-admin``, ``ui-writer``, ``ui-reader`` for tenant ``default`` and ``ui-other``
(writer) for tenant ``other``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.api.auth import hash_key
from dmf_hybrid._internal.api.server import serve_in_thread
from dmf_hybrid._internal.examples import EXAMPLES_DIR, load_example_data, load_example_types
from tests.store import ticking_clock

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
KEYS = ("ui-admin:default:admin,ui-writer:default:writer,ui-reader:default:reader,"
        "ui-other:other:writer")
WAIT = 30.0  # seconds an element may take to appear on a busy 2-core machine (not asserted)
CLOCK_START = dt.datetime(2025, 4, 20, 9, 0, tzinfo=dt.UTC)
WINDOW = (1400, 900)  # the viewport (pages and screenshots), set through DevTools
CHROME_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                f"--window-size={WINDOW[0]},{WINDOW[1] + 200}", "--hide-scrollbars",
                "--force-device-scale-factor=1", "--lang=en-US",
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1")
DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"

YU_GARDEN = {"name": "豫园", "city": "上海", "category": "park",
             "description": "明代古典园林：九曲桥、湖心亭和点春堂。A classical Ming garden.",
             "estimated_cost": 40.0}
NANXIANG = {"name": "南翔馒头店", "city": "上海", "category": "restaurant",
            "description": "豫园旁的小笼包老店: soup dumplings since 1900.",
            "estimated_cost": 80.0}


def key_label(key: str) -> str:
    """The actor name the service records for writes made with ``key``."""
    return f"key:{hash_key(key)[:8]}"


def require_browser() -> None:
    """Fail (in CI, or as root, who could install it) or skip when Chromium is missing."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    message = ("the UI tests need Debian's chromium and chromium-driver (/usr/bin/chromium, "
               "/usr/bin/chromedriver); `make test` installs them when run as root")
    if os.environ.get("CI") or os.geteuid() == 0:
        pytest.fail(message)
    pytest.skip(message)


@dataclass(frozen=True)
class Story:
    """The entities the tests look at, and the audit seq once the story is written."""

    yu_garden: str
    nanxiang: str
    trip: str
    budget_constraint: str
    head: int


def write_story(mem: Memory) -> Story:
    """Chinese places, edits with actors, reasons and trace ids, a rule constraint."""
    planner = "agent:planner"
    yu = mem.create("PointOfInterest", YU_GARDEN, actor=planner, reason="用户提到想去豫园",
                    trace_id="trace-0a1")
    nanxiang = mem.create("PointOfInterest", NANXIANG, actor=planner, trace_id="trace-0a1")
    mem.update(yu.id, {"estimated_cost": 50.0}, actor=planner,
               reason="门票涨价 (ticket price rose)", trace_id="trace-0b2")
    mem.update(yu.id, {"rating": 4.6, "start_time": "09:30", "duration_hours": 2.5},
               actor="user:linwei", reason="rated after the visit", trace_id="trace-0c3")
    trip = mem.query("Trip", where={"user": "linwei"}).items[0]
    mem.link(trip.id, "includes", yu.id, actor=planner, reason="add to the itinerary",
             trace_id="trace-0d4")
    mem.update(trip.id, {"budget": 150.0}, actor="user:linwei", reason="预算减少",
               trace_id="trace-0e5")
    raised = mem.open_constraints({"subject": trip.id, "rule": "trip_over_budget"}).items
    assert len(raised) == 1, "the budget cut must raise the trip_over_budget constraint"
    mem.create("Suggestion", {"constraint": raised[0].id, "text": "去掉最贵的一站 (drop the "
                              "priciest stop)", "source": planner}, actor=planner)
    return Story(yu_garden=yu.id, nanxiang=nanxiang.id, trip=trip.id,
                 budget_constraint=raised[0].id, head=mem.last_seq())


STORY_OWN_FILES = ("travel-zh.jsonl",)  # example files that already hold the story's places


def seed_english_examples(mem: Memory, scratch: Path) -> None:
    """The example types and data, less the files whose places the story writes itself."""
    load_example_types(mem)
    scratch.mkdir()
    for path in sorted(EXAMPLES_DIR.glob("*.jsonl")):
        if path.name not in STORY_OWN_FILES:
            (scratch / path.name).symlink_to(path)
    load_example_data(mem, scratch)


@dataclass
class Server:
    """A running service: its base URL, the Memory behind it and the story written into it."""

    url: str
    memory: Memory
    story: Story


@contextmanager
def serving(mem: Memory, tmp: Path, **settings: Any) -> Iterator[str]:
    """Serve ``mem`` on a free 127.0.0.1 port with the test keys (unless overridden)."""
    values: dict[str, Any] = {"data_dir": tmp, "embedder": "hash", "api_keys": KEYS,
                              "load_examples": False}
    values.update(settings)
    with serve_in_thread(create_app(Settings(**values), mem), timeout=WAIT) as url:
        yield url


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The example data and the story, served with the test keys."""
    root = tmp_path_factory.mktemp("ui")
    mem = Memory.open(root / "data", embedder=HashEmbedder())
    try:
        with ticking_clock(CLOCK_START, dt.timedelta(seconds=7)):
            seed_english_examples(mem, root / "examples")
            story = write_story(mem)
        with serving(mem, root / "data") as url:
            yield Server(url, mem, story)
    finally:
        mem.close()


@dataclass
class Request:
    """A request a page made, and why the browser refused to send it (e.g. "csp"), if it did."""

    url: str
    blocked: str | None = None


class Browser:
    """One Chromium tab: open inspector pages with a key, wait for elements, read the network."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def open(self, base_url: str, fragment: str = "/types", key: str | None = None) -> None:
        """Load ``/ui/#<fragment>`` afresh with ``key`` in sessionStorage (None: no key)."""
        self.driver.get(f"{base_url}/healthz")  # same origin: sessionStorage is shared
        if key is None:
            self.driver.execute_script("sessionStorage.clear()")
        else:
            self.driver.execute_script("sessionStorage.setItem('dmf.apiKey', arguments[0])", key)
        self.driver.get(f"{base_url}/ui/#{fragment}")

    def go(self, fragment: str) -> None:
        """Follow an in-page link to ``#<fragment>`` (no reload)."""
        self.driver.execute_script("window.location.hash = arguments[0]", fragment)

    def wait(self, css: str, text: str | None = None) -> Any:
        """The first element matching ``css`` (and containing ``text``) once there is one."""
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        def found(driver: Any) -> Any:
            try:
                for el in driver.find_elements(By.CSS_SELECTOR, css):
                    if text is None or text in el.text:
                        return el
            except StaleElementReferenceException:  # the page re-rendered meanwhile
                pass
            return False

        from selenium.common.exceptions import TimeoutException

        try:
            return WebDriverWait(self.driver, WAIT).until(found)
        except TimeoutException:
            page = self.driver.execute_script("return document.body ? document.body.innerText : ''")
            raise AssertionError(f"no element {css!r}" + (f" with text {text!r}" if text else "")
                                 + f" at {self.driver.current_url}; the page says:\n{page[:4000]}"
                                 ) from None

    def all(self, css: str) -> list[Any]:
        """Every element matching ``css`` now."""
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def texts(self, css: str) -> list[str]:
        """The visible text of every element matching ``css``."""
        return [el.text for el in self.all(css)]

    def fill(self, css: str, text: str) -> None:
        """Replace the value of the input or textarea ``css``."""
        el = self.wait(css)
        el.clear()
        el.send_keys(text)

    def choose(self, css: str, value: str) -> None:
        """Select the option with ``value`` in the <select> ``css``."""
        from selenium.webdriver.support.ui import Select

        Select(self.wait(css)).select_by_value(value)

    def click(self, css: str, text: str | None = None) -> None:
        """Click the element ``css`` (containing ``text``)."""
        self.wait(css, text).click()

    def fragment(self) -> str:
        """The current ``#...`` route without the ``#``."""
        return str(self.driver.execute_script("return window.location.hash")).lstrip("#")

    def requests(self) -> list[Request]:
        """What the pages requested since the last call (Chrome's performance log)."""
        sent: dict[str, Request] = {}
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            params = message.get("params", {})
            if message.get("method") == "Network.requestWillBeSent":
                sent[params["requestId"]] = Request(params["request"]["url"])
            elif message.get("method") == "Network.loadingFailed" and \
                    params.get("requestId") in sent:
                sent[params["requestId"]].blocked = params.get("blockedReason")
        return list(sent.values())

    def console_errors(self) -> list[str]:
        """Console errors since the last call, other than failed (4xx) API answers."""
        return [e["message"] for e in self.driver.get_log("browser")
                if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]]

    def screenshot(self, path: Path) -> bytes:
        """A PNG of the viewport, written to ``path``; its bytes."""
        data = base64.b64decode(self.driver.get_screenshot_as_base64())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return data


@pytest.fixture(scope="package")
def chromium() -> Iterator[Any]:
    """One headless Chromium for the UI tests, with a fresh profile; quit at the end."""
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.TemporaryDirectory(prefix="dmf-ui-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROME_FLAGS, f"--user-data-dir={profile.name}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)),
                              options=options)
    try:
        driver.set_page_load_timeout(WAIT)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False})
        yield driver
    finally:
        driver.quit()
        profile.cleanup()


@pytest.fixture
def browser(chromium: Any) -> Iterator[Browser]:
    """The shared tab; a test fails if its pages logged a JavaScript error."""
    tab = Browser(chromium)
    tab.console_errors()
    tab.requests()
    yield tab
    errors = tab.console_errors()
    assert not errors, f"JavaScript errors: {errors}"

