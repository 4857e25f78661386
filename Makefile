# Two commands set everything up on a fresh machine:
#   make demo   - venv, packages, C build, then the demo on the reference vendor
#   make test   - the same set-up, then the test suite (CI profile)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# The PyTorch the full suite runs under (pinned: the supported window admits newer minors
# too, and an unpinned resolve would fetch the newest one).
MAIN_TORCH ?= 2.13.0
# Every other admitted minor (docs/operators/torch-versions.md): `make test` also runs
# OTHER_TESTS under each, in its own venv (.venv-torch-X.Y.Z), on the very same plugin binary.
OTHER_TORCHES ?= 2.14.1 2.15.0
OTHER_TESTS := tests/platforms/test_torch_version.py tests/house/test_architecture.py tests/runtime/test_ops.py tests/runtime/test_native_ops.py \
               tests/runtime/test_autograd.py tests/runtime/test_views_and_inplace.py tests/runtime/test_streams.py tests/runtime/test_memory.py \
               tests/runtime/test_copies_and_streams.py tests/runtime/test_serialization.py tests/e2e/test_e2e_training.py \
               tests/runtime/test_compile.py tests/runtime/test_sdpa.py tests/runtime/test_optimizers.py tests/runtime/test_torch_profiler.py \
               tests/runtime/test_graph_path.py tests/runtime/test_accelerator.py
# Our own builds hold C and C++ to -Wall -Wextra -Werror (fl_sdk/build.py, the bridge's build.py);
# a user's `pip install` and `fl-sdk build` do not (their newer compiler may warn where ours did not).
export FL_WERROR ?= 1
# The platforms `make test` also installs on, each a fresh debootstrap system (tests/platforms/
# README.md): the current Debian stable and Debian testing.  PLATFORMS= leaves them out.
PLATFORMS ?= trixie forky
PLATFORM_LOG ?= .platforms.log
# Third-party test dependencies come from this lock file, so a new release cannot turn main red
# overnight; `make refresh-constraints` moves it to the newest releases the ranges admit.
CONSTRAINTS := .ci/constraints.txt

.PHONY: demo test test-level test-other-torches test-platforms test-python-route bench build install clean refresh-constraints docs opencl opencl-deps

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=23"
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) "torch==$(MAIN_TORCH)" -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

build: install
	$(PY) -m fl_sdk build reference_vendor
	$(VENV)/bin/torch-fl build-bridge       # the native bridge for this venv's PyTorch (cached)

demo: build
	$(PY) examples/demo.py

