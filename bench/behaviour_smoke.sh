#!/usr/bin/env bash
# The same three jobs run by one loopwise tree, their JSON written under OUT/LABEL/, to compare two
# trees' behaviour side by side (same machine, same inputs, same seeds):
#
#   bash bench/behaviour_smoke.sh ROOT LABEL        # ROOT: a folder holding the loopwise package
#   LW_SMOKE_JOBS="kernels" bash bench/behaviour_smoke.sh ...   # only some of: kernels memory training
#   python3 bench/behaviour_compare.py OUT/A OUT/B  # what differs
#
# The kernels job (the bundled softmax problem, expert proposer, greedy search, budget 6) needs an
# NVIDIA GPU and is skipped without one (the CPU judge times nothing meaningful); the memory plans
# and the smoke training search run anywhere.
set -u
root=$(cd "$1" && pwd); label=$2
out=${OUT:-./bench_out}/$label
mkdir -p "$out"
lw() { PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" python3 -m loopwise "$@"; }
jobs=${LW_SMOKE_JOBS:-kernels memory training}
wants() { case " $jobs " in *" $1 "*) return 0;; esac; return 1; }
problem="$root/loopwise/kernels/examples/softmax_problem.py"
if wants kernels && command -v nvidia-smi >/dev/null 2>&1; then
  lw kernels optimize "$problem" --proposer expert --search greedy --budget 6 --seed 0 \
     --runs-dir "$out/runs" --json > "$out/kernels_optimize.json" 2> "$out/kernels_optimize.err"
  echo "kernels optimize rc=$?"
fi
for model in $(wants memory && echo zoo:resnet50 zoo:bert-base); do
  lw memory plan "$model" --target neuroncore-v2 --json > "$out/memory_${model#zoo:}.json" 2> "$out/memory_${model#zoo:}.err"
  echo "memory plan $model rc=$?"
done
wants training || exit 0
lw training search arithmetic --preset smoke --budget-stages 4 --depth 2 --seed 0 \
   --runs-dir "$out/runs" --json > "$out/training_search.json" 2> "$out/training_search.err"
echo "training search rc=$?"
