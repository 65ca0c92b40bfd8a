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


#: The plotted cost of one case of a drawn chart: the row of the model and GPU in the first
#: dataset of the view that the what-if transforms computed (it has ``price_plotted``; the raw
#: data carry the scenario's ``cost_musd`` too, and never change).
_PLOTTED = ("([label, model, gpu]) => { const v = window.__scaletaxViews[label]; for (let i = 0; i < 40; i++) { "
            "for (const name of ['data_' + i, 'source_' + i]) { let rows = null; try { rows = v.data(name); } "
            "catch (e) { continue; } if (rows && rows.length && 'price_plotted' in rows[0]) { "
            "const r = rows.find((x) => x.model_id === model && x.gpu === gpu); if (r) return r.cost_musd; } } } "
            "return null; }")


def test_the_cost_chart_of_a_book_opened_from_disk_recomputes_with_your_price(site, browser, built_book):
    """The decision chapter's cost-and-time figure, opened from disk: moving GB200's price control
    moves the plotted cost to the library's (cost.run_costs of the figure's own row at that price),
    marks the value as the reader's, and the reset brings back the scenario's."""
    import csv

    from conftest import SMALL
    from scaletax.chapters import decision as d
    from scaletax.model import cost
    from scaletax.report import chapters as toc
    from scaletax.report.scenario import resolve

    html, _ = site
    plan = d.Plan.from_params(**toc.chapter("decision").parameters(resolve(overrides=SMALL[1::2])))
    with (html.parent / "figures" / "fig-dec-cost-time.csv").open(newline="", encoding="utf-8") as fh:
        row = next(r for r in csv.DictReader(fh) if r["gpu"] == "gb200" and r["model_id"] == plan.models[0])
    label, args = "fig-dec-cost-time", ["fig-dec-cost-time", plan.models[0], "gb200"]
    page = browser.new_page(viewport=MODES["http"])
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto((html / "decision.html").resolve().as_uri(), wait_until="load")
    page.wait_for_function(f"() => window.__scaletaxViews && window.__scaletaxViews['{label}']", timeout=30_000)
    assert page.evaluate(_PLOTTED, args) == pytest.approx(float(row["cost_usd"]) / 1e6, rel=1e-9)
    host = page.locator(f'div.scaletax-chart[data-label="{label}"]')
    assert "scenario's values" in host.locator(".scaletax-whatif-note").inner_text()
    host.locator('.vega-bindings input[name="price_gb200"]').evaluate(
        "(el) => { el.value = '3.2'; el.dispatchEvent(new Event('input', {bubbles: true})); }")
    before = float(row["cost_usd"]) / 1e6
    page.wait_for_function(f"(a) => Math.abs(({_PLOTTED})(a) - {before!r}) > 1e-6", arg=args)
    econ = plan.economics()
    expect = cost.run_costs(plan.tokens, float(row["tps"]), int(row["gpus"]), plan.system_w("gb200"), econ,
                            usd_per_gpu_hour=3.2, goodput=float(row["goodput"]))["cost_usd"] / 1e6
    assert page.evaluate(_PLOTTED, args) == pytest.approx(expect, rel=1e-9)
    assert host.locator(".vega-bind.scaletax-yours").count() == 1
    assert host.locator(".scaletax-whatif-note").inner_text().startswith("Your values, not the scenario's")
    host.locator(".scaletax-whatif-reset").click()
    page.wait_for_function(f"(a) => Math.abs(({_PLOTTED})(a) - {before!r}) < 1e-9", arg=args)
    assert host.locator(".vega-bind.scaletax-yours").count() == 0
    page.screenshot(path=str(ARTIFACTS / "whatif-decision.png"), full_page=False)
    page.close()
    assert errors == [], errors
