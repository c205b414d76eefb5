# Two entry points, both doing all set-up first: `make demo` (end to end on embedded synthetic data, no GPU
# needed) and `make test` (the suite but the tests marked slow; CI runs exactly this; `make test-slow` runs those).
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO ?= runs/demo
DEVICE ?= $(shell $(PY) -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')" 2>/dev/null || echo cpu)
APT_PKGS := libopencv-dev libturbojpeg0-dev pkg-config libsndfile1
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup apt demo test test-slow lint clean

# ffcv builds from source against Debian's OpenCV and libjpeg-turbo; install them only when missing
apt:
	@if ! pkg-config --exists opencv4 libturbojpeg 2>/dev/null || ! ldconfig -p | grep -q libsndfile; then \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PKGS); \
	fi

$(VENV)/.installed: setup.cfg pyproject.toml
	$(MAKE) apt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[all]'
	touch $@

setup: $(VENV)/.installed

# The main job on embedded synthetic images: convert and verify, bench the loaders in the training loop, report,
# train with the loader the bench found fastest, then say what happened and what to run on your own data. On a CPU
# both take their CPU defaults (the tiny model at batch 32 in fp32; train says so), the bench a small grid; on a GPU
# the data's preset, ddpm_cifar10, compiled.
ifeq ($(DEVICE),cpu)
BENCH_OPTS := --backends torch,hdf5,gpu --workers 0,2 --batch-size 32 --steps 8 --timing-warmup 2 --precision fp32
TRAIN_OPTS := --steps 24 --log-every 8
else
BENCH_OPTS := --model ddpm_cifar10 --workers 0,4 --batch-size 128 --steps 60 --timing-warmup 20 --compile \
	--precision bf16
TRAIN_OPTS := --model ddpm_cifar10 --batch-size 128 --steps 300 --compile --precision bf16 --lr-warmup 5 \
	--sample-every 300 --log-every 100
endif
BENCH_DIR := $(DEMO)/images/.gpufeed-bench

demo: setup
	$(VENV)/bin/dataprep convert --source synthetic-images --limit 1024 --format all --out $(DEMO)/images \
		--overwrite --no-progress
	$(VENV)/bin/dataprep verify $(DEMO)/images
	$(VENV)/bin/bench loaders --data $(DEMO)/images --device $(DEVICE) --pin-memory on $(BENCH_OPTS) --no-progress
	$(VENV)/bin/bench report $(BENCH_DIR)
	rm -rf $(DEMO)/train
	$(VENV)/bin/train --data $(DEMO)/images --loader fastest --device $(DEVICE) $(TRAIN_OPTS) --no-progress \
		--out $(DEMO)/train
	@echo
	@$(PY) -m bench.report.demo $(BENCH_DIR) $(DEMO)/train

# First the bytecode of the project's own modules, as a non-editable install writes it: the tests start many
# processes, and where PYTHONDONTWRITEBYTECODE is set each one compiled them again (0.3-0.4 s a process on 2 cores).
# Then two test processes, each taking whole files (a file's fixtures built once): most tests wait on processes and
# servers of their own, so on 2 cores the suite ran in 0.63 of the time one process took.
test: setup
	$(PY) -m compileall -q -j 0 common dataprep loaders training bench tests > /dev/null
	$(PY) -m pytest -q -m "not slow" -n 2 --dist loadfile

test-slow: setup
	$(PY) -m pytest -q -m slow

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) runs
