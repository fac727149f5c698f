# nbcompile — two commands on a fresh machine: `make lab` and `make test`.
# Pythons are found by name, never by a machine path (scripts/find_python.sh): `make test` and
# `make lab` use the newest Python >= 3.12 (python3.14/3.13/3.12 on the PATH, else pyenv's) with
# the newest JAX; `make test-compat` uses Python 3.11 with JAX 0.10.2, the oldest supported stack.
# (`make lab` falls back to Python 3.11 and JAX 0.10.2 where no newer Python is found.)
PYTHON ?= $(shell scripts/find_python.sh newest 2>/dev/null || scripts/find_python.sh 3.11 2>/dev/null)
COMPAT_PYTHON ?= $(shell scripts/find_python.sh 3.11 2>/dev/null)
VENV   ?= .venv
COMPAT_VENV ?= .venv-compat
PY     := $(VENV)/bin/python
CPY    := $(COMPAT_VENV)/bin/python
PIP    := $(PY) -m pip -q --disable-pip-version-check
CPIP   := $(CPY) -m pip -q --disable-pip-version-check
PORT   ?= 8888
export JAX_PLATFORMS ?= cpu
# the oldest supported stack (SPEC 9.1): what `make test-compat` installs
COMPAT_JAX := jax==0.10.2 jaxlib==0.10.2
# what touches JAX's internals, run on that stack too: every reach, both call-capture backends,
# the cache, the library example models, the frozen format across versions, the HLO parser's
# shortcuts (they lean on the order XLA prints attributes in)
COMPAT_TESTS := tests/test_jax_reaches.py tests/analysis/test_capture_hooks.py \
	tests/analysis/test_call_groups.py tests/analysis/test_call_kinds_hash.py \
	tests/analysis/test_capture_backends.py tests/test_cache_live.py \
	tests/test_persistent_cache.py tests/test_reruns.py tests/realmodels \
	tests/frozen/test_golden.py tests/frozen/test_cross_version.py \
	tests/frozen/test_roundtrip.py tests/test_versions.py tests/measure/test_metal_reaches.py \
	tests/measure/test_kernel_code_library.py tests/measure/test_dump_damage.py \
	tests/measure/test_kernel_code.py tests/measure/test_passes.py \
	tests/test_exchange_schema.py tests/analysis/test_long_names.py tests/analysis/test_loops.py \
	tests/analysis/test_call_transforms.py tests/analysis/test_call_cap.py tests/analysis/test_call_prompt_code.py tests/analysis/test_capture_list_items.py \
	tests/test_early_hlo.py tests/analysis/test_fast_paths.py tests/measure/test_elf_symbols.py

# the tests that start engines (nbcompile.cluster), run on this stack too: jaxlib 0.12.1's CPU
# collectives hang in engines, so on it nbcompile.cluster refuses to start and they are skipped
CLUSTER_TESTS := tests/test_cluster.py tests/test_cluster_hostile.py \
	tests/notebooks/test_tutorials.py tests/notebooks/test_claims_ablated.py

.PHONY: lab demo newest-python test test-compat test-fast test-ui test-fuzz test-gpu-deviceless test-tutorials-plugins tutorials-burner bench bench-check gpu-check docs lint clean

PYVER := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
VENV_MADE := $(VENV)/.made-with-python$(PYVER)

# A venv made by another Python (an older checkout's 3.11 one) is made again.
$(VENV_MADE):
	@test -n "$(PYVER)" || { scripts/find_python.sh newest; exit 1; }
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	touch $@

$(PY): $(VENV_MADE)

# Installs are stamped by the pyproject.toml they came from, so re-runs are instant.
# JupyterLab settings for `make lab`: save widget state with the notebook, so a reopened
# notebook shows the live nbcompile view without re-running (jupyter/overrides.json).
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json

$(VENV)/.lab-installed: pyproject.toml package.json jupyter/overrides.json $(VENV_MADE)
	$(PIP) install -e ".[lab]"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	mkdir -p $(dir $(LAB_SETTINGS)) && cp jupyter/overrides.json $(LAB_SETTINGS)
	touch $@

$(VENV)/.test-installed: pyproject.toml package.json $(VENV_MADE)
	$(PIP) install -e ".[lab,test,tpu,flax,equinox,keras,docs]"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

$(COMPAT_VENV)/.installed: pyproject.toml package.json
	@test -n "$(COMPAT_PYTHON)" || { scripts/find_python.sh 3.11; exit 1; }
	rm -rf $(COMPAT_VENV)
	$(COMPAT_PYTHON) -m venv $(COMPAT_VENV)
	$(CPIP) install --upgrade pip
	$(CPIP) install -e ".[test,tpu,flax,equinox,keras]" $(COMPAT_JAX)
	$(CPY) -m ipykernel install --sys-prefix --name python3 >/dev/null
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

STACK := import sys, jax, jaxlib; print(f"stack: Python {sys.version.split()[0]}, jax {jax.__version__}, jaxlib {jaxlib.__version__}")

newest-python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null || { scripts/find_python.sh newest; exit 1; }

test: newest-python $(VENV)/.test-installed /usr/bin/chromium
	@$(PY) -c '$(STACK)'
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -q
	$(VENV)/bin/pytest -q

# The oldest supported stack: Python 3.11 + JAX 0.10.2, on what touches JAX's internals.
test-compat: $(COMPAT_VENV)/.installed
	@$(CPY) -c '$(STACK)'
	$(COMPAT_VENV)/bin/pytest -q $(COMPAT_TESTS)
	$(COMPAT_VENV)/bin/pytest -q -m cluster $(CLUSTER_TESTS)

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

# Issue 44's budget, measured (not a test): every tutorial through the tests' runner, twice,
# with a CPU-burning process per core beside them; prints each notebook's time and verdict.
tutorials-burner: $(VENV)/.test-installed
	$(PY) scripts/tutorials_burner.py $(BURNER_ARGS)

bench: $(VENV)/.test-installed /usr/bin/chromium
	$(PY) -m benchmarks

bench-check: $(VENV)/.test-installed /usr/bin/chromium
	$(PY) -m benchmarks --check

gpu-check: $(VENV_MADE)
	$(PY) scripts/gpu_check.py

docs: $(VENV)/.test-installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf build dist .pytest_cache .ruff_cache
