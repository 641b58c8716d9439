# The README's two commands: `make demo` and `make test`. Both build .venv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-pure test-ray-versions bench proto lint venv clean browser database build-deps sanitize fuzz

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py $(wildcard src/ray_otel_events/native/*.h src/ray_otel_events/native/*.c)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,ray]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ray-otel-events demo

# Three pytest-xdist workers, each taking whole modules (a module's live clusters start once) in
# the order tests/conftest.py gives them (the slowest first): run one at a time, the suite waits on
# servers, clusters and subprocesses about half the time. Two workers left the 2-core machine idle
# in those waits (9:31 on an idle machine); three keep it busy (7:10 in the same hour).
WORKERS := -n 3 --dist loadfile --no-loadscope-reorder

# Fails on a skip tests/skip_allowlist.py does not list, and on a compiled helper that did not build
# (tests/test_native_layer.py names it): build-deps installs what each build needs first.
test: build-deps browser database
	$(BIN)/python -m pytest -q --whole-suite --durations=20 $(WORKERS)

# The same suite with the compiled helpers off: every Python twin runs where its C copy did (CI runs
# both; a test of a compiled module itself is skipped, saying so, and tests/skip_allowlist.py counts
# them).
test-pure: build-deps browser database
	RAY_OTEL_EVENTS_PURE_PYTHON=1 $(BIN)/python -m pytest -q --whole-suite --durations=20 $(WORKERS)

# A C compiler and the headers the compiled helpers need (apt, when missing), then the build: a
# .venv built before they were there is built again, since setup.py skips what it cannot build.
build-deps:
	@sh scripts/ensure_build_deps.sh $(PYTHON) || exit 1; \
	if [ -f $(STAMP) ] && [ -n "$$($(BIN)/python tests/helpers/built_modules.py)" ]; then \
		rm -f $(STAMP); fi
	$(MAKE) venv

# Live clusters of other Ray releases, each from PyPI in a venv of its own (cached under
# RAY_VERSIONS_DIR), exporting to our `serve`: their own `ray list` answers must be ours
# (tests/test_ray_versions_live.py; docs/ray-versions.md). The project's .venv is the 2.60 one.
RAY_VERSIONS ?= 2.49.2 2.52.1 2.55.0
RAY_VERSIONS_DIR ?= build/ray-versions

$(RAY_VERSIONS_DIR)/%/.installed:
	test -x $(RAY_VERSIONS_DIR)/$*/bin/python || $(PYTHON) -m venv $(RAY_VERSIONS_DIR)/$*
	$(RAY_VERSIONS_DIR)/$*/bin/python -m pip install --quiet --upgrade pip
	$(RAY_VERSIONS_DIR)/$*/bin/python -m pip install --quiet 'ray[default]==$*'
	touch $@

test-ray-versions: $(STAMP) $(foreach v,$(RAY_VERSIONS),$(RAY_VERSIONS_DIR)/$(v)/.installed)
	RAY_VERSIONS_VENVS=$(RAY_VERSIONS_DIR) $(BIN)/python -m pytest -q tests/test_ray_versions_live.py

# The page's tests need a real Chromium: installed with apt when missing.
browser:
	sh scripts/ensure_chromium.sh

# The store's tests run on SQLite and on a real PostgreSQL server: installed with apt when missing.
database:
	sh scripts/ensure_postgres.sh

# The compiled helpers under AddressSanitizer and UBSan, with -Werror, in build/sanitized/ (never the
# modules the suite above imports); clang and its sanitizer runtime are installed with apt when
# missing. `make sanitize` runs the compiled helpers' tests against it; `make fuzz` runs every
# harness in fuzz/ for FUZZ_SECONDS each (docs/fuzzing.md). Both fail on any report.
FUZZ_SECONDS ?= 60
FUZZ_SEED ?= 0
SANITIZED := build/sanitized/.built
PACKAGE_FILES := $(shell find src/ray_otel_events -name '*.py' -o -name '*.pyi' -o -name '*.c' -o -name '*.h')

$(SANITIZED): $(STAMP) setup.py fuzz/build_sanitized.py scripts/ensure_clang.sh $(PACKAGE_FILES)
	sh scripts/ensure_clang.sh $(BIN)/python
	$(BIN)/python fuzz/build_sanitized.py
	touch $@

sanitize: $(SANITIZED)
	$(BIN)/python fuzz/sanitize.py

fuzz: $(SANITIZED)
	$(BIN)/python fuzz/run.py --seconds $(FUZZ_SECONDS) --seed $(FUZZ_SEED)

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build dist src/*.egg-info
