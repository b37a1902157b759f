# shellcheck shell=bash
# Sourced at the start of every command on the device machine, from the repository root:
#
#   source bench/remote_prelude.sh || exit 1; python3 bench/kernelbench_agreement.py ...
#
# Installs the carried wheels (.whl/, made by bench/wheels.sh) into /tmp/site, points PYTHONPATH at
# them and at this checkout, and prints what the numbers were measured on. It is sourced, so it
# returns (never exits) on failure. LW_WHEELS names another wheel folder: .whl-kernels/ (made by
# `bash bench/wheels.sh --kernels`, the kernels engine's 9 MiB) leaves room in a call's 64 MiB for
# a part of bench/split_wheels.sh.

_lw_dir=${LW_WHEELS:-.whl}
if ! ls "$_lw_dir"/*.whl >/dev/null 2>&1; then
  echo "remote_prelude: no wheels under $_lw_dir/ — run bench/wheels.sh here and carry $_lw_dir" >&2
  return 1
fi

# A warm machine keeps /tmp/site between calls: reinstall only when the set of wheels changed.
_lw_stamp=$(ls "$_lw_dir"/*.whl | xargs -n1 basename | sort | tr '\n' ' ')
if [ "$(cat /tmp/site/.wheels 2>/dev/null)" != "$_lw_stamp" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$_lw_dir"/*.whl || { echo "remote_prelude: pip install of $_lw_dir/ failed" >&2; return 1; }
  printf '%s' "$_lw_stamp" > /tmp/site/.wheels
fi
unset _lw_stamp
# C extensions published only as source (bench/wheels.sh puts them in .whl/sdist/): compiled here,
# once per machine; a failure is a warning (only the training engine's rg_chain_sum task needs them).
if ls "$_lw_dir"/sdist/*.tar.gz >/dev/null 2>&1 && [ ! -e /tmp/site/.sdists ]; then
  if python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir \
       --target /tmp/site "$_lw_dir"/sdist/*.tar.gz; then
    touch /tmp/site/.sdists
  else
    echo "remote_prelude: warning: building .whl/sdist/ failed (reasoning-gym tasks will not import)" >&2
  fi
fi

unset _lw_dir

export PYTHONPATH=/tmp/site:$PWD
# nvidia-cutlass-dsl (bench/split_wheels.sh quack) puts its packages on sys.path from a .pth file,
# which a PYTHONPATH entry does not run
if [ -d /tmp/site/nvidia_cutlass_dsl/dsl_packages ]; then
  PYTHONPATH=$PYTHONPATH:/tmp/site/nvidia_cutlass_dsl/dsl_packages
fi
export LOOPWISE_CACHE_DIR=$PWD/.loopwise-cache
export PYTHONUNBUFFERED=1
export OUT=${OUT:-./bench_out}
mkdir -p "$OUT" "$LOOPWISE_CACHE_DIR"

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
else
  echo "remote_prelude: no nvidia-smi on PATH"
fi
python3 - <<'PY'
import platform
import torch
try:
    import triton
    triton_version = triton.__version__
except ImportError:
    triton_version = "absent"
import pydantic
cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
print(f"python {platform.python_version()}  torch {torch.__version__} (CUDA {torch.version.cuda})  "
      f"triton {triton_version}  pydantic {pydantic.VERSION}  device: {cuda}", flush=True)
PY
