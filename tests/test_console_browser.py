"""The console in a real browser, against a real `roses run`.

Debian's Chromium, driven through Selenium by Debian's ``chromium-driver``, logs in to
the console of a daemon polling a local feed server on 127.0.0.1 (a wrong password
first), types a filter into the editor and sees the preview list the matching items,
types a mistake and sees the problem at its line and column, fixes it, applies it, and
then reads the new stream's feed over HTTP: the daemon took it without a restart.
Every console page is photographed at a desktop's width (1280 px) and a phone's (390
px), into ``test-artifacts/console/`` (ignored by git; the test prints where), and at
390 px nothing may stick out of the page except inside a box that scrolls.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from system_packages import require
from test_connector_support import FeedServer
from test_e2e import Site, free_port, wait_for
from test_lifecycle import Job

from roses_app.config.console import hash_password

# skipped before any fixture when the browser or its driver is missing (failed under CI)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.requires("chromium-browser", "chromium-driver"),
    pytest.mark.xdist_group("console-browser"),  # one daemon and one browser for the file
]

PASSWORD = "volcanic ash and basalt"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "console"
DESKTOP, PHONE = (1280, 900), (390, 844)
CONFIG = """\
settings:
  data_dir: {data}
  http: {{host: 127.0.0.1, port: {port}}}
  spark: {{master: "local[2]", trigger: 500ms}}
  console: {{password_hash: '{hash}'}}
sources:
  news: {{feed: "{feed}", every: 1s}}
streams:
  everything:
    filter: {{from: news, where: "true()"}}
    publish: {{title: "Everything"}}
"""
ITEMS = [
    ("g0", "Volcano erupts near Grindavik"),
    ("g1", "Cup final goes to extra time"),
    ("g2", "Volcano ash closes two airports"),
    ("g3", "Markets rally on rate cut"),
]
# What sticks out of the viewport: the page's scroll width, and each element whose right
# edge is beyond it, unless a box between it and the page scrolls (overflow-x auto/scroll).
LAYOUT = """
var width = arguments[0], wide = [];  // the screen's, not innerWidth: a phone zooms out
function inScroller(e) {
  for (var p = e.parentElement; p && p !== document.documentElement; p = p.parentElement) {
    var o = getComputedStyle(p).overflowX;
    if (o === 'auto' || o === 'scroll') { return true; }
  }
  return false;
}
document.querySelectorAll('body *').forEach(function (e) {
  var r = e.getBoundingClientRect();
  if (r.width > 0 && (r.right > width + 0.5 || r.left < -0.5) && !inScroller(e)) {
    var cls = typeof e.className === 'string' && e.className ? '.' + e.className : '';
    wide.push(e.tagName + (e.id ? '#' + e.id : '') + cls + ' '
      + Math.round(r.left) + '..' + Math.round(r.right));
  }
});
return {width: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
        wide: wide.slice(0, 20)};
