# Two commands set everything up: `make run` and `make test` (README, "Quick start").
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
RIG     ?= config/rigs/default.toml
PYX     := $(wildcard hil/*/*.pyx hil/*/*.pxd)

.PHONY: run test lint soak bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Editable installs do not rebuild .pyx files: the stamp depends on them, so any change re-runs the build.
.stamp-install: $(BIN)/python pyproject.toml setup.py $(PYX)
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

run: .stamp-install
	$(BIN)/servo-hil run $(RIG)

test: .stamp-install
	$(BIN)/ruff check .
	$(BIN)/pytest -q

soak: .stamp-install
	$(BIN)/pytest -q -m soak

bench: .stamp-install
	$(BIN)/python bench/kernel.py

clean:
	rm -rf build *.egg-info hil/*/*.c hil/*/*.so .stamp-install
