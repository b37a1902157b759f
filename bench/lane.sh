# shellcheck shell=bash
# Runs one "lane" of device work on one GPU of a multi-GPU machine, after remote_prelude.sh:
#
#   lane GPU NAME 'command; command'      (in the background: lane 0 a '...' & lane 1 b '...' & wait)
#
# The lane sees only GPU (CUDA_VISIBLE_DEVICES), keeps its own cache folder (.loopwise-cache/NAME,
# so resumable scripts find their rows again on a warm machine) and writes under $OUT/NAME, with
# its log in $OUT/NAME/log.txt. `left` inside a lane's commands gives the seconds to the deadline
# ($LANE_END, in bash SECONDS) so budgets can be computed when each step starts.
left() { echo $(( ${LANE_END:-540} - SECONDS )); }
lane() {
  local gpu=$1 name=$2 cmd=$3 base=${OUT:-./bench_out}
  (
    export CUDA_VISIBLE_DEVICES=$gpu LOOPWISE_CACHE_DIR=$PWD/.loopwise-cache/$name OUT=$base/$name
    mkdir -p "$OUT" "$LOOPWISE_CACHE_DIR"
    eval "$cmd" >"$OUT/log.txt" 2>&1
    echo "lane $name rc=$? at ${SECONDS}s" | tee -a "$OUT/log.txt"
  )
}
