# Two commands set everything up on a fresh machine:
#   make demo   - venv, packages, C build, then the demo on the reference vendor
#   make test   - the same set-up, then the test suite (CI profile)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench build install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=23"
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

build: install
	$(PY) -m fl_sdk build reference_vendor

demo: build
	$(PY) examples/demo.py

test: build
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q --durations=15

bench: build
	$(PY) benchmarks/bench.py

clean:
	rm -rf $(VENV) reference_vendor/*.so
