#!/usr/bin/env bash
# Runs the deterministic simulation (crates/fencelock-sim, docs/simulation.md) against the
# Redis-side mutants of scripts/mutants.sh: each mutant is applied to mutants.sh's copy of the
# tree (--tree), the simulator is built there, and seeds 0..99 of every scripted scenario run,
# then (if none failed) a fixed seed set of the mix under the claimed faults. A mutant is killed
# when a seed fails: main passes all of them (`./dev test` runs them). The mix under every fault
# (`--faults all`) is left out: main fails some of its seeds by design (faults beyond README's
# claims), so a failure there says nothing of a mutant without a rerun on main.
#
#   scripts/sim-mutants.sh               every Redis-side mutant below
#   scripts/sim-mutants.sh NAME...       the named ones
#   SIM_SEEDS=300 scripts/sim-mutants.sh (seeds per fault mix; default 200)
#   SIM_ARGS="--duration 12s" scripts/sim-mutants.sh NAME (more options for each run)
#
# The mutants are applied to HEAD as committed (MUTANTS_FROM=HEAD, see mutants.sh; set it to
# another commit, or to nothing for the working tree): a run takes minutes per mutant, and edits
# made meanwhile must not reach its copies.
#
# Builds go to $MUTANTS_TARGET_DIR (default <repo>/target/sim-mutants; copy a warm target/debug
# there first to rebuild only the workspace's crates). Prints one table row per mutant.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export MUTANTS_TARGET_DIR="${MUTANTS_TARGET_DIR:-$ROOT/target/sim-mutants}"
export MUTANTS_DIR="${MUTANTS_DIR:-$MUTANTS_TARGET_DIR/tree}"
export MUTANTS_FROM="${MUTANTS_FROM-HEAD}"
# The runner and its mutants as they are at the start (an edit to mutants.sh mid-run must not
# change the list under a running loop).
export MUTANTS_ROOT="$ROOT"
SRC_MUTANTS="$MUTANTS_TARGET_DIR/mutants.sh"
mkdir -p "$MUTANTS_TARGET_DIR"
if [[ -n "$MUTANTS_FROM" ]]; then
  git -C "$ROOT" show "$MUTANTS_FROM:scripts/mutants.sh" >"$SRC_MUTANTS"
else
  cp "$ROOT/scripts/mutants.sh" "$SRC_MUTANTS"
fi
chmod +x "$SRC_MUTANTS"
SEEDS="${SIM_SEEDS:-200}"
read -r -a EXTRA <<<"${SIM_ARGS:-}"
REDIS_SIDE=(
  release-no-compare acquire-without-nx quorum-of-one validity-ignores-elapsed
  writeback-no-raise writeback-no-owner-check writeback-quorum-unchecked writeback-off-by-one
  extend-unbatched extension-lost-at-once extension-unannounced
  guard-seed-before-issue guard-untrusted-counted guard-epoch-on-quorum
  writeback-seed-without-wait guard-seed-without-wait one-round-below-quorum
  fence-accept-equal fence-accept-untrusted quarantine-own-ttl flush-aged-by-uptime
  grant-marker-unchecked ttls-set-expires-with-the-writer ahead-never-announced
  ahead-kept-across-connections permit-line-ignored rw-read-ignores-writer rw-writer-not-ahead
  rw-marker-short rw-no-record election-log-trim-by-rank election-failed-campaign-not-withdrawn
  observer-counts-untrusted
  nodeset-no-check nodeset-no-wait round-waits-three-timeouts contention-as-unavailable
  reseed-creates-lost-counters token-proposed-past-i64 token-derived-past-i64 node-takes-past-i64
)
(($# > 0)) && REDIS_SIDE=("$@")
for name in "${REDIS_SIDE[@]}"; do
  if ! tree="$("$SRC_MUTANTS" --tree "$name" 2>/dev/null | tail -1)"; then
    echo "| \`$name\` | did not apply |"
    continue
  fi
  if ! (cd "$tree" && CARGO_TARGET_DIR="$MUTANTS_TARGET_DIR" CARGO_INCREMENTAL=1 \
        cargo build -q -p fencelock-sim --all-features --bin fencelock-sim) >/dev/null 2>&1; then
    echo "| \`$name\` | did not build |"
    continue
  fi
  verdict="SURVIVED"
  runs=()
  for scenario in $(sed -n 's/.*--scenario mixed|\([a-z|-]*\) .*/\1/p' "$tree/crates/fencelock-sim/src/bin/fencelock-sim.rs" | tr '|' ' '); do
    runs+=("--scenario $scenario --seeds 100")
  done
  runs+=("--faults claimed --seeds $SEEDS")
  for run in "${runs[@]}"; do
    read -r -a args <<<"$run"
    out="$("$MUTANTS_TARGET_DIR/debug/fencelock-sim" "${args[@]}" "${EXTRA[@]}" --stop 2>&1)"
    if [[ $? -ne 0 ]]; then
      first="$(grep -m1 -A1 'FAILED' <<<"$out" | tail -1 | sed 's/^ *//' | cut -c1-160)"
      seed="$(grep -m1 -o '^seed [0-9]*' <<<"$out")"
      verdict="killed: $run, $seed: $first"
      break
    fi
  done
  echo "| \`$name\` | $verdict |"
done
