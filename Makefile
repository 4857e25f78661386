# Two commands set everything up on a fresh machine:
#   make demo   - venv, packages, C build, then the demo on the reference vendor
#   make test   - the same set-up, then the test suite (CI profile)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# The PyTorch the full suite runs under (pinned: the supported range admits 2.14 too, and an
# unpinned resolve would fetch the newest one).
MAIN_TORCH ?= 2.13.0
# The newer supported PyTorch minor (README "Supported PyTorch versions"): `make test` also
# runs a subset of the tests under it, in its own venv, on the very same plugin binary.
NEXT_TORCH ?= 2.14.1
NEXT_VENV  ?= .venv-torch-next
NEXT_PY    := $(NEXT_VENV)/bin/python
NEXT_TESTS := tests/test_torch_version.py tests/test_architecture.py tests/test_ops.py tests/test_native_ops.py \
              tests/test_autograd.py tests/test_views_and_inplace.py tests/test_streams.py tests/test_memory.py \
              tests/test_copies_and_streams.py tests/test_serialization.py tests/test_e2e_training.py \
              tests/test_compile.py tests/test_sdpa.py tests/test_optimizers.py tests/test_torch_profiler.py \
              tests/test_graph_path.py

.PHONY: demo test test-torch-next bench build install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=23"
	$(PY) -m pip install --quiet "torch==$(MAIN_TORCH)" -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

build: install
	$(PY) -m fl_sdk build reference_vendor

demo: build
	$(PY) examples/demo.py

# The PyTorch-next run (mostly a 5.5 GB install, then a few minutes of tests) overlaps the
# main suite; its log is printed when both are done, and either failing fails `make test`.
NEXT_LOG ?= $(NEXT_VENV).log
# pytest-xdist workers for the main suite; whole test files go to one worker (--dist loadfile), so
# a module's fixtures (the conformance run, the plugin builds) are made once.  TEST_WORKERS=0 runs
# it in one process.
TEST_WORKERS ?= 2
test: build
	@rm -f $(NEXT_LOG)
	@$(MAKE) --no-print-directory test-torch-next > $(NEXT_LOG) 2>&1 & next=$$!; \
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25; main=$$?; \
	wait $$next; nextrc=$$?; \
	echo "---- PyTorch $(NEXT_TORCH) run, exit status $$nextrc (log: $(NEXT_LOG))"; cat $(NEXT_LOG); \
	test $$main -eq 0 && test $$nextrc -eq 0

test-torch-next: build
	test -x $(NEXT_PY) || $(PYTHON) -m venv $(NEXT_VENV)
	sha256sum reference_vendor/libfl_reference.so > $(NEXT_VENV)/plugin.sha256
	$(NEXT_PY) -m pip install --quiet --upgrade "pip>=23"
	$(NEXT_PY) -m pip install --quiet "torch==$(NEXT_TORCH)" -e ".[test]"
	sha256sum --check --quiet $(NEXT_VENV)/plugin.sha256    # the install did not rebuild the plugin
	HYPOTHESIS_PROFILE=ci $(NEXT_PY) -m pytest -q $(NEXT_TESTS)
	$(NEXT_PY) -m fl_sdk test reference --profile ci -k "abi or memory or streams"

bench: build
	$(PY) benchmarks/bench.py

clean:
	rm -rf $(VENV) $(NEXT_VENV) $(NEXT_LOG) reference_vendor/*.so
