"""The documentation site builds strict and offline, shows every public name, and reads in a browser.

One ``mkdocs build --strict`` (the ``make docs`` build, into a temporary folder, with every proxy
pointed at a closed port so that any fetch fails) serves the module: a broken link, a page left out
of the navigation or a public name without a docstring fails it. The built pages are then checked
for an entry per public name, the CLI page for every flag of every subcommand, and, in headless
Chromium (Debian's chromium and chromedriver, as ``tests/report/test_explorer_browser.py``), the
home page, ``cl.search``'s API entry and the site search for "calibration"."""

from __future__ import annotations

import argparse
import functools
import html
import http.server
import importlib
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
API_PAGES = {"cel_lens": "api", "cel_lens.tasks": "api/tasks", "cel_lens.model": "api/model",
             "cel_lens.report": "api/report", "cel_lens.analysis": "api/analysis",
             "cel_lens.organism": "api/organism", "cel_lens.sandbox": "api/sandbox"}
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "ALL_PROXY": "http://127.0.0.1:9",
           "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "NO_PROXY": "", "no_proxy": "",
           "NO_MKDOCS_2_WARNING": "1", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once as ``make docs`` builds it (strict), with no network."""
    out = tmp_path_factory.mktemp("docs") / "site"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env={**os.environ, **OFFLINE})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(f"mkdocs build --strict: {time.perf_counter() - start:.1f} s wall, {cpu:.1f} CPU s")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-4000:]
    return out


def _headings(page: Path) -> set[str]:
    """The text of every mkdocstrings object heading on a built page."""
    text = page.read_text(encoding="utf-8")
    return {html.unescape(h) for h in re.findall(r'<h\d id="[^"]+" class="doc doc-heading">\s*([^<]*?)\s*<', text)}


@pytest.mark.slow
def test_the_site_builds_strict_and_offline(site):
    for page in ("index.html", "cli/index.html", "api/index.html", "calibration/index.html", "benchmarks/index.html",
                 "notebooks/01_quickstart/index.html", "search/search_index.json", "figures/explorer.png"):
        assert (site / page).is_file(), page
    assert "fonts.googleapis" not in (site / "index.html").read_text(encoding="utf-8")
    for notebook in sorted((REPO / "notebooks").glob("*.ipynb")):  # each page, and its executed render when there is one
        page = (site / "notebooks" / notebook.stem / "index.html").read_text(encoding="utf-8")
        if (REPO / "figures" / "notebooks" / f"{notebook.stem}.html").is_file():
            assert f'href="../../figures/notebooks/{notebook.stem}.html"' in page, notebook.name
            assert (site / "figures" / "notebooks" / f"{notebook.stem}.html").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(API_PAGES))
def test_every_public_name_has_a_reference_entry(site, module):
    names = importlib.import_module(module).__all__
    prefix = "cl" if module == "cel_lens" else module
    shown = _headings(site / API_PAGES[module] / "index.html")
    missing = [n for n in names if f"{prefix}.{n}" not in shown]
    assert not missing, f"{module}: no API entry for {missing}"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    from cel_lens.cli import build_parser

    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.slow
def test_the_cli_page_is_the_parsers(site):
    page = html.unescape((site / "cli" / "index.html").read_text(encoding="utf-8"))
    for name, command in _subcommands().items():
        assert f'id="cel-lens-{name}"' in page, name
        for action in command._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"<code>{flag}</code>" in page, f"cel-lens {name} {flag}"


def test_every_result_row_is_explained(tmp_path):
    """Each row label ``str(result)`` prints (a real search, plus the rows only choice tasks get) is
    explained in docs/result.md's table, and the page's organism example shows exactly the rows an
    organism search prints now (no stale row, none missing)."""
    import cel_lens as cl
    from cel_lens.selection.result import result_rows

    page = (REPO / "docs" / "result.md").read_text(encoding="utf-8")
    explained = set(re.findall(r"^\| `([^`]+)` \|", page, re.M))
    run = cl.search(cl.load_model("organism"), cl.load_task("organism_a", n_dist=80, n_test=80), k=1, pool_size=2,
                    n_boot=200, n_null=3, progress=False, out=tmp_path / "run")
    labels = {re.sub(r"\(n=\d+\)", "(n=…)", label) for label, _ in result_rows(run.result)}
    labels = {re.sub(r"^\d+% .* CI$", "95% … CI", label) for label in labels}
    choice_rows = {"answers (D_test)", "calibrated D_test", "survives calibration?", "threshold-free test", "answer prior"}
    assert labels | choice_rows <= explained, sorted((labels | choice_rows) - explained)
    # the page's first example is an organism search too: it shows the rows such a search prints now
    example = re.search(r"```text\n(.*?)```", page, re.S).group(1)
    shown = {re.sub(r"\(n=\d+\)", "(n=…)", m) for m in re.findall(r"^  (\S.*?)\s{2,}\S", example, re.M)}
    shown = {re.sub(r"^\d+% .* CI$", "95% … CI", label) for label in shown}
    assert shown == labels, (sorted(shown - labels), sorted(labels - shown))


@pytest.mark.slow
def test_the_quickstart_runs(tmp_path, monkeypatch):
    """docs/quickstart.md's Python block runs offline as written (only ``.show()`` is dropped: no browser)."""
    page = (REPO / "docs" / "quickstart.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    assert ".show()" in code
    monkeypatch.chdir(tmp_path)  # the run directory goes to ./runs
    namespace: dict = {}
    exec(compile(code.replace(".show()", ""), "docs/quickstart.md", "exec"), namespace)  # noqa: S102
    assert namespace["run"].result.heads and (tmp_path / "runs").is_dir()


def test_the_add_a_task_example_runs():
    """docs/tasks.md's "Adding a task" block registers and loads its task as written."""
    page = (REPO / "docs" / "tasks.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", page[page.index("## Adding a task"):], re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/tasks.md:Adding a task", "exec"), namespace)  # noqa: S102 - the page's own code
    task = namespace["task"]  # (the name stays registered in this process; registering it again is allowed)
    assert (len(task.dist), len(task.test)) == (200, 100) and task.test[0].target.strip().isdigit()


def test_the_scorer_and_ablation_pages_name_every_registered_one():
    from cel_lens.config import ABLATION_KINDS, SCORERS

    scorers = (REPO / "docs" / "scorers.md").read_text(encoding="utf-8")
    kinds = (REPO / "docs" / "ablation.md").read_text(encoding="utf-8")
    assert [n for n in SCORERS if f"| `{n}`" not in scorers] == [], "docs/scorers.md: a row per scorer"
    assert [n for n in ABLATION_KINDS if f"| `{n}`" not in kinds] == [], "docs/ablation.md: a row per kind"


def test_the_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.encode()) <= 12 * 1024, len(text.encode())
    assert "make demo" in text and "make test" in text and "\n## Use\n" in text
    for target in re.findall(r"\]\(([^)#\s]+)", text):
        if not re.match(r"^[a-z]+:", target):
            assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def test_no_issue_markers():
    pages = [README, *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "benchmarks").glob("*.md"))]
    marked = [p.name for p in pages if re.search(r"<!--\s*(issue|section|end section)", p.read_text(encoding="utf-8"))]
    assert not marked, marked


