#!/usr/bin/env bash
# `./dev test` several times in a row on a busy machine (issue 28): N CPU-bound processes run
# beside it for the whole time (each a shell loop that never sleeps, at the same priority as
# the tests), as a loaded CI runner or a developer's build would.
#
#   scripts/busy-test.sh [RUNS [BURNERS]]     defaults: 3 runs, 2 burners
#
# Each run's output goes to target/busy-test/run-K.log; the summary line per run gives its exit
# status, wall time and the load average at its end. Stops at the first failing run.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
burners="${2:-2}"
out=target/busy-test
mkdir -p "$out"

pids=()
stop_burners() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap stop_burners EXIT
for _ in $(seq "$burners"); do
  ( while :; do :; done ) &
  pids+=("$!")
done
echo "busy-test: $burners CPU-bound process(es) running (pids ${pids[*]}) on $(nproc) core(s)"

for k in $(seq "$runs"); do
  started=$(date +%s)
  if ./dev test --no-fail-fast >"$out/run-$k.log" 2>&1; then status=ok; else status=FAILED; fi
  took=$(( $(date +%s) - started ))
  echo "busy-test: run $k of $runs: $status in $((took / 60)) min $((took % 60)) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ "$status" != ok ]; then
    grep -E "^test .* FAILED|panicked at|^error" "$out/run-$k.log" | head -20 || true
    exit 1
  fi
done
echo "busy-test: $runs of $runs runs passed"