"""


class Console:
    """The daemon, its feed, and a Chromium driven by Selenium."""

    def __init__(self, job: Job, driver: Any) -> None:
        self.job, self.driver = job, driver
        self.base = job.url("")

    def go(self, path: str) -> None:
        self.driver.get(self.base + path)

    def by_id(self, name: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.ID, name)

    def text_of(self, name: str) -> str:
        from selenium.common.exceptions import (
            NoSuchElementException,
            StaleElementReferenceException,
        )

        try:
            return str(self.by_id(name).text)
        except (NoSuchElementException, StaleElementReferenceException):
            return ""

    def wait_text(self, name: str, pattern: str, what: str, timeout: float = 60) -> str:
        return str(wait_for(lambda: re.search(pattern, self.text_of(name)) and self.text_of(name),
                            timeout, f"{what} (#{name} matching {pattern!r})"))  # fmt: skip

    def width(self, size: tuple[int, int]) -> None:
        width, height = size
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600,
        })  # fmt: skip

    def type_into(self, name: str, text: str) -> None:
        field = self.by_id(name)
        field.clear()
        field.send_keys(text)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    require("chromium-browser")
    driver_path = require("chromium-driver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:  # the test extra: pip install -e '.[test]'
        pytest.fail("selenium is missing: .venv/bin/pip install -e '.[test]'")
    folder = tmp_path_factory.mktemp("console-browser")
    server = FeedServer()
    port = free_port()
    config = folder / "feeds.yaml"
    config.write_text(CONFIG.format(data=folder / "data", port=port, feed=server.url("/news.xml"),
                                    hash=hash_password(PASSWORD, n=16)))  # fmt: skip
    site = Site(server)
    site.publish(*ITEMS)
    job = Job(config, port, folder / "roses.log")
    driver = None
    try:
        job.start()
        options = webdriver.ChromeOptions()
        options.binary_location = str(require("chromium-browser"))
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--hide-scrollbars", f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
                     f"--user-data-dir={folder / 'profile'}"):  # fmt: skip
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(str(driver_path)))
        driver.set_page_load_timeout(60)
        wait_for(lambda: len(job.guids("/feeds/everything.rss")) == len(ITEMS), 120, "the items")
        yield Console(job, driver)
    except BaseException:
        print(f"--- roses.log:\n{(folder / 'roses.log').read_text()[-6000:]}")
        raise
    finally:
        if driver is not None:
            driver.quit()
        if job.proc is not None and job.proc.poll() is None:
            job.kill_everything()
        server.close()


def logged_in(console: Console) -> None:
    console.go("/console/")
    if console.driver.current_url.endswith("/console/login"):
        console.type_into("login-password", PASSWORD)
        console.by_id("login-button").click()
        wait_for(lambda: console.driver.current_url == console.base + "/console/", 30, "login")


def check_layout(console: Console, page: str) -> None:
    layout = console.driver.execute_script(LAYOUT, PHONE[0])
    assert layout["width"] == PHONE[0], (page, layout)  # not zoomed out to fit something
    assert layout["scrollWidth"] <= PHONE[0], (page, layout)
    assert layout["wide"] == [], (page, layout)


def shoot(console: Console, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target = ARTIFACTS / f"{name}.png"
    assert console.driver.save_screenshot(str(target)), target
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, (target, len(data))
    print(f"screenshot: {target}")
    return target


def test_a_wrong_password_is_refused_and_the_right_one_logs_in(console: Console) -> None:
    console.width(DESKTOP)
    console.driver.delete_all_cookies()
    console.go("/console/")
    assert console.driver.current_url.endswith("/console/login")
    console.type_into("login-password", "not the password")
    console.by_id("login-button").click()
    console.wait_text("login-form", r"Log in", "the login page again")
    page = str(console.driver.find_element("tag name", "body").text)
    assert "Wrong password." in page
    console.type_into("login-password", PASSWORD)
    console.by_id("login-button").click()
    wait_for(lambda: console.driver.current_url == console.base + "/console/", 30, "the overview")
    assert "Wrong password." not in console.driver.page_source


def test_a_filter_typed_previewed_fixed_applied_and_read(console: Console) -> None:
    console.width(DESKTOP)
    logged_in(console)
    console.go("/console/editor")
    assert console.by_id("editor-form") and console.by_id("preview")
    console.type_into("editor-name", "volcano")
    console.type_into("editor-source", "news")
    assert console.by_id("editor-kind").get_attribute("value") == "where"
    assert console.by_id("editor-publish").is_selected()
    console.type_into("editor-text", "contains(title, 'Volcano')")
    console.wait_text("preview-status", r"^2 of \d+ items match", "the preview's count")
    titles = console.wait_text("preview-items", "Grindavik", "the matching items")
    assert titles.count("Volcano") == 2 and "Cup final" not in titles, titles
    assert "news" in console.text_of("preview-counts")
    shoot(console, "desktop-editor-preview")

    console.type_into("editor-text", "contains(title, 'Volcano'")  # a parenthesis missing
    console.wait_text("preview-status", r"problem\(s\)", "the problem")
    problem = console.text_of("problems")
    assert re.match(r"line 1, column \d+: ", problem), problem
    assert console.text_of("preview-items") == ""
    assert console.by_id("preview-text").is_displayed()  # the line shown, the place marked
    shoot(console, "desktop-editor-problem")

    console.type_into("editor-text", "contains(title, 'Volcano')")
    console.wait_text("preview-status", r"^2 of \d+ items match", "the fixed preview")
    assert console.text_of("problems") == ""
    console.by_id("apply-button").click()
    result = console.wait_text("reload-result", r"volcano", "the reload's result")
    assert "Applied volcano" in str(console.driver.title) or "Applied volcano" in (
        console.driver.find_element("tag name", "h1").text
    ), result
    assert console.text_of("apply-problems") == ""
    # the daemon runs the new stream without a restart: its feed has the two items
    pid = console.job.proc.pid if console.job.proc else None
    wait_for(lambda: sorted(console.job.guids("/feeds/volcano.rss")) == ["g0", "g2"], 90,
             "the new stream's feed")  # fmt: skip
    assert console.job.proc is not None and console.job.proc.pid == pid
    assert console.job.proc.poll() is None
    feed = httpx.get(console.job.url("/feeds/volcano.rss"), timeout=10).text
    assert "Volcano erupts near Grindavik" in feed and "Cup final" not in feed


PAGES = {
    "overview": "/console/",
    "sources": "/console/sources",
    "source": "/console/sources/news",
    "streams": "/console/streams",
    "stream": "/console/streams/everything",
    "editor": "/console/editor",
}


def test_the_layout_check_sees_what_sticks_out(console: Console) -> None:
    """The control: a wide element is reported, unless a box around it scrolls."""
    console.width(PHONE)
    logged_in(console)
    console.driver.execute_script(
        "var s = document.createElement('div'); s.style.overflowX = 'auto';"
        "s.innerHTML = '<div style=\"width:900px\">scrolls</div>';"
        "document.querySelector('main').appendChild(s);"
    )
    check_layout(console, "with a scrolling box")
    console.driver.execute_script(
        "var d = document.createElement('div'); d.id = 'too-wide'; d.textContent = 'wide';"
        "d.style.width = '900px';"
        "document.querySelector('main').appendChild(d);"
    )
    layout = console.driver.execute_script(LAYOUT, PHONE[0])
    assert layout["scrollWidth"] > PHONE[0]
    with pytest.raises(AssertionError):
        check_layout(console, "with a wide box")
    assert [w for w in layout["wide"] if w.startswith("DIV#too-wide ")], layout


@pytest.mark.parametrize("size", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_every_page_photographed_and_fits(console: Console, size: tuple[int, int]) -> None:
    console.width(size)
    logged_in(console)
    label = "desktop" if size == DESKTOP else "phone"
    for name, path in PAGES.items():
        console.go(path)
        assert console.driver.current_url.startswith(console.base + path), "logged out?"
        assert console.driver.execute_script("return document.readyState") == "complete"
        if size == PHONE:
            check_layout(console, path)
        shoot(console, f"{label}-{name}")
    print(f"the console's screenshots are in {ARTIFACTS}")
