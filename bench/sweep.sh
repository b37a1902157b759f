#!/usr/bin/env bash
# One `kernels bench` spread over many device calls and sessions (all of KernelBench is hours of
# device time; a call is at most 10 minutes, a session 30), measuring one frozen commit throughout
# while main moves on. Each call resumes the bench where the last one stopped: finished problems
# are kept, the problem under way when the call's time ran out resumes its search.
#
# Here, once:        bench/freeze.sh COMMIT                    (.frozen/ = that commit's tree)
# On the device, from the repository root, carrying .frozen, the wheels ($LW_WHEELS, default
# .whl-kernels), third_party/KernelBench/KernelBench and .devstate/NAME (absent on the first call):
#
#   bash bench/sweep.sh NAME SECONDS [kernels bench options, used only when the bench starts]
#   e.g. bash bench/sweep.sh kb-all 540 --levels 1,2,3 --order shuffled:20261213 --budget 2 --search greedy
#
# It stops the bench with SIGTERM at SECONDS counted from this script's start (bash SECONDS: the
# prelude's time counts, a caller's earlier work does not; pass what is left of the call) and leaves
# in $OUT: NAME.tgz (the bench's state: its runs folder without built extensions, its id and the
# frozen commit; a state made by another commit is refused),
# NAME.log (this call's output) and NAME-rows.csv (every finished problem, bench/bench_rows.py).
# NAME.tgz is also refreshed every SWEEP_SNAPSHOT_S seconds (default 60) while the bench runs, so a
# call that runs past its own limit loses at most that much.
# Here, after each call: cp FILES_AT/NAME.tgz .devstate/NAME/state.tgz (the next call's start).
# Inductor's records (the compiler seed of each problem, kept by the bench in its cache and keyed
# by problem, GPU model, versions and the extraction's code) are shared by every sweep: each call
# starts with those in $SWEEP_RECORDS (default .devstate/inductor_records) and leaves all it has in
# $OUT/inductor_records.tgz, so a second track of the same problems extracts none again. Here,
# after each call: mkdir -p .devstate && tar xzf FILES_AT/inductor_records.tgz -C .devstate
#
# SWEEP_SUITE names the problems: a KernelBench-format folder under the repository root (default
# third_party/KernelBench, a checkout) or an absolute path; or generated:SEED[:COUNT] (COUNT 200
# by default), the frozen commit's `loopwise kernels generate` suite, written afresh on each call
# (the same seed gives the same files) and never carried. Bench it with --levels 1,2.
set -u
name=${1:?usage: bash bench/sweep.sh NAME SECONDS [kernels bench options]}
end=${2:?usage: bash bench/sweep.sh NAME SECONDS [kernels bench options]}
shift 2
root=$PWD
if [ ! -s .frozen/FROZEN_COMMIT ]; then
  echo "sweep: no .frozen/ tree; run bench/freeze.sh COMMIT here and carry .frozen" >&2
  exit 1
