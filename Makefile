# Two commands set everything up: `make run` and `make test` (README, "Quick start").
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
RIG     ?= config/rigs/default.toml
PYX     := $(shell git ls-files '*.pyx' '*.pxd' '*.pxi' 'hil/kernel/*.h' 'hil/kernel/*.def' 2>/dev/null)

.PHONY: run test lint soak bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Editable installs do not rebuild .pyx files: the stamp depends on them, so any change re-runs the build.
# `make run` needs the runtime dependencies only; `make test` adds the test extras of pyproject.toml.
# The build requirements go into the venv itself (no isolated build env): mujoco and numpy are downloaded once.
.stamp-run: $(BIN)/python pyproject.toml setup.py $(PYX)
	@echo "make: installing the build requirements"
	$(BIN)/pip install -q --progress-bar off $$($(BIN)/python -c "import tomllib; \
		print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires']))")
	@echo "make: installing the runtime dependencies and building the extensions (both cores)"
	$(BIN)/pip install --progress-bar off --no-build-isolation -e .
	@touch $@

.stamp-install: .stamp-run
	@echo "make: installing the test extras"
	$(BIN)/pip install -q --progress-bar off $$($(BIN)/python -c "import tomllib; \
		print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['test']))")
	@touch $@

run: .stamp-run
	$(BIN)/servo-hil run $(RIG)

test: .stamp-install
	$(BIN)/ruff check .
	$(BIN)/pytest -q

# the soak-marked fuzz and soak tests, then the 1 kHz dynamixel-sdk soak benchmark (JSON on stdout)
soak: SOAK_SECONDS ?= 3600
soak: .stamp-install
	$(BIN)/pytest -q -m soak
	$(BIN)/servo-hil bench soak --seconds $(SOAK_SECONDS)

# docker/Dockerfile built and run under podman (tests/container; docs/docker.md): needs root, podman, runc,
# debootstrap, catatonit (Debian packages); skipped with that hint when podman is missing
.PHONY: container-test
container-test: .stamp-install
	$(BIN)/pytest -q -s -m container

# drivers/emulated/etherban/etherban_pb2.py is generated and committed (the runtime needs only protobuf); its gencode
# version must not exceed the protobuf lower bound in pyproject.toml.
.PHONY: proto
proto: .stamp-install
	$(BIN)/python -m grpc_tools.protoc -I drivers/emulated/etherban --python_out=drivers/emulated/etherban drivers/emulated/etherban/etherban.proto

bench: .stamp-install
	$(BIN)/servo-hil bench kernel

# LeRobot's own arm classes (tests/lerobot, `servo-hil bench lerobot`, docs/lerobot.md) in a venv of their own:
# lerobot 0.4.4 (the last release for Python 3.11) with its own pins and its dynamixel and feetech extras, except
# torch/torchvision/torchcodec. lerobot pins torch<2.11 (CUDA builds of several GB); the arm classes import
# torchvision (lerobot.processor), and torch 2.14.1 with torchvision 0.29.1 is the pair this machine's disk has.
LEROBOT_VENV  := .venv-lerobot
LEROBOT       ?= lerobot==0.4.4
LEROBOT_TORCH ?= torch==2.14.1 torchvision==0.29.1
.PHONY: lerobot
lerobot: $(LEROBOT_VENV)/.stamp
$(LEROBOT_VENV)/.stamp: bench/peers/lerobot_requirements.py
	$(PY) -m venv $(LEROBOT_VENV)
	$(LEROBOT_VENV)/bin/pip install -q --upgrade pip
	$(LEROBOT_VENV)/bin/pip install -q --progress-bar off $(LEROBOT_TORCH)
	$(LEROBOT_VENV)/bin/pip install -q --progress-bar off --no-deps $(LEROBOT)
	$(LEROBOT_VENV)/bin/python bench/peers/lerobot_requirements.py > $(LEROBOT_VENV)/requirements.txt
	$(LEROBOT_VENV)/bin/pip install -q --progress-bar off -r $(LEROBOT_VENV)/requirements.txt $(LEROBOT_TORCH)
	@touch $@

# The newest LeRobot (Requires-Python >= 3.12) with its feetech, dynamixel and hardware (what its CLIs need) extras and
# all of its own pins, torch included (PyPI's CUDA build, ≈ 5 GB, runs on the CPU), in .venv-lerobot-next;
# tests/lerobot run against it too (docs/lerobot.md, "Torch"). PY: the first Python 3.12 or newer of
# python3.12, python3.13 on PATH and pyenv's versions (a pyenv shim of a version not enabled fails and is skipped).
LEROBOT_NEXT_VENV := .venv-lerobot-next
LEROBOT_NEXT      ?= lerobot[feetech,dynamixel,hardware]
.PHONY: lerobot-next
lerobot-next: $(LEROBOT_NEXT_VENV)/.stamp
$(LEROBOT_NEXT_VENV)/.stamp: PY = $(shell for p in python3.12 python3.13 $(sort $(wildcard \
	$(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3)); do $$p -c 'import sys; assert sys.version_info >= (3, 12); \
	print(sys.executable)' 2>/dev/null && break; done)
$(LEROBOT_NEXT_VENV)/.stamp:
	@"$(PY)" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null || { echo "make: lerobot-next needs" \
		"Python 3.12 or newer (python3.12 on PATH, pyenv install 3.12, or PY=/path/to/python3.12)" >&2; exit 1; }
	$(PY) -m venv $(LEROBOT_NEXT_VENV)
	$(LEROBOT_NEXT_VENV)/bin/pip install -q --upgrade pip
	$(LEROBOT_NEXT_VENV)/bin/pip install -q --progress-bar off '$(LEROBOT_NEXT)'
	@touch $@

# The web console's browser tests (tests/servo_hil/console) need Debian's Chromium (apt, as root) and Playwright for
# Python (in the venv; it drives /usr/bin/chromium, never a browser of its own); without them they skip.
.PHONY: browser
browser: $(BIN)/python
	@if [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "make: installing chromium (apt)"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq \
			&& DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; \
		else \
			echo "make: as root: apt-get install chromium (the console's browser tests need it)" >&2; exit 1; \
		fi; \
	fi
	$(BIN)/pip install -q --progress-bar off "playwright>=1.40"

clean:
	rm -rf build *.egg-info .stamp-run .stamp-install
	find bench hil firmware_models drivers -name '*.so' -delete
	for f in $(filter %.pyx,$(PYX)); do rm -f $${f%.pyx}.c $${f%.pyx}.html; done
