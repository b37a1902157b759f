# shellcheck shell=bash
# Sourced on the device from the repository root: enters .frozen/ (bench/freeze.sh), with the carried
# wheels, KernelBench checkout, baselines and the rows of lane $1 (.devstate/$1) where that tree's
# scripts look for them, and a fresh lane folder. It is sourced, so it returns (never exits) on failure.
if [ ! -s .frozen/FROZEN_COMMIT ]; then
  echo "enter_frozen: no .frozen/ tree — run bench/freeze.sh COMMIT here and carry .frozen" >&2
  return 1
fi
_lw_root=$PWD
cd .frozen || return 1
ln -sfn "$_lw_root/.whl" .whl
mkdir -p third_party .devstate
ln -sfn "$_lw_root/third_party/KernelBench" third_party/KernelBench
rm -rf .devstate/base ".devstate/${1:?usage: source bench/enter_frozen.sh LANE}" ".lanes/$1"
[ -d "$_lw_root/.devstate/base" ] && cp -r "$_lw_root/.devstate/base" .devstate/base
[ -d "$_lw_root/.devstate/$1" ] && cp -r "$_lw_root/.devstate/$1" ".devstate/$1"
_lw_rows=0
[ -s ".devstate/$1/expert_subset.csv" ] && _lw_rows=$(( $(wc -l < ".devstate/$1/expert_subset.csv") - 1 ))
echo "enter_frozen: running $(cat FROZEN_COMMIT) in $PWD, lane $1 seeded with $_lw_rows row(s)"
unset _lw_rows
unset _lw_root
