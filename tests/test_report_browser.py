"""The Snakemake HTML report, opened in a real browser (headless Chromium driven by Selenium).

``snakemake -s workflows/report.smk --report`` is built from the committed results (what a fresh checkout holds, in a scratch working
directory), then: the landing page shows the verdict matrix with every claim's verdict visible; clicking each
verdict opens the claim's page inline, whose verdict heading is visible and whose every image loaded
(naturalWidth > 0); every figure item of the report loads. Screenshots are saved under ``test-artifacts/``
(or ``$REPRO_TEST_ARTIFACTS``). Skipped, with the reason, where Chromium, chromedriver or Selenium is missing
(scripts/setup.sh installs them where apt-get runs as root).
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.report.site import pages

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("REPRO_TEST_ARTIFACTS", ROOT / "test-artifacts"))
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1500,1100"]


def _driver(tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if not chromium or not chromedriver:
        pytest.skip("headless Chromium is not installed (needs Debian's chromium and chromium-driver; "
                    "scripts/setup.sh installs them when apt-get is available and it runs as root)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[test]')")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))


def _wait(predicate, timeout=60, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


IMAGES_LOADED = """return Array.from(document.images).length > 0 &&
    Array.from(document.images).every(i => i.complete)"""
IMAGE_WIDTHS = "return Array.from(document.images).map(i => [i.alt.slice(0, 60), i.naturalWidth])"


@pytest.mark.slow  # over 20 s: the second stage (scripts/test_slow.sh, run by .ci/run)
def test_report_in_headless_chromium(tmp_path):
    driver = _driver(tmp_path)
    results, reports = ROOT / "references" / "results", ROOT / "references" / "reports"
    claim_pages = pages(reports)
    assert claim_pages, "no claim pages (reports/<hw>/<scale>/<claim>.html) committed"
    expected = {(hw, scale, claim): json.loads((results / hw / scale / claim / "verdict.json").read_text())["verdict"]
                for hw, scale, claim, _ in claim_pages}
    report = tmp_path / "report.html"
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "workflows" / "report.smk"), "--directory", str(tmp_path),
                        "--config", f"results_dir={tmp_path / 'results'}", f"reports_dir={tmp_path / 'reports'}",
                        f"references_dir={ROOT / 'references'}", "--report", str(report)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "missing metadata" not in (r.stdout + r.stderr).lower()
    print(f"report built in {time.time() - t0:.1f} s ({report.stat().st_size / 1e6:.1f} MB)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        driver.get(report.as_uri())
        tables = _wait(lambda: driver.find_elements("css selector", "table.repro-matrix"), what="the verdict matrix")
        assert tables[0].is_displayed()
        driver.save_screenshot(str(ARTIFACTS / "report_landing.png"))
        # the headline tables: every claim row shows the paper's number and a measured value in some column
        for table in tables:
            for row in table.find_elements("css selector", "tbody tr"):
                claim = row.find_element("css selector", "th").text
                if all("stale" in (td.get_attribute("class") or "")
                       for td in row.find_elements("css selector", "td[class^='v-']")):
                    continue  # measured by code the checkout no longer runs (struck through): nothing fresh to show
                paper = row.find_element("css selector", "td.paper").text.strip()
                measured = [m.text.strip() for m in row.find_elements("css selector", "td span.measured")]
                assert paper and paper != "-", (claim, "no paper value")
                assert any(measured), (claim, "no measured value in any column")
        cells = {}
        for link in [a for table in tables for a in table.find_elements("css selector", "td a")]:
            # the matrix is taller than the window once several machines are committed: scroll each cell to view
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", link)
            text = link.text.strip()
            cells.setdefault(text, 0)
            cells[text] += 1
            assert link.is_displayed() and text, "a verdict in the matrix is not visible"
        for verdict in set(expected.values()):
            assert verdict in cells, f"verdict {verdict!r} not visible in the matrix ({cells})"
        n_links = sum(len(t.find_elements("css selector", "td a")) for t in tables)
        assert n_links == len(expected), f"{n_links} clickable verdicts for {len(expected)} claim pages"
        shot = None
        for i in range(n_links):
            driver.execute_script("app.setView({content: 'rulegraph'})")  # back to the landing page
            link = _wait(lambda: driver.find_elements("css selector", "table.repro-matrix td a"), what="the matrix")[i]
            href = link.get_attribute("href")
            key = next(k for k in expected if f"/{k[0]}/{k[1]}/{k[2]}.html" in href)
            driver.execute_script("arguments[0].scrollIntoView()", link)
            link.click()
            frame = _wait(lambda: driver.find_elements("css selector", "iframe"), what=f"the page of {key}")[0]
            driver.switch_to.frame(frame)
            heading = _wait(lambda: driver.find_elements("css selector", "h2.verdict"), what=f"{key}'s verdict")[0]
            assert heading.is_displayed() and f"Verdict: {expected[key]}" in heading.text, (key, heading.text)
            if driver.execute_script("return document.images.length"):
                _wait(lambda: driver.execute_script(IMAGES_LOADED), what=f"{key}'s images")
                widths = driver.execute_script(IMAGE_WIDTHS)
                assert all(w > 0 for _, w in widths), (key, widths)
                n_png = len(list((reports / key[0] / key[1] / key[2]).glob("*.png")))
                assert len(widths) == n_png, (key, len(widths), n_png)
            if shot is None or key[2] == "head_pruning":
                shot = key
                driver.save_screenshot(str(ARTIFACTS / "report_claim_page.png"))
            driver.switch_to.default_content()
        # every figure item of the report, as the report's own image view shows it
        figures = driver.execute_script(
            "return Object.keys(results).filter(k => results[k].mime_type == 'image/png')")
        assert len(figures) == sum(len(list(p.with_suffix('').glob('*.png'))) for *_, p in claim_pages)
        for key in figures:
            driver.execute_script("app.setView({content: 'img', contentPath: results[arguments[0]].data_uri, "
                                  "resultPath: arguments[0]})", key)
            _wait(lambda: driver.execute_script(
                "return Array.from(document.images).some(i => i.src == results[arguments[0]].data_uri "
                "&& i.complete && i.naturalWidth > 0)", key), what=f"figure {key}")
        print(f"{len(expected)} claim pages and {len(figures)} figures checked; screenshots in {ARTIFACTS}")
    finally:
        driver.quit()
