# shellcheck shell=bash
# One "lane" of device work per GPU of a multi-GPU machine; sourced after remote_prelude.sh:
#
#   export LANE_END=570   # seconds (bash SECONDS) at which every lane must have stopped
#   lane 0 g0 'python3 bench/a.py --budget-s $(( $(left) - 60 ))' &
#   lane 1 g1 'python3 bench/b.py' & wait
#
# A lane sees only its GPU (CUDA_VISIBLE_DEVICES) and its share of the CPU cores (taskset: the
# cores split evenly over LANES lanes, default one per GPU, so a compile-heavy lane cannot slow the
# host side of a timing lane), and works in .lanes/NAME/ (cache folder and
# output folder; resumable scripts keep their rows in the cache folder's bench/). It is stopped
# at LANE_END, then leaves one file, $OUT/NAME.tgz, holding its output folder, its log and its
# rows (state/), because the device returns at most 8 files. Rows carried back in
# .devstate/NAME/ (ignored; copy state/ there here) seed a lane on a fresh machine.
left() { echo $(( ${LANE_END:-540} - SECONDS )); }
export -f left
# The logical CPUs of lane GPU (a comma list), or nothing when taskset is missing. Whole physical
# cores are dealt out (SMT siblings stay in one lane), cores of one socket together.
lane_cores() {
  command -v taskset >/dev/null 2>&1 || return 0
  local lanes=${LANES:-$(nvidia-smi -L 2>/dev/null | wc -l)}
  [ "${lanes:-0}" -ge 1 ] || lanes=1
  for c in /sys/devices/system/cpu/cpu[0-9]*; do
    [ -r "$c/topology/core_id" ] || continue
    echo "$(cat "$c/topology/physical_package_id") $(cat "$c/topology/core_id") ${c##*cpu}"
  done | sort -k1,1n -k2,2n -k3,3n | awk -v lanes="$lanes" -v lane="$(( $1 % lanes ))" '
    { key = $1 " " $2; if (!(key in idx)) { idx[key] = n++; } cpu[NR] = $3; core[NR] = idx[key] }
    END { per = int(n / lanes); if (per < 1) per = 1; out = ""
          for (i = 1; i <= NR; i++) if (int(core[i] / per) == lane || (lane == lanes - 1 && int(core[i] / per) >= lanes))
            out = out (out == "" ? "" : ",") cpu[i]
          print out }'
}
lane() {
  local gpu=$1 name=$2 cmd=$3 base=${OUT:-./bench_out} work=$PWD/.lanes/$2
  mkdir -p "$work/cache" "$work/out" "$base"
  if [ -d ".devstate/$name" ] && [ ! -e "$work/cache/bench" ]; then cp -r ".devstate/$name" "$work/cache/bench"; fi
  (
    export CUDA_VISIBLE_DEVICES=$gpu LOOPWISE_CACHE_DIR=$work/cache OUT=$work/out LANE_END
    local cores pin=()
    cores=$(lane_cores "$gpu"); [ -n "$cores" ] && pin=(taskset -c "$cores")
    echo "lane $name: GPU $gpu, cores ${cores:-all}" >>"$work/out/log.txt"
    timeout --kill-after=5 "$(left)" "${pin[@]}" bash -c "$cmd" >>"$work/out/log.txt" 2>&1
    echo "lane $name rc=$? at ${SECONDS}s" >>"$work/out/log.txt"
  )
  rm -rf "$work/out/state" && cp -r "$work/cache/bench" "$work/out/state" 2>/dev/null
  tar czf "$base/$name.tgz" -C "$work" out
  tail -3 "$work/out/log.txt"
}