# -- in a browser ------------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    from selenium import webdriver
except ImportError:  # pragma: no cover - `make install` installs it (dev extra)
    webdriver = None
MISSING = [name for name, found in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER), ("selenium", webdriver)) if found is None]
MISSING_REASON = f"needs {', '.join(MISSING)} (`make install` as root installs Debian's chromium and chromium-driver)"


@pytest.fixture(scope="module")
def served(site):
    """The built site over HTTP on localhost (the site search's worker cannot load from file://)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # no request lines in the test output
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
                "--no-proxy-server"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


# `make test` sets CEL_LENS_REQUIRE_BROWSER: a missing browser fails these tests with its reason (never the
# collection); elsewhere they are skipped with it
@pytest.mark.slow
@pytest.mark.skipif(bool(MISSING) and not os.environ.get("CEL_LENS_REQUIRE_BROWSER"), reason=MISSING_REASON)
class TestInBrowser:
    @pytest.fixture(autouse=True)
    def required_browser(self) -> None:
        """Fail each browser test, with the reason, when the browser it needs is missing."""
        if MISSING:
            pytest.fail(f"the docs site's browser test {MISSING_REASON}", pytrace=False)

    def test_home_page(self, browser, served):
        from selenium.webdriver.common.by import By

        browser.get(served + "/")
        assert browser.title.startswith("cel_lens")
        assert browser.find_element(By.CSS_SELECTOR, "article h1").text.strip().startswith("cel_lens")
        figure = browser.find_element(By.CSS_SELECTOR, "article img[src$='explorer.png']")
        assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", figure) > 0
        nav = browser.find_element(By.CSS_SELECTOR, "nav.md-nav--primary").get_attribute("textContent")
        assert "Reading a result" in nav and "API" in nav and "CLI" in nav

    def test_api_page_of_search(self, browser, served):
        from selenium.webdriver.common.by import By

        browser.get(served + "/api/#cel_lens.pipeline.search")
        heading = browser.find_element(By.ID, "cel_lens.pipeline.search")
        assert heading.text.strip().startswith("cl.search")
        entry = heading.find_element(By.XPATH, "..").get_attribute("textContent")
        import cel_lens as cl

        first_line = cl.search.__doc__.strip().splitlines()[0].split("``")[0].strip()
        assert first_line[:40] in " ".join(entry.split()), entry[:500]

    def test_site_search_finds_the_calibration_page(self, browser, served):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        browser.get(served + "/")
        box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
        WebDriverWait(browser, 30).until(lambda d: box.is_displayed() and box.is_enabled())
        box.click()
        box.send_keys("calibration")

        def hits(driver):
            links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, ".md-search-result__item a")]
            return links or None

        links = WebDriverWait(browser, 30).until(hits)
        from urllib.parse import urlparse

        assert "/calibration/" in [urlparse(link or "").path for link in links[:3]], links
