# Two commands do everything on a fresh Debian 12 machine (as root):
#   make demo   set up and install, then `gpuscope demo`: seven slowdowns traced live and explained
#   make test   set up, then run the whole test suite (privileged eBPF tests included)
# Also: make install (a `gpuscope` launcher on PATH, tab completion), make uninstall, make wheel (dist/*.whl).

# The system's Python where there is one: an environment built on a Python in root's home (pyenv) is
# one no other user can run (scripts/install_launcher.py checks, and says so).
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
# On x86-64, the cross compiler of `make wheel ARCH=aarch64` (and of its test); an arm64 host builds natively.
CROSS_PACKAGES := $(if $(filter x86_64,$(shell uname -m)),gcc-aarch64-linux-gnu)
APT_PACKAGES := clang llvm libbpf-dev libbpf1 gcc make python3-venv python3-dev sqlite3 libsqlite3-dev \
                iproute2 binutils util-linux tmux sudo chromium faketime bash-completion \
                prometheus $(CROSS_PACKAGES)

# `make install` writes a launcher for this checkout's environment here; `sudo gpuscope` finds
# /usr/local/bin (sudo's secure_path has it). Without root: make install PREFIX=~/.local
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
COMPLETIONS ?= $(PREFIX)/share/bash-completion/completions
# The mark scripts/install_launcher.py writes in the launcher: uninstall removes only a file that has it.
LAUNCHER_MARK := gpuscope launcher (make install)

.PHONY: setup apt venv native demo test lint bench gpu-validate clean install uninstall wheel

setup: apt venv native

apt:
	@if command -v apt-get >/dev/null 2>&1; then \
	  missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  fi; \
	fi

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml hatch_build.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

native:
	$(PY) scripts/build_native.py

demo: install
	$(PY) scripts/demo.py $(ARGS)

install: setup
	$(PY) scripts/install_launcher.py --bindir "$(BINDIR)" --completions "$(COMPLETIONS)" --gpuscope "$(VENV)/bin/gpuscope"

uninstall:
	@if [ -e "$(BINDIR)/gpuscope" ] && grep -q "$(LAUNCHER_MARK)" "$(BINDIR)/gpuscope"; then \
	  rm -f "$(BINDIR)/gpuscope" "$(COMPLETIONS)/gpuscope" && echo "removed $(BINDIR)/gpuscope"; \
	else echo "no gpuscope launcher of ours in $(BINDIR)"; fi

# A wheel with the BPF objects, the stand-in libraries and the guides inside: pip install dist/gpuscope-*.whl
# (or pipx install dist/gpuscope-*.whl) on a machine with libbpf1; no compiler needed there. Tagged manylinux
# for the glibc its libraries need. ARCH=aarch64 builds one for arm64 hosts (GH200, Graviton) on this machine:
# arm64 BPF objects from bpf/include/vmlinux/arm64, the stand-ins with gcc-aarch64-linux-gnu.
ARCH ?=

wheel: setup
	GPUSCOPE_TARGET_ARCH=$(ARCH) $(PY) -m pip wheel -q --no-deps -w dist .

test: setup lint
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/ruff format --check src tests bench scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# bpftrace is the yardstick of bench/vs_bpftrace.py and bpftool reads the time
# inside each program for `bench/run.py --prog-stats`: not dependencies of gpuscope.
BENCH_PACKAGES := bpftrace bpftool

bench: setup
	@if command -v apt-get >/dev/null 2>&1; then \
	  missing=""; for p in $(BENCH_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing:$$missing (for the benchmarks)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  fi; \
	fi
	$(PY) bench/run.py

# On a GPU host, as root, with the Python that has PyTorch (no venv, compiler or registry needed there when the
# BPF objects in src/gpuscope/_bpf were built elsewhere): bench/gpu/validate.py, results in bench/gpu/results/.
GPU_PYTHON ?= python3

gpu-validate:
	@test -f src/gpuscope/_bpf/cuda.bpf.o || $(MAKE) native
	PYTHONPATH=src $(GPU_PYTHON) bench/gpu/validate.py $(ARGS)

clean:
	rm -rf $(VENV) build dist src/gpuscope/_bpf src/gpuscope/_standin
