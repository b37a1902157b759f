# shellcheck shell=bash
# One "lane" of device work per GPU of a multi-GPU machine; sourced after remote_prelude.sh:
#
#   export LANE_END=570   # seconds (bash SECONDS) at which every lane must have stopped
#   lane 0 g0 'python3 bench/a.py --budget-s $(( $(left) - 60 ))' &
#   lane 1 g1 'python3 bench/b.py' & wait
#
# A lane sees only its GPU (CUDA_VISIBLE_DEVICES) and works in .lanes/NAME/ (cache folder and
# output folder; resumable scripts keep their rows in the cache folder's bench/). It is stopped
# at LANE_END, then leaves one file, $OUT/NAME.tgz, holding its output folder, its log and its
# rows (state/), because the device returns at most 8 files. Rows carried back in
# .devstate/NAME/ (ignored; copy state/ there here) seed a lane on a fresh machine.
left() { echo $(( ${LANE_END:-540} - SECONDS )); }
export -f left
lane() {
  local gpu=$1 name=$2 cmd=$3 base=${OUT:-./bench_out} work=$PWD/.lanes/$2
  mkdir -p "$work/cache" "$work/out" "$base"
  if [ -d ".devstate/$name" ] && [ ! -e "$work/cache/bench" ]; then cp -r ".devstate/$name" "$work/cache/bench"; fi
  (
    export CUDA_VISIBLE_DEVICES=$gpu LOOPWISE_CACHE_DIR=$work/cache OUT=$work/out LANE_END
    timeout --kill-after=5 "$(left)" bash -c "$cmd" >>"$work/out/log.txt" 2>&1
    echo "lane $name rc=$? at ${SECONDS}s" >>"$work/out/log.txt"
  )
  rm -rf "$work/out/state" && cp -r "$work/cache/bench" "$work/out/state" 2>/dev/null
  tar czf "$base/$name.tgz" -C "$work" out
  tail -3 "$work/out/log.txt"
}
