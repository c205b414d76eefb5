# Two entry points, both doing all set-up first: `make demo` (end to end on embedded synthetic data, no GPU
# needed) and `make test` (the whole suite; CI runs exactly this).
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO ?= runs/demo
DEVICE ?= $(shell $(PY) -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')" 2>/dev/null || echo cpu)
APT_PKGS := libopencv-dev libturbojpeg0-dev pkg-config libsndfile1
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup apt demo test lint clean

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

demo: setup
	$(VENV)/bin/dataprep convert --source synthetic-images --limit 2000 --format all --output $(DEMO)/images --overwrite
	$(VENV)/bin/dataprep verify $(DEMO)/images
	$(VENV)/bin/dataprep convert --source synthetic-audio --limit 300 --format all --output $(DEMO)/audio --overwrite
	$(VENV)/bin/dataprep info $(DEMO)/audio
	$(PY) -m bench.loader_speed --data $(DEMO)/images --workers 2 --batch-size 128 --device $(DEVICE) \
		--out $(DEMO)/loader_speed.json
	rm -rf $(DEMO)/train
	$(VENV)/bin/train --data $(DEMO)/images --loader gpu --model tiny --batch-size 64 --steps 40 --warmup 5 \
		--precision fp32 --sample-every 40 --log-every 10 --device $(DEVICE) --no-progress --out $(DEMO)/train
	@echo "demo done: datasets in $(DEMO)/images and $(DEMO)/audio, loader speeds in $(DEMO)/loader_speed.json,"
	@echo "a short training run with its metrics and sample grid in $(DEMO)/train"

test: setup
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) runs
