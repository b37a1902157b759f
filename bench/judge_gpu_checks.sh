#!/usr/bin/env bash
# The judge's GPU checks in one device call (after `source bench/remote_prelude.sh`), each under its
# own time limit, logs and JSON under $OUT:
#   1. the gpu-marked tests of the judge, the honest candidates and the static/naive corpus
#   2. where a multi-GB judgement's memory goes (bench/judge_memory.py on the 4.9 GB log_softmax)
#   3. the adversarial corpus through `kernels eval` with and without the static scan
#      (bench/exploits_gpu.py; EXPLOITS names a comma-separated subset, empty: all)
set -u
export PYTHONUNBUFFERED=1
timeout "${TESTS_S:-330}" python3 -m pytest -q -p no:cacheprovider -m gpu -rs \
  tests/kernels/evaluate/test_honest_candidates.py tests/kernels/evaluate/test_judge.py tests/kernels/check/test_check.py \
  > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests: rc=$?"; tail -n 25 "$OUT/gpu_tests.txt"
timeout "${MEMORY_S:-150}" python3 bench/judge_memory.py tests/kernels/candidates/problems/log_softmax_long_rows.py \
  tests/kernels/candidates/triton_log_softmax_online.py > "$OUT/judge_memory.txt" 2>&1
echo "judge memory: rc=$?"; head -c 2500 "$OUT/judge_memory.txt"
only=${EXPLOITS:+--only=$EXPLOITS}
timeout "${EXPLOITS_S:-100}" python3 bench/exploits_gpu.py --no-honest $only > "$OUT/exploits.txt" 2>&1
echo "exploits: rc=$?"; tail -n 25 "$OUT/exploits.txt"
