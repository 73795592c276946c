"""Every script in ``scripts/`` still starts: its imports resolve against today's cel_lens and its
``--help`` prints its usage (the scripts that print the docs pages' tables, and the README's explorer
picture, would otherwise rot unseen). The site's hooks are checked on small inputs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from script_modules import load_script

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
COMMANDS = sorted(p.name for p in SCRIPTS.glob("*.py") if p.name not in {"mkdocs_hooks.py", "griffe_doc_comments.py"})


def test_every_script_is_listed():
    assert COMMANDS == ["choice_task_design.py", "explorer_screenshot.py", "fresh_truth.py", "ops_prior_feasibility.py", "plant_choice_feasibility.py", "plant_rows.py", "planted_rows.py", "read_rows.py", "real_model_agreement.py", "real_model_diffs.py",
                        "real_model_record.py", "real_model_rows.py", "real_model_side_effects.py", "scorer_agreement.py",
                        "seal_row.py"], \
        "a new script: it gets a smoke test here"
    assert not list((REPO / "docs").glob("*.py")), "scripts live in scripts/, not docs/"


@pytest.mark.parametrize("script", COMMANDS)
def test_script_help(script):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, str(SCRIPTS / script), "--help"], capture_output=True, text=True,
                         timeout=180, cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("usage:"), out.stdout[:500]


def test_links_are_rewritten_to_the_site():
    hooks = load_script("mkdocs_hooks.py")
    readme = "![x](figures/explorer.png) [g](docs/grids.md#out) [r](benchmarks/RESULTS.md) [w](https://x.org/a.md)"
    assert hooks.rewrite_links(readme, "README.md", "index.md") == (
        "![x](figures/explorer.png) [g](grids.md#out) [r](benchmarks.md) [w](https://x.org/a.md)")
    page = "[o](../figures/organism_heads.png) [s](sandbox.md) [t](../tests/test_x.py) [a](#here)"
    assert hooks.rewrite_links(page, "docs/organism.md", "organism.md") == (
        "[o](figures/organism_heads.png) [s](sandbox.md) [t](../tests/test_x.py) [a](#here)")  # tests/: left to fail
    assert hooks.rewrite_links("[b](../../README.md)", "docs/api/x.md", "api/x.md") == "[b](../index.md)"


def test_doc_comments_document_attributes():
    ext = load_script("griffe_doc_comments.py")
    lines = ["x = 1", "#: first line", "#: second line", "NAME = 2"]
    assert ext.doc_comment(lines, 4) == "first line second line"
    assert ext.doc_comment(lines, 1) == ""


def test_missing_optional_pages_leave_the_navigation(tmp_path):
    from types import SimpleNamespace

    hooks = load_script("mkdocs_hooks.py")
    (tmp_path / "speed.md").write_text("# Speed\n")
    nav = [{"Home": "index.md"}, {"Guide": [{"Speed": "speed.md"}, {"Precision": "precision.md"}, {"Tasks": "tasks.md"}]},
           {"Later": [{"Statistics": "statistics.md"}]}]
    config = hooks.on_config(SimpleNamespace(docs_dir=str(tmp_path), nav=nav))
    assert config.nav == [{"Home": "index.md"}, {"Guide": [{"Speed": "speed.md"}, {"Tasks": "tasks.md"}]}]


def test_sphinx_roles_become_code_spans():
    ext = load_script("griffe_doc_comments.py")
    assert ext.plain_roles("see :func:`~cel_lens.x.f`, :mod:`cel_lens.tasks` and :class:`Run`") == (
        "see `f`, `cel_lens.tasks` and `Run`")
