"""Headless Chromium for the browser tests: one Chromium per test session, made new for each test.

Starting Chromium with chromedriver costs about 1 s and quitting it 3-5 s; making a running one new
costs well under 0.2 s. :class:`Chromium` holds the session's driver (started when a test first asks
for one) and :meth:`Chromium.lend` hands it to a test as a new browser would be: one fresh tab at
``about:blank`` (so nothing installed in a page by DevTools, such as
``Page.addScriptToEvaluateOnNewDocument``, and no frame or alert carries over), no cookies, no web
storage in the origins the previous test opened, an empty HTTP cache, the default timeouts and
window size. A driver that no longer answers (Chromium crashed or hung) is quit and replaced by a
new one. After the test the tab goes to ``about:blank``, so no script of its pages runs on (polling
the live server, posting answers) while the database is emptied for the next test.

``tests/conftest.py`` provides the fixtures ``chromium`` (session) and ``browser`` (each test)."""
from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import urllib3
from selenium import webdriver
from selenium.common.exceptions import WebDriverException

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
WINDOW = (1400, 2200)
#: what a driver whose Chromium or chromedriver died raises (the latter: its port refuses)
DEAD = (WebDriverException, OSError, urllib3.exceptions.HTTPError)
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync")


class RecordingChrome(webdriver.Chrome):
    """Selenium's Chrome driver that notes the origin of every page it is told to open (``get``),
    so that :meth:`Chromium.reset` can clear those origins' web storage."""

    def __init__(self, *args, **kwargs):
        self.origins: set[str] = set()
        super().__init__(*args, **kwargs)

    def get(self, url: str) -> None:
        """Open ``url`` (as Selenium does), noting its origin."""
        self.origins.add(origin_of(url))
        super().get(url)


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (``file://`` for local files)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def start_chromium(profile: Path) -> RecordingChrome:
    """A new headless Chromium (Debian's chromium + chromedriver) with its profile in ``profile``;
    fails the test when either program is missing."""
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.fail("chromium and chromedriver are required (./run test installs Debian's chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}"):
        options.add_argument(flag)
    return RecordingChrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))


class Chromium:
    """The session's Chromium: started on first use, made new for each test, replaced when dead.
    ``starts`` counts the Chromium processes started (tests/test_browser_reuse.py reads it)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.driver: RecordingChrome | None = None
        self.starts = 0

    def _start(self) -> RecordingChrome:
        self.starts += 1
        self.driver = start_chromium(self.directory / f"profile-{self.starts}")
        return self.driver

    def quit(self) -> None:
        """Quit the running Chromium, if any (errors of a dead one are ignored)."""
        driver, self.driver = self.driver, None
        if driver is not None:
            try:
                driver.quit()
            except DEAD:
                pass

    def reset(self, driver: RecordingChrome) -> None:
        """Make ``driver`` as a new browser: a fresh tab at about:blank, every other tab closed, no
        cookies, no web storage in the origins it opened, an empty cache, default timeouts and window
        size. Raises one of :data:`DEAD` when the driver does not answer."""
        old = driver.window_handles
        for handle in old:  # the origins of pages reached by clicks and redirects, not only by get()
            driver.switch_to.window(handle)
            driver.origins.add(origin_of(driver.current_url))
        driver.switch_to.new_window("tab")
        fresh = driver.current_window_handle
        for handle in old:
            driver.switch_to.window(handle)
            driver.close()
        driver.switch_to.window(fresh)
        driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
        driver.execute_cdp_cmd("Network.clearBrowserCache", {})
        for origin in driver.origins - {"about://"}:
            driver.execute_cdp_cmd("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
        driver.origins.clear()
        driver.implicitly_wait(0)  # Selenium's defaults (setting Timeouts to 0 would be ignored)
        driver.set_page_load_timeout(300)
        driver.set_script_timeout(30)
        if driver.get_window_size() != {"width": WINDOW[0], "height": WINDOW[1]}:
            driver.set_window_size(*WINDOW)

    def new(self) -> RecordingChrome:
        """The driver, made new (:meth:`reset`), or a new Chromium when the old one does not answer."""
        if self.driver is not None:
            try:
                self.reset(self.driver)
                return self.driver
            except DEAD:
                self.quit()
        return self._start()

    def lend(self):
        """Generator for a function-scoped fixture: yield the driver made new, then leave its tab on
        about:blank (or quit it, to be replaced, when that fails)."""
        driver = self.new()
        yield driver
        try:
            driver.switch_to.default_content()
            driver.get("about:blank")
        except DEAD:
            self.quit()
