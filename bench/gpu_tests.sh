#!/usr/bin/env bash
# The GPU test suite on the device machine (after `source bench/remote_prelude.sh`):
#
#   bash bench/gpu_tests.sh [pytest args...]
#
# Runs every test marked `gpu`, one test module per pytest process, so that a module that crashes
# the interpreter (a segmentation fault in an extension) or runs past its time loses only itself.
# One line per module: its path, pytest's exit status (124: stopped at GPU_TEST_TIMEOUT seconds,
# default 300; 139: a segmentation fault), the seconds it took and pytest's last line. Each
# module's whole output goes to $OUT/gpu_tests/ when OUT is set, unbuffered, so a module stopped
# at its limit still shows how far it got.
#
#   GPU_TEST_ONLY="a.py b.py"   only these modules (paths under tests/)
#   GPU_TEST_RECORD=FILE        append each module's line to FILE and skip modules already in it,
#                               so a later call resumes where a call's limit stopped this one
#
# Two modules hold no GPU test and import packages the device's Python lacks (ray:
# bench/split_wheels.sh ray carries it; mcp): they are left out here rather than skipped in the
# suite, so `make test` still fails when they break.
set -u
timeout_s=${GPU_TEST_TIMEOUT:-300}
record=${GPU_TEST_RECORD:-}
logs=${OUT:+$OUT/gpu_tests}
[ -n "$logs" ] && mkdir -p "$logs"
if [ -n "${GPU_TEST_ONLY:-}" ]; then
  modules=$GPU_TEST_ONLY
else
  modules=$(grep -rl --include='test_*.py' -e 'pytest.mark.gpu' tests | grep -v -x -e tests/core/execute/test_ray.py \
            -e tests/test_mcp.py | sort)
fi
failed=0
for module in $modules; do
  if [ -n "$record" ] && grep -q "^$module	" "$record" 2>/dev/null; then
    continue
  fi
  out=${logs:-/tmp}/$(echo "$module" | tr '/' '_').txt
  start=$(date +%s)
  PYTHONUNBUFFERED=1 timeout "$timeout_s" python3 -m pytest -q -m gpu "$module" -p no:cacheprovider -rs "$@" > "$out" 2>&1
  rc=$?
  line=$(printf '%s\t%s\t%ss\t%s' "$module" "$rc" "$(( $(date +%s) - start ))" "$(tail -n 1 "$out")")
  echo "$line"
  [ -n "$record" ] && echo "$line" >> "$record"
  # 5: no test collected (every GPU test of the module deselected by the caller's arguments)
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
    failed=1
    tail -n 25 "$out" | sed 's/^/    /'
  fi
done
exit $failed
