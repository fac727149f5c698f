# nbcompile — two commands on a fresh machine: `make lab` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip -q --disable-pip-version-check
PORT   ?= 8888
export JAX_PLATFORMS ?= cpu

.PHONY: lab demo test test-fast test-ui test-fuzz test-gpu-deviceless test-tutorials-plugins bench bench-check gpu-check docs lint clean

$(PY):
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "nbcompile needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# Installs are stamped by the pyproject.toml they came from, so re-runs are instant.
# JupyterLab settings for `make lab`: save widget state with the notebook, so a reopened
# notebook shows the live nbcompile view without re-running (jupyter/overrides.json).
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json

$(VENV)/.lab-installed: pyproject.toml package.json jupyter/overrides.json | $(PY)
	$(PIP) install -e ".[lab]"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	mkdir -p $(dir $(LAB_SETTINGS)) && cp jupyter/overrides.json $(LAB_SETTINGS)
	touch $@

$(VENV)/.test-installed: pyproject.toml package.json | $(PY)
	$(PIP) install -e ".[lab,test,tpu,flax,equinox,keras,docs]"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

/usr/bin/chromium:
	@command -v apt-get >/dev/null || { echo "install Chromium (Debian package 'chromium') for the browser tests"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
lab: $(VENV)/.lab-installed
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks --ServerApp.port=$(PORT) \
		--ServerApp.ip=127.0.0.1 $(ROOT_FLAG) $(LAB_ARGS)

demo: $(VENV)/.lab-installed
	$(VENV)/bin/nbcompile render notebooks/01_quickstart.ipynb -o build/demo.html

test: $(VENV)/.test-installed /usr/bin/chromium
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -q
	$(VENV)/bin/pytest -q

test-fast: $(VENV)/.test-installed
	$(VENV)/bin/pytest -q -m "not ui and not kernel and not slow"

test-ui: $(VENV)/.test-installed /usr/bin/chromium
	$(VENV)/bin/pytest -q -m ui

test-fuzz: $(VENV)/.test-installed
	$(VENV)/bin/pytest -q tests/frozen/test_fuzz.py -m fuzz_full

test-gpu-deviceless: $(VENV)/.test-installed
	$(PIP) install "jax[cuda12]==$$($(PY) -c 'import jax; print(jax.__version__)')"
	$(VENV)/bin/pytest -q -m gpu_deviceless

# The tutorials as a user with every accelerator extra sees them on a machine without those
# devices: libtpu (the [tpu] extra, in .venv) plus the CUDA plugin (jax[cuda12]'s packages, a
# ~5 GB download) installed beside .venv -- never into it -- in build/cuda-plugin, put on the
# path of the tests and their notebook kernels, which start without JAX_PLATFORMS.
# (`make test` runs the same tests with libtpu only.)
CUDA_PLUGIN := build/cuda-plugin
$(CUDA_PLUGIN)/.installed: $(VENV)/.test-installed
	V=$$($(PY) -c 'import jax; print(jax.__version__)') && $(PIP) install --target $(CUDA_PLUGIN) \
		--upgrade "jax-cuda12-plugin[with-cuda]==$$V" "jax-cuda12-pjrt==$$V"
	touch $@

test-tutorials-plugins: $(CUDA_PLUGIN)/.installed
	PYTHONPATH=$(CURDIR)/$(CUDA_PLUGIN) $(VENV)/bin/pytest -q tests/notebooks tests/test_backend_start.py

bench: $(VENV)/.test-installed /usr/bin/chromium
	$(PY) -m benchmarks

bench-check: $(VENV)/.test-installed /usr/bin/chromium
	$(PY) -m benchmarks --check

gpu-check: $(PY)
	$(PY) scripts/gpu_check.py

docs: $(VENV)/.test-installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf build dist .pytest_cache .ruff_cache
