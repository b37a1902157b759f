#!/usr/bin/env bash
# Ray for the device machine, whose image has none: its wheel (72 MB) is over what one call carries
# (64 MiB with everything else), so it travels in two halves over two calls on a warm machine and is
# put together there (/tmp persists while the machine is held).
#
#   bash bench/ray_wheels.sh                  # here: .raywhl/a/ (first half), .raywhl/b/ (second half + deps)
#   device call 1, carry [".raywhl/a"]:       mkdir -p /tmp/ray && cp .raywhl/a/* /tmp/ray/
#   device call 2, carry [".raywhl/b"]:       cp .raywhl/b/* /tmp/ray/ && bash bench/ray_wheels.sh --install
#   later calls (warm), as usual with .whl:   source bench/remote_prelude.sh; python3 bench/throughput.py --executor ray
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
RAY="ray==2.60.0"
DEPS=("jsonschema==4.25.1" "jsonschema-specifications==2025.9.1" "referencing==0.37.0" "rpds-py==0.30.0")

if [ "${1:-}" = "--install" ]; then  # on the device
  cat /tmp/ray/ray.part-* > /tmp/ray/"$(cat /tmp/ray/ray.name)"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    /tmp/ray/"$(cat /tmp/ray/ray.name)" /tmp/ray/*.whl
  PYTHONPATH=/tmp/site python3 -c "import ray; print('ray', ray.__version__)"
  exit 0
fi

PY=${PYTHON:-python3}
get() {
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$1" "$2"
}
rm -rf .raywhl && mkdir -p .raywhl/a .raywhl/b .raywhl/full
get .raywhl/full "$RAY"
for d in "${DEPS[@]}"; do get .raywhl/b "$d"; done
wheel=$(ls .raywhl/full/ray-*.whl)
basename "$wheel" > .raywhl/b/ray.name
split -b 36m -d "$wheel" .raywhl/full/ray.part-
mv .raywhl/full/ray.part-00 .raywhl/a/ && mv .raywhl/full/ray.part-* .raywhl/b/
rm -rf .raywhl/full
du -sh .raywhl/a .raywhl/b
