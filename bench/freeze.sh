#!/usr/bin/env bash
# A benchmark run that spans device sessions (the expert's side-by-side run: 49 problems x 2 tracks,
# over an hour of device time, 30 minutes a session) must measure one commit's code throughout, while
# work on main goes on. Here:
#
#   bench/freeze.sh COMMIT        # .frozen/ = COMMIT's tree (git archive, no tests), FROZEN_COMMIT
#
# and on the device, from the repository root, carrying .frozen, .whl, third_party/KernelBench and
# the lane's rows in .devstate/NAME:
#
#   source bench/enter_frozen.sh NAME || exit 1; source bench/remote_prelude.sh ...; source bench/lane.sh; lane 0 NAME '...'
set -euo pipefail
commit=${1:?usage: bench/freeze.sh COMMIT}
cd "$(git rev-parse --show-toplevel)"
full=$(git rev-parse --verify "$commit^{commit}")
rm -rf .frozen && mkdir .frozen
git archive "$full" | tar -x -C .frozen
rm -rf .frozen/tests
echo "$full" > .frozen/FROZEN_COMMIT
echo "froze $full into .frozen/ ($(du -sh .frozen | cut -f1))"