fi
suite=${SWEEP_SUITE:-third_party/KernelBench}
case $suite in
  generated:*)
    spec=${suite#generated:}
    gen_seed=${spec%%:*}
    gen_count=200
    [ "$spec" != "$gen_seed" ] && gen_count=${spec#*:}
    case "$gen_seed$gen_count" in
      ''|*[!0-9]*) echo "sweep: SWEEP_SUITE=generated:SEED[:COUNT] takes integers, not '$spec'" >&2; exit 1 ;;
    esac ;;
  *)
    if [ ! -d "$suite" ]; then
      echo "sweep: no problem suite at $suite; carry it (KernelBench: third_party/KernelBench/KernelBench)" >&2
      exit 1
    fi
    # as the bench sees it from .frozen/ (a relative path: the same on every call)
    case $suite in /*) ;; *) suite=../$suite ;; esac ;;
esac
LW_WHEELS=${LW_WHEELS:-.whl-kernels}
case $LW_WHEELS in /*) ;; *) LW_WHEELS=$root/$LW_WHEELS ;; esac
export LW_WHEELS
export OUT=${OUT:-$root/bench_out}
cd .frozen || exit 1
# shellcheck source=/dev/null
source bench/remote_prelude.sh || exit 1
echo "sweep $name: commit $(cat FROZEN_COMMIT)"
records=${SWEEP_RECORDS:-$root/.devstate/inductor_records}
cache=${LOOPWISE_CACHE_DIR:?the prelude sets LOOPWISE_CACHE_DIR}/inductor_records
mkdir -p "$cache"
if [ -d "$records" ]; then
  cp -n "$records"/*.json "$cache"/ 2>/dev/null
  echo "sweep $name: $(find "$cache" -name '*.json' | wc -l) Inductor record(s) at the start"
fi
state=.sweep/$name
rm -rf "$state" && mkdir -p "$state/runs"
if [ -s "$root/.devstate/$name/state.tgz" ]; then
  tar xzf "$root/.devstate/$name/state.tgz" -C "$state" || { echo "sweep: $name's state does not unpack" >&2; exit 1; }
  made_by=$(cat "$state/frozen_commit" 2>/dev/null || echo "an unrecorded commit")
  if [ "$made_by" != "$(cat FROZEN_COMMIT)" ]; then
    echo "sweep: $name's state was made by $made_by, .frozen/ is $(cat FROZEN_COMMIT); one sweep measures one commit: name another sweep, or remove .devstate/$name to start afresh" >&2
    exit 1
  fi
fi
cp FROZEN_COMMIT "$state/frozen_commit"
case $suite in
  generated:*)
    # the frozen commit's generator writes the same problems from the same seed on every call
    python3 -m loopwise kernels generate --out "$state/suite" --count "$gen_count" --seed "$gen_seed" > /dev/null \
      || { echo "sweep: generating the suite $suite failed" >&2; exit 1; }
    suite=$state/suite ;;
esac
common=(--kernelbench "$suite" --runs-dir "$state/runs")
log=$OUT/$name.log
if [ -s "$state/bench_id" ]; then
  id=$(cat "$state/bench_id")
  echo "sweep $name: resuming bench $id"
  cmd=(python3 -m loopwise kernels bench --resume "$id" "${common[@]}")
else
  echo "sweep $name: starting a bench: $*"
  cmd=(python3 -m loopwise kernels bench kernelbench "$@" "${common[@]}")
fi
left=$(( end - SECONDS ))
if [ "$left" -lt 60 ]; then
  echo "sweep: only ${left}s left before ${end}s; nothing started" >&2
  exit 1
fi
bench_id() {
  # the bench's first line names it: "bench ID · N problems ..."
  [ -s "$state/bench_id" ] && return 0
  sed -n 's/^bench \([0-9]\{8\}-[0-9]\{6\}-[0-9a-f]\{6\}\) .*/\1/p' "$log" 2>/dev/null | head -n 1 > "$state/bench_id.part"
  [ -s "$state/bench_id.part" ] && mv "$state/bench_id.part" "$state/bench_id"
  [ -s "$state/bench_id" ]
}
pack() {
  # the state as it stands (its id once the bench has named itself), replacing $OUT/NAME.tgz only
  # once the new archive is whole, so a call stopped by its own limit still returns the last one
  local members=(frozen_commit runs)
  [ -s "$state/bench_id" ] && members=(bench_id "${members[@]}")
  tar czf "$OUT/.$name.tgz.part" -C "$state" --exclude='*.so' --exclude='*.o' --exclude='*.ninja*' --exclude='*.html' \
    "${members[@]}" 2>/dev/null && mv -f "$OUT/.$name.tgz.part" "$OUT/$name.tgz"
  tar czf "$OUT/.inductor_records.tgz.part" -C "$(dirname "$cache")" inductor_records 2>/dev/null \
    && mv -f "$OUT/.inductor_records.tgz.part" "$OUT/inductor_records.tgz"
}
export MAX_JOBS=${MAX_JOBS:-16}
timeout --signal=TERM --kill-after=30 "$left" "${cmd[@]}" > "$log" 2>&1 &
bench=$!
( while sleep "${SWEEP_SNAPSHOT_S:-60}"; do bench_id && pack; done ) &
snapper=$!
wait "$bench"
rc=$?
kill "$snapper" 2>/dev/null; wait "$snapper" 2>/dev/null
echo "sweep $name: bench exited $rc at ${SECONDS}s" | tee -a "$log"
bench_id || echo "sweep: the bench's id is not in its log; the next call starts afresh" >&2
python3 bench/bench_rows.py "$state/runs" "$OUT/$name-rows.csv" >> "$log" 2>&1 || echo "sweep: bench_rows.py failed" >&2
pack
rm -f "$OUT/.$name.tgz.part" "$OUT/.inductor_records.tgz.part"
echo "sweep $name: state $(du -h "$OUT/$name.tgz" | cut -f1), $(( $(wc -l < "$OUT/$name-rows.csv") - 1 )) problem row(s)"
echo "sweep $name: $(find "$cache" -name '*.json' | wc -l) Inductor record(s) in inductor_records.tgz"
tail -n 5 "$log"