# The OpenCL plugin (plugins/opencl, docs/vendors/opencl-plugin.md) runs its tests on PoCL, OpenCL
# on the host CPU.  opencl-deps installs the Debian packages it needs when one is missing and
# apt-get can (root; CI); elsewhere nothing is installed and tests/abi/test_opencl_plugin.py skips,
# naming the missing package.  opencl installs the plugin package into its own directory, not
# into the venv: its entry point would add a device to every other test's process (and, as
# "opencl" sorts before "reference", renumber fl:0); the OpenCL tests put it on PYTHONPATH.
OPENCL_DEBS := pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers clinfo
OPENCL_SITE ?= $(VENV)/opencl-site
opencl-deps:
	@missing=$$(for p in $(OPENCL_DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
		echo "installing $$missing (the OpenCL plugin's tests)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing > /dev/null; \
	elif [ -n "$$missing" ]; then echo "not installed: $$missing (the OpenCL plugin's tests will skip)"; fi

opencl: build opencl-deps
	@if [ -f /usr/include/CL/cl.h ]; then \
		$(PY) -m pip install --quiet --no-build-isolation --no-deps --upgrade --target $(OPENCL_SITE) ./plugins/opencl; \
	else echo "opencl-c-headers missing: the OpenCL plugin is not built"; fi

# The main suite is the longest chain of `make test`.  Beside it: the other minors' runs (mostly
# large installs, then a few minutes of tests each, one after the other; at full priority they end
# well before it, under nice they ended after it), and under nice the platform runs and the Python
# route.  Their logs are printed when all are done, and any failing fails `make test`.
OTHER_LOG ?= .venv-torch-other.log
ROUTE_LOG ?= .python-route.log
# pytest-xdist workers for the main suite; whole test files go to one worker (--dist loadfile), so
# a module's fixtures (the conformance run, the plugin builds) are made once.  TEST_WORKERS=0 runs
# it in one process.
TEST_WORKERS ?= 2
test: build opencl
	@rm -f $(OTHER_LOG) $(PLATFORM_LOG) $(ROUTE_LOG)
	@$(MAKE) --no-print-directory test-other-torches > $(OTHER_LOG) 2>&1 & other=$$!; \
	nice -n 5 $(MAKE) --no-print-directory test-platforms > $(PLATFORM_LOG) 2>&1 & platforms=$$!; \
	nice -n 5 $(MAKE) --no-print-directory test-python-route > $(ROUTE_LOG) 2>&1 & route=$$!; \
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25; main=$$?; \
	wait $$route; routerc=$$?; wait $$other; otherrc=$$?; wait $$platforms; platformrc=$$?; \
	echo "---- Python route, exit status $$routerc (log: $(ROUTE_LOG))"; cat $(ROUTE_LOG); \
	echo "---- PyTorch $(OTHER_TORCHES) runs, exit status $$otherrc (log: $(OTHER_LOG))"; cat $(OTHER_LOG); \
	echo "---- platforms $(PLATFORMS), exit status $$platformrc (log: $(PLATFORM_LOG))"; cat $(PLATFORM_LOG); \
	test $$main -eq 0 && test $$routerc -eq 0 && test $$otherrc -eq 0 && test $$platformrc -eq 0

# One level of the suite (docs/contributors/testing.md "Layout of the tests"), with the same set-up
# as `make test`: make test-level LEVEL=runtime (abi, runtime, e2e, sdk, platforms, house).
ifneq ($(filter test-level,$(MAKECMDGOALS)),)
ifeq ($(strip $(LEVEL)),)
$(error name a level: make test-level LEVEL=runtime (a folder of tests/))
endif
endif
test-level: build opencl
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m $(LEVEL)

test-other-torches: $(foreach v,$(OTHER_TORCHES),test-torch-$(v))

# The Python route (TORCH_FL_BRIDGE=0: no native bridge, every eager op through the Python
# kernels; docs/users/native-bridge.md) on the runtime and end-to-end subsets, so both routes
# stay correct: the main suite runs on the bridge.  A few minutes on two cores.
PYTHON_ROUTE_TESTS ?= tests/runtime/test_ops.py tests/runtime/test_native_ops.py tests/runtime/test_autograd.py \
	tests/runtime/test_views_and_inplace.py tests/runtime/test_streams.py tests/runtime/test_copies_and_streams.py \
	tests/runtime/test_fast_path.py tests/runtime/test_host_cost_phases.py tests/runtime/test_profiler.py tests/e2e/test_e2e_training.py
test-python-route: build
	TORCH_FL_BRIDGE=0 HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -p no:cacheprovider $(PYTHON_ROUTE_TESTS)

# One admitted minor: torch installed first, as a user who already has it; then the checkout,
# which must leave that torch as it was (pyproject states only the window's lower bound) and
# must not rebuild the plugin (same SHA-256 in every venv).
# This machine's pip configuration (/etc/xdg/pip) caps torch at the newest release on its disk
# (2.14.1); PIP_CONSTRAINT=/dev/null lifts that cap for these installs only, since each names
# its torch exactly.  2.15.0 is a CUDA build from the registry (~3 GB; it runs on the CPU); the
# venv is kept, so a second run on the same machine downloads nothing.
test-torch-%: build
	test -x .venv-torch-$*/bin/python || $(PYTHON) -m venv .venv-torch-$*
	sha256sum reference_vendor/libfl_reference.so > .venv-torch-$*/plugin.sha256
	.venv-torch-$*/bin/python -m pip install --quiet --upgrade "pip>=23"
	PIP_CONSTRAINT=/dev/null .venv-torch-$*/bin/python -m pip install --quiet "torch==$*"
	PIP_CONSTRAINT=/dev/null .venv-torch-$*/bin/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[test]"
	.venv-torch-$*/bin/python -c "import torch, sys; v = torch.__version__.split('+')[0]; \
	    sys.exit(0 if v == '$*' else f'installing torch-fl replaced torch $* with {v}')"
	sha256sum --check --quiet .venv-torch-$*/plugin.sha256    # the install did not rebuild the plugin
	.venv-torch-$*/bin/torch-fl build-bridge                 # the native bridge, built for this minor
	HYPOTHESIS_PROFILE=ci .venv-torch-$*/bin/python -m pytest -q $(OTHER_TESTS)
	.venv-torch-$*/bin/python -m fl_sdk test reference --profile ci -k "abi or memory or streams"

# Each platform in turn (they share the machine's two cores with the main suite): a cached
# debootstrap system with a cached layer holding the user's venv with torch, a throw-away overlay,
# then `pip install .` and the checks (tests/platforms/README.md).  Root is needed (debootstrap,
# chroot, mounts).
test-platforms:
	@if [ -z "$(strip $(PLATFORMS))" ]; then echo "platform runs left out (PLATFORMS is empty)"; exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "the platform runs need root (debootstrap, chroot); run as root or set PLATFORMS="; exit 1; fi; \
	rc=0; for suite in $(PLATFORMS); do tests/platforms/run-platform $$suite || rc=1; done; exit $$rc

refresh-constraints:
	.ci/refresh-constraints

bench: build
	$(PY) benchmarks/bench.py

# The documentation site (mkdocs.yml) into site/, strict: a broken link, anchor or nav entry
# fails.  tests/house/test_docs.py runs the same build in `make test`.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) .venv-torch-* .venv-newest $(OTHER_LOG) $(PLATFORM_LOG) reference_vendor/*.so plugins/opencl/opencl/*.so site
