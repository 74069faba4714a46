"""The session's one Chromium (tests/browser.py) is, for each test, as a new browser would be, and a
dead one is replaced: what the browser tests' independence rests on since they share it."""
import contextlib
import functools
import os
import signal
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from selenium.common.exceptions import WebDriverException

STATE = ("return [document.cookie, localStorage.length, sessionStorage.length, typeof window.__installed,"
         " window.innerWidth, window.innerHeight]")


@contextlib.contextmanager
def served(directory):
    """An HTTP server on a free loopback port serving ``directory``; yields its origin."""
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_each_test_gets_the_browser_as_new(chromium, tmp_path):
    (tmp_path / "page.html").write_text("<!DOCTYPE html><title>page</title><p>page</p>")
    with served(tmp_path) as origin, served(tmp_path) as other:
        lent = chromium.lend()
        driver = next(lent)
        starts = chromium.starts
        driver.get(origin + "/page.html")
        new_state = driver.execute_script(STATE)
        assert new_state[:4] == ["", 0, 0, "undefined"]
        # a test leaves cookies, web storage, an installed script, a small window, a second tab
        # (reached by a click, not get()), a frame and timeouts of its own
        driver.execute_script("document.cookie = 'seen=1; max-age=3600'; localStorage.setItem('k', 'v');"
                              " sessionStorage.setItem('s', 'v')")
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": "window.__installed = 1"})
        driver.set_window_size(390, 844)
        driver.execute_script("const a = document.createElement('a'); a.href = arguments[0]; a.target = '_blank';"
                              " a.id = 'out'; a.textContent = 'out'; document.body.append(a);", other + "/page.html")
        driver.find_element("id", "out").click()
        driver.switch_to.window(driver.window_handles[-1])
        driver.execute_script("localStorage.setItem('k2', 'v2')")
        driver.switch_to.window(driver.window_handles[0])
        driver.get(origin + "/page.html")
        assert driver.execute_script(STATE)[:4] == ["seen=1", 1, 1, "number"]
        driver.implicitly_wait(3)
        next(lent, None)
        assert driver.current_url == "about:blank"  # after the test: no page script runs on

        again = chromium.new()
        assert again is driver and chromium.starts == starts  # the same Chromium, not a new one
        assert len(driver.window_handles) == 1 and driver.current_url == "about:blank"
        assert driver.timeouts.implicit_wait == 0
        driver.get(origin + "/page.html")
        assert driver.execute_script(STATE) == new_state
        driver.get(other + "/page.html")
        assert driver.execute_script("return localStorage.length") == 0


def chromium_pids(driver):
    """The Chromium processes chromedriver started (its children)."""
    pid = driver.service.process.pid
    return [int(child) for task in Path(f"/proc/{pid}/task").iterdir()
            for child in (task / "children").read_text().split()]


def test_a_crashed_or_closed_chromium_is_replaced(chromium, tmp_path):
    driver = chromium.new()
    starts = chromium.starts
    pids = chromium_pids(driver)
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    replaced = chromium.new()
    assert chromium.starts == starts + 1 and replaced is not driver
    with contextlib.suppress(WebDriverException):
        driver.quit()
    (tmp_path / "page.html").write_text("<!DOCTYPE html><title>alive</title>")
    replaced.get((tmp_path / "page.html").as_uri())
    assert replaced.title == "alive"
    replaced.quit()  # ended behind the session's back (a test that quit it)
    fresh = chromium.new()
    assert chromium.starts == starts + 2
    fresh.get((tmp_path / "page.html").as_uri())
    assert fresh.title == "alive"
