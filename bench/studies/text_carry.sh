#!/usr/bin/env bash
# Run HERE (a machine with PyPI): .whl/text/site.tar.xz (ignored by git), the text stack the GPU machine lacks for
# bench/studies/text_gpu.sh, installed for its Python 3.12 (~20 MiB): transformers, tokenizers, sentencepiece,
# open_clip (its CLIP vocabulary), diffusers, and what they import that the GPU image does not have. timm is left
# out: open_clip imports it only for timm's image towers.
set -euo pipefail
out=.whl/text
py312=${PY312:-$(pyenv root 2>/dev/null)/versions/3.12.1/bin/python3}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plat=(--only-binary=:all: --python-version 3.12 --implementation cp)
for p in manylinux2014 manylinux_2_17 manylinux_2_28 manylinux_2_34; do plat+=(--platform "${p}_x86_64"); done
python3 -m pip download -q --no-deps "${plat[@]}" -d "$tmp/whl" transformers==5.24.0 tokenizers==0.23.3 \
  sentencepiece==0.2.3 open-clip-torch==3.3.0 diffusers==0.42.1 huggingface-hub==2.4.0 hf-xet==1.8.0 \
  safetensors==0.8.0 regex==2026.11.19 ftfy==6.3.1 wcwidth==0.9.4 pyyaml==6.0.4 tqdm==4.70.1 typer==0.29.2 \
  shellingham==1.5.4 rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0 annotated-doc==0.0.7 \
  httpx2==2.16.2 httpcore2==2.16.2 h11==0.16.0 anyio==4.16.0 truststore==0.10.5 importlib-metadata==10.2.0 \
  zipp==4.1.2 lazy-importer==0.1.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5
"$py312" -m pip install -q --no-index --no-deps --no-compile --target "$tmp/site" "$tmp"/whl/*.whl
rm -rf "$tmp"/site/*/tests
tar -C "$tmp/site" -cJf "$out/site.tar.xz" .
ls -la "$out"
