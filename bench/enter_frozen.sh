# shellcheck shell=bash
# Sourced on the device from the repository root: enters .frozen/ (bench/freeze.sh), with the carried
# wheels, KernelBench checkout, baselines and the rows of each lane named (.devstate/LANE) where that
# tree's scripts look for them, and fresh lane folders. Several lanes (one per GPU of a multi-GPU
# machine, each given its share of the problems with --problems): `source bench/enter_frozen.sh f1 f2`.
# It is sourced, so it returns (never exits) on failure.
if [ $# -eq 0 ]; then
  echo "usage: source bench/enter_frozen.sh LANE [LANE...]" >&2
  return 1
fi
if [ ! -s .frozen/FROZEN_COMMIT ]; then
  echo "enter_frozen: no .frozen/ tree — run bench/freeze.sh COMMIT here and carry .frozen" >&2
  return 1
fi
_lw_root=$PWD
cd .frozen || return 1
ln -sfn "$_lw_root/.whl" .whl
mkdir -p third_party .devstate
ln -sfn "$_lw_root/third_party/KernelBench" third_party/KernelBench
rm -rf .devstate/base
[ -d "$_lw_root/.devstate/base" ] && cp -r "$_lw_root/.devstate/base" .devstate/base
for _lw_lane in "$@"; do
  rm -rf ".devstate/$_lw_lane" ".lanes/$_lw_lane"
  [ -d "$_lw_root/.devstate/$_lw_lane" ] && cp -r "$_lw_root/.devstate/$_lw_lane" ".devstate/$_lw_lane"
  _lw_rows=0
  [ -s ".devstate/$_lw_lane/expert_subset.csv" ] && _lw_rows=$(( $(wc -l < ".devstate/$_lw_lane/expert_subset.csv") - 1 ))
  echo "enter_frozen: running $(cat FROZEN_COMMIT) in $PWD, lane $_lw_lane seeded with $_lw_rows row(s)"
done
unset _lw_rows _lw_lane _lw_root
