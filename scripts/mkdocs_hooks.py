"""mkdocs hooks of the documentation site (``mkdocs.yml``: ``hooks``); ``make docs`` builds it.

Each text is written once, where it lives in the repository, and the site mounts it:
- ``README.md`` is the home page, ``benchmarks/*.md`` the reports, ``notebooks/*.ipynb`` the notebook
  pages (rendered unexecuted by mkdocs-jupyter) and ``figures/`` the pictures (with the executed
  notebook renders, ``figures/notebooks/*.html``);
- every page's relative links are written as they work in the repository (``docs/x.md`` from the
  README, ``../figures/x.png`` from a page) and are rewritten to the site's paths; a link to any
  other file of the repository is left alone, so ``--strict`` fails on it;
- the CLI page is generated from ``cel_lens.cli.build_parser()`` and the API pages from the public
  names (``__all__``) of the modules in :data:`API_MODULES`, each one rendered by mkdocstrings; a
  public name without a docstring is a warning, so ``--strict`` fails on it;
- the pages in :data:`OPTIONAL_PAGES` leave the navigation when their file is missing;
- a notebook's page opens with a link to its executed render (``make render-notebooks``) when there is one.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import posixpath
import re
import sys
from pathlib import Path
from typing import Any

import griffe
from mkdocs.plugins import event_priority, get_plugin_logger
from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
if sys.path[:1] != [str(REPO)]:
    sys.path.insert(0, str(REPO))  # the CLI page and __all__ come from this tree, not another installed copy
log = get_plugin_logger("cel_lens_site")

MOUNTS = {"index.md": "README.md", "benchmarks.md": "benchmarks/RESULTS.md",
          "calibration_evidence.md": "benchmarks/CALIBRATION.md", "planted_study.md": "benchmarks/PLANTED_STUDY.md"}
"""Site page -> the repository file it shows."""
STATIC_DIRS = ("figures",)
"""Repository folders served at the same path (pictures, executed notebook renders)."""
NOTEBOOK_DIR = "notebooks"
OPTIONAL_PAGES = frozenset({"precision.md", "speed.md", "statistics.md", "lm_eval_tasks.md"})
"""Navigation entries dropped when their page does not exist (yet)."""
API_MODULES = {
    "api/index.md": "cel_lens", "api/tasks.md": "cel_lens.tasks", "api/model.md": "cel_lens.model",
    "api/report.md": "cel_lens.report", "api/analysis.md": "cel_lens.analysis",
    "api/organism.md": "cel_lens.organism", "api/sandbox.md": "cel_lens.sandbox",
}
"""API page -> module whose ``__all__`` it documents."""
CLI_PAGE, CLI_MARKER = "cli.md", "<!-- generated: cel-lens parsers -->"
RENDERS = "figures/notebooks"
"""Executed notebook renders, ``<stem>.html`` each."""
ARTICLE = '<article class="md-content__inner md-typeset">'
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")

_sources: dict[str, str] = {}  # site page -> repository path (for its links)


def _load_extension() -> griffe.Extension:
    """The ``#:`` doc-comment extension (scripts/griffe_doc_comments.py, also given to mkdocstrings)."""
    spec = importlib.util.spec_from_file_location("griffe_doc_comments", REPO / "scripts" / "griffe_doc_comments.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DocComments()


def on_config(config: Any) -> Any:
    """Drop the optional pages that do not exist from the navigation."""
    docs = Path(config.docs_dir)

    def keep(entry: Any) -> Any:
        if isinstance(entry, dict):
            (title, value), = entry.items()
            value = keep(value)
            return None if value in (None, []) else {title: value}
        if isinstance(entry, list):
            return [e for e in (keep(e) for e in entry) if e is not None]
        if isinstance(entry, str) and entry in OPTIONAL_PAGES and not (docs / entry).is_file():
            log.info("optional page %s is missing: left out of the navigation", entry)
            return None
        return entry

    config.nav = keep(config.nav)
    return config


@event_priority(100)  # before mkdocs-jupyter's on_files, which claims the notebooks
def on_files(files: Files, config: Any) -> Files:
    """Mount the README, the reports, the notebooks, the figures and the generated API pages."""
    _sources.clear()
    for f in files.documentation_pages():
        _sources[f.src_uri] = f"docs/{f.src_uri}"
    for page, source in MOUNTS.items():
        files.append(File.generated(config, page, abs_src_path=str(REPO / source)))
        _sources[page] = source
    for folder in (*STATIC_DIRS, NOTEBOOK_DIR):
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and (folder != NOTEBOOK_DIR or path.suffix == ".ipynb"):
                rel = path.relative_to(REPO).as_posix()  # a plain File: mkdocs-jupyter's wrapper needs src_dir
                files.append(File(rel, str(REPO), config.site_dir, config.use_directory_urls))
    package = griffe.load("cel_lens", search_paths=[str(REPO)], extensions=griffe.load_extensions(_load_extension()),
                          resolve_aliases=True, resolve_external=False)
    for page, module in API_MODULES.items():
        files.append(File.generated(config, page, content=api_page(package, module)))
    return files


def _lazy_table(module: griffe.Module) -> dict[str, str]:
    """A lazily importing package's ``_LAZY`` table (public name -> defining module), read from its source."""
    for node in ast.parse(Path(module.filepath).read_text(encoding="utf-8")).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "_LAZY":
            return ast.literal_eval(node.value)
    return {}


def _public_names(module: griffe.Module) -> list[str]:
    """``__all__``, read statically; imported when it is computed (``cel_lens.__all__``: a cheap import)."""
    exports = module.exports
    if exports:
        return [str(getattr(e, "name", e)) for e in exports]
    return list(importlib.import_module(module.path).__all__)


def _defining_object(package: griffe.Module, module: griffe.Module, name: str, lazy: dict[str, str]) -> Any:
    """The object a public name stands for (aliases and lazy imports followed), or None."""
    try:
        obj = package[f"{lazy[name]}.{name}".removeprefix("cel_lens.")] if name in lazy else module[name]
        return obj.final_target if obj.is_alias else obj
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def api_page(package: griffe.Module, dotted: str) -> str:
    """The Markdown of one API page: the module's docstring, then one mkdocstrings block per public name."""
    module = package if dotted == "cel_lens" else package[dotted.removeprefix("cel_lens.")]
    lazy = _lazy_table(module)
    short = "cl" if dotted == "cel_lens" else dotted
    lines = [f"# {dotted}", "", f"::: {dotted}", "    options:", "      show_root_heading: false", "      members: false", ""]
    for name in _public_names(module):
        obj = _defining_object(package, module, name, lazy)
        if obj is None:
            log.warning("API: %s.%s is in __all__ but its definition was not found", dotted, name)
            continue
        if not (obj.docstring and obj.docstring.value.strip()):
            log.warning("API: %s.%s (%s) has no docstring", dotted, name, obj.path)
            continue
        lines += [f"::: {obj.path}", "    options:", f'      heading: "{short}.{name}"', f'      toc_label: "{name}"', ""]
    return "\n".join(lines)


def site_path(repo_path: str) -> str | None:
    """Where a repository file is on the site, or None when the site does not serve it."""
    mounted = {source: page for page, source in MOUNTS.items()}
    if repo_path in mounted:
        return mounted[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path.removeprefix("docs/")
    if repo_path.split("/", 1)[0] in (*STATIC_DIRS, NOTEBOOK_DIR):
        return repo_path
    return None


def rewrite_links(markdown: str, repo_file: str, page: str) -> str:
    """Relative links of ``repo_file`` (shown as site page ``page``) rewritten to the site's paths."""

    def fix(m: re.Match) -> str:
        target = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return m.group(0)
        path, _, anchor = target.partition("#")
        where = site_path(posixpath.normpath(posixpath.join(posixpath.dirname(repo_file), path)))
        if where is None:
            return m.group(0)
        new = posixpath.relpath(where, posixpath.dirname(page) or ".") + (f"#{anchor}" if anchor else "")
        return m.group(1) + new + m.group(3)

    return LINK.sub(fix, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Rewrite links to the site's paths; fill the CLI page from the parsers."""
    src = page.file.src_uri
    if src in _sources:
        markdown = rewrite_links(markdown, _sources[src], src)
    if src == CLI_PAGE:
        if CLI_MARKER not in markdown:
            log.warning("%s lost its marker %s", CLI_PAGE, CLI_MARKER)
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    return markdown


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _option_row(action: argparse.Action, prog: str) -> str:
    names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
    text = action.help or ""
    if "%" in text:
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        params["choices"] = ", ".join(map(str, action.choices)) if action.choices else ""
        try:
            text = text % {**params, "prog": prog}
        except (KeyError, TypeError, ValueError):
            pass
    if action.choices and "choices" not in (action.help or ""):
        text += f" (one of: {', '.join(map(str, action.choices))})"
    default = action.default
    shown = "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
    return f"| {_cell(names)} | {_cell(shown)} | {_cell(text)} |"


def cli_reference() -> str:
    """Markdown of every ``cel-lens`` subcommand: its help, usage and options, from the parsers."""
    from cel_lens.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    out = ["| command | what it does |", "|---|---|"]
    out += [f"| [`cel-lens {n}`](#cel-lens-{n}) | {_cell(helps.get(n) or '')} |" for n in sub.choices]
    for name, command in sub.choices.items():
        out += ["", f"## cel-lens {name}", "", helps.get(name) or "", ""]
        if command.description and command.description != helps.get(name):
            out += [command.description, ""]
        out += ["```text", command.format_usage().strip(), "```", ""]
        for group in command._action_groups:
            actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
            if actions:
                out += [f"**{group.title}**", "", "| option | default | what it does |", "|---|---|---|"]
                out += [_option_row(a, command.prog) for a in actions] + [""]
    return "\n".join(out)


def on_post_page(output: str, page: Any, config: Any) -> str:
    """A notebook's page (its source, unexecuted) links to its executed render first."""
    src = page.file.src_uri
    if not (src.startswith(f"{NOTEBOOK_DIR}/") and src.endswith(".ipynb")):
        return output
    render = f"{RENDERS}/{Path(src).stem}.html"
    if not (REPO / render).is_file() or ARTICLE not in output:
        return output
    href = posixpath.relpath(render, page.url or ".")
    note = (f'<p class="executed-render"><a href="{href}">The executed notebook</a>, outputs and figures included '
            "(written by <code>make render-notebooks</code>); below, its source.</p>")
    return output.replace(ARTICLE, ARTICLE + note, 1)
