"""Screenshots of the main pages for docs/screenshots/, taken from the demo (``./run demo`` first).

Starts ``manage.py runserver`` on a free loopback port against the demo database (the quick-start
SQLite file under var/, or ``--database-url``), logs in as the demo superuser through the login form,
opens each page of :data:`PAGES` in headless Chromium (Debian's chromium + chromium-driver) at a
desktop width (1400 px) and, for the pages marked so, a phone width (390 px), waits for its
interactive charts to be drawn, and saves ``docs/screenshots/<name>-<width>.png``. The README and
docs/dashboard.md show these files, so what a new user sees is what the demo gives.

Run: .venv/bin/python scripts/screenshots.py [--database-url URL] [--out docs/screenshots]
     [--user demo --password demo] [--only NAME ...]
Exit status 1 when a page answers with an HTTP error or cannot be shot; the others are still saved.
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DESKTOP, PHONE = 1400, 390
MAX_HEIGHT = 2600  # px: long pages are cut here

# (file name, URL name, arguments from the demo data (see url_args), widths)
PAGES = [
    ("home", "analysis:index", None, (DESKTOP, PHONE)),
    ("dataset", "analysis:dataset", "dataset", (DESKTOP, PHONE)),
    ("explorer", "analysis:explorer", "dataset", (DESKTOP, PHONE)),
    ("image", "analysis:image", "image", (DESKTOP, PHONE)),
    ("benchmark", "analysis:benchmark", "dataset", (DESKTOP, PHONE)),
    ("compare", "analysis:compare", None, (DESKTOP, PHONE)),
    ("leaderboard", "analysis:leaderboard", "systems", (DESKTOP, PHONE)),
    ("judgments-upload", "crowd:judgments-upload", None, (DESKTOP,)),
    ("diversity", "analysis:diversity", "dataset", (DESKTOP, PHONE)),
    ("campaigns", "crowd:campaigns", None, (DESKTOP, PHONE)),
    ("campaign", "crowd:campaign", "campaign", (DESKTOP, PHONE)),
    ("campaign-new", "crowd:campaign-new", None, (DESKTOP,)),
    ("campaign-preview", "crowd:campaign-preview", "campaign", (DESKTOP, PHONE)),
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--database-url", default=os.environ.get("DATABASE_URL"), help="default: the quick-start SQLite file")
    p.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    p.add_argument("--user", default="demo")
    p.add_argument("--password", default="demo")
    p.add_argument("--dataset", default="flickr8k-expert")
    p.add_argument("--campaign", default="demo-diversity")
    p.add_argument("--systems-dataset", default="thumb", help="the dataset of the leaderboard page (several systems)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these pages (file names of PAGES)")
    return p.parse_args(argv)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def url_args(kind: str | None, args) -> list:
    """The reverse() arguments of a page from the demo data."""
    if kind is None:
        return []
    if kind == "dataset":
        return [args.dataset]
    if kind == "campaign":
        return [args.campaign]
    if kind == "systems":  # a dataset with several systems: THumB in the demo
        return [args.systems_dataset]
    if kind == "image":
        from crowd.models import Caption

        caption = Caption.objects.filter(image__dataset__name=args.dataset).order_by("image__key").first()
        return [args.dataset, caption.image.key]
    raise ValueError(kind)


def resolve_pages(args) -> list[tuple[str, str, tuple]]:
    from django.urls import NoReverseMatch, reverse

    out = []
    for name, url_name, kind, widths in PAGES:
        if args.only and name not in args.only:
            continue
        try:
            out.append((name, reverse(url_name, args=url_args(kind, args)), widths))
        except NoReverseMatch:
            print(f"{name}: no URL named {url_name}; skipped", file=sys.stderr)
    return out


def start_server(env: dict, port: int) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"], cwd=ROOT,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2)
            return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("the development server did not start within 60 s")


def browser():
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--hide-scrollbars", f"--window-size={DESKTOP},900"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path="/usr/bin/chromedriver"))


def shoot(driver, url: str, path: Path, width: int) -> int:
    """Open ``url`` at ``width`` px, wait for charts, save a PNG of the page (cut at MAX_HEIGHT);
    return the page's HTTP status (Navigation Timing's responseStatus)."""
    driver.set_window_size(width, 900)
    driver.get(url)
    deadline = time.time() + 30
    while time.time() < deadline:  # interactive charts: every .vega-embed has drawn its canvas or svg
        pending = driver.execute_script(  # charts.js marks each drawn chart data-ready="1"
            "return [...document.querySelectorAll('[data-vega-spec]')].filter(e => e.dataset.ready !== '1').length")
        if driver.execute_script("return document.readyState") == "complete" and not pending:
            break
        time.sleep(0.3)
    time.sleep(0.5)
    height = 0
    for _ in range(3):  # a page may grow once the window is tall (pictures, lazy content): measure again
        now = min(MAX_HEIGHT, driver.execute_script("return document.documentElement.scrollHeight"))
        if now <= height:
            break
        height = now
        chrome = driver.execute_script("return window.outerHeight - window.innerHeight")  # the window's own bars
        driver.set_window_size(width, max(height, 600) + max(chrome, 0))
        time.sleep(0.3)
    driver.save_screenshot(str(path))
    from PIL import Image  # 256 colours: a third of the size, the same look for pages of flat colours

    with Image.open(path) as shot:
        shot.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return driver.execute_script("return performance.getEntriesByType('navigation')[0].responseStatus") or 200


def main(argv=None) -> int:
    args = parse_args(argv)
    env = dict(os.environ)
    if args.database_url:
        env["DATABASE_URL"] = args.database_url
    os.environ.update({k: v for k, v in env.items() if k == "DATABASE_URL"})
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
    import django

    django.setup()
    pages = resolve_pages(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = start_server(env, port)
    driver = browser()
    failures = 0
    try:
        from selenium.webdriver.common.by import By

        base = f"http://127.0.0.1:{port}"
        driver.get(base + "/accounts/login/")
        driver.find_element(By.NAME, "username").send_keys(args.user)
        driver.find_element(By.NAME, "password").send_keys(args.password)
        driver.find_element(By.CSS_SELECTOR, "form [type=submit]").click()
        time.sleep(1)
        for name, path, widths in pages:
            try:
                for width in widths:
                    target = out / f"{name}-{width}.png"
                    status = shoot(driver, base + path, target, width)
                    if status >= 400:
                        raise RuntimeError(f"HTTP {status}")
                    print(f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}  <- {path}")
            except Exception as exc:  # one bad page must not lose the others
                failures += 1
                print(f"{name}: {path}: {exc}", file=sys.stderr)
    finally:
        driver.quit()
        server.terminate()
        server.wait(10)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
