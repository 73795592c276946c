"""The README's picture of ``explorer.html``: write a run's page and photograph it in headless Chromium.

    python scripts/explorer_screenshot.py RUN [--model] [--head L0H0] [--out figures/explorer.png]

``--model`` loads the run's model (its manifest's) and adds the model panels first. The page is
opened in Debian's chromium through Debian's chromedriver (Selenium), the heatmap cell of ``--head``
is clicked, and the window is saved as PNG.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.actions.action_builder import ActionBuilder
from selenium.webdriver.support.ui import WebDriverWait

from cel_lens.analysis import explorer_panels, load_run_model
from cel_lens.heads import HeadSet
from cel_lens.report.explorer_page import write_explorer_page
from cel_lens.runs import load_run

CELL = """const gd = document.getElementById('cel-heatmap'); const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
const r = gd.getBoundingClientRect(); return [r.left + xa._offset + xa.l2p(arguments[1]), r.top + ya._offset + ya.l2p(arguments[0])];"""


def main() -> None:
    """Parse the arguments, write the page, click the head and save the screenshot."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="run directory")
    p.add_argument("--model", action="store_true", help="load the run's model and add the model panels")
    p.add_argument("--head", default=None, help="the head to click (default: S-hat's first head)")
    p.add_argument("--out", default="figures/explorer.png", help="PNG to write")
    p.add_argument("--size", default="1500,1150", help="browser window size, W,H in pixels")
    args = p.parse_args()
    record = load_run(args.run)
    panels = explorer_panels(load_run_model(record), record) if args.model else None
    page = write_explorer_page(record, Path(tempfile.mkdtemp()), model_panels=panels)
    head = HeadSet.parse(args.head or str(HeadSet.parse(record.partial()["heads"]).heads[0])).heads[0]
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={args.size}", "--hide-scrollbars"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)
    try:
        driver.get(page.as_uri())
        WebDriverWait(driver, 30).until(lambda d: d.execute_script("return window.celExplorerReady === true"))
        x, y = driver.execute_script(CELL, head.layer, head.head)
        builder = ActionBuilder(driver)
        builder.pointer_action.move_to_location(int(x), int(y))
        builder.pointer_action.click()
        builder.perform()
        time.sleep(1.0)
        driver.save_screenshot(args.out)
    finally:
        driver.quit()
    print(f"wrote {args.out} ({head} clicked on {page})")


if __name__ == "__main__":
    main()
