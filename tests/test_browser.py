"""The built HTML in a real browser (Debian's Chromium driven by Playwright), offline.

Every page is opened twice: from a loopback server (desktop width) and straight from disk as
a ``file://`` URL (a reader's double click; on a 375 px phone screen), with every non-local
request blocked and counted. A page passes with zero external requests, no console errors,
every chart drawn (an SVG with marks), numbered figure captions, internal links that resolve,
and, on the phone, every chart inside the screen's width.
"""
import functools
import http.server
import os
import re
import threading
from pathlib import Path
from urllib.parse import urldefrag, urlparse

import pytest

from conftest import require_tools

pytestmark = [pytest.mark.book, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("SCALETAX_TEST_ARTIFACTS", Path(__file__).resolve().parents[1] / "_build" / "test-artifacts"))
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: (how the page is opened, viewport): a desktop over http, a phone from disk.
MODES = {"http": {"width": 1280, "height": 900}, "file": {"width": 375, "height": 812}}
DRAWN = ("() => [...document.querySelectorAll('div.scaletax-chart')]"
         ".every(d => d.querySelector('svg .role-mark, svg [class*=mark-]'))")
#: Right edge of each chart's drawing, and the page's width (the phone check).
EDGES = ("() => [...document.querySelectorAll('div.scaletax-chart svg')]"
         ".map(s => Math.ceil(s.getBoundingClientRect().right))")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(built_book):
    html = built_book["dir"] / "html"
    handler = functools.partial(_Quiet, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield html, f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    require_tools("chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _pages(html: Path):
    skip = {"search.html", "genindex.html"}
    return sorted(p for p in html.glob("*.html") if p.name not in skip)


@pytest.mark.parametrize("mode", list(MODES))
def test_every_page_offline_clean_and_drawn(site, browser, mode):
    html, base = site
    viewport = MODES[mode]
    shots = ARTIFACTS / "screenshots" / mode
    shots.mkdir(parents=True, exist_ok=True)
    pages = _pages(html)
    assert len(pages) >= 5
    n_charts = 0
    for page_file in pages:
        external, errors = [], []
        page = browser.new_page(viewport=viewport)

        def route(r, external=external):
            url = r.request.url
            if url.startswith(("data:", "blob:", "file:")) or urlparse(url).hostname == "127.0.0.1":
                r.continue_()
            else:
                external.append(url)
                r.abort()

        page.route("**/*", route)
        page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        url = base + page_file.name if mode == "http" else page_file.resolve().as_uri()
        page.goto(url, wait_until="load")
        charts = page.locator("div.scaletax-chart")
        count = charts.count()
        if count:
            page.wait_for_function(DRAWN, timeout=30_000)
        for i in range(count):
            marks = charts.nth(i).locator("svg path, svg rect, svg circle, svg line, svg symbol, svg text")
            assert marks.count() > 3, f"{mode} {page_file.name}: chart {i} has no marks"
        n_charts += count
        if count:
            captions = page.locator("figcaption .caption-number").all_inner_texts()
            assert len(captions) >= count and all(re.match(r"Fig\. \d+\.\d+", c) for c in captions), captions
            if viewport["width"] < 500:
                edges = page.evaluate(EDGES)
                assert max(edges) <= viewport["width"], f"{page_file.name}: a chart overflows the phone: {edges}"
        page.screenshot(path=str(shots / f"{page_file.stem}.png"), full_page=True)
        page.close()
        assert external == [], f"{mode} {page_file.name} asked the network for {external[:3]}"
        assert errors == [], f"{mode} {page_file.name} console errors: {errors[:3]}"
    assert n_charts == len(list((html.parent / "figures").glob("fig-*.png")))


def test_internal_links_resolve(site):
    html, _ = site
    ids = {p.name: set(re.findall(r'\sid="([^"]+)"', p.read_text(encoding="utf-8"))) for p in html.rglob("*.html")}
    bad = []
    for page in _pages(html):
        for href in re.findall(r'<a [^>]*href="([^"]+)"', page.read_text(encoding="utf-8")):
            if href.startswith(("http://", "https://", "mailto:", "javascript:")):
                continue
            target, frag = urldefrag(href)
            path = (page.parent / target).resolve() if target else page
            if not path.exists():
                bad.append(f"{page.name} -> {href}")
            elif frag and path.suffix == ".html" and frag not in ids.get(path.name, set()):
                bad.append(f"{page.name} -> {href} (no such anchor)")
    assert bad == []
