#!/usr/bin/env bash
# The mutant runner: applies each mutant below to a copy of the tree, runs the test(s) that must
# kill it, and prints a table: mutant -> test -> killed or SURVIVED. A mutant is a small, named
# break of the protocol (a Lua script) or of the code around it; a test that does not fail on it
# guards nothing. The table and the last result are in docs/mutants.md.
#
#   scripts/mutants.sh                 run every mutant
#   scripts/mutants.sh NAME...         run the named mutants
#   scripts/mutants.sh --list          list the mutants
#   scripts/mutants.sh --check         only check that every mutant still applies (no build)
#   scripts/mutants.sh --tree NAME     leave a mutated copy of the tree and print its path (to run
#                                      the harness on it, for instance)
#
# The copy lives in $MUTANTS_DIR (default: <target dir>/mutants-tree). Builds go to
# $MUTANTS_TARGET_DIR (default: <repo>/target/mutants), a target dir of their own: cargo names a
# workspace member's artifacts by its path *relative to the workspace root*, so the copy and the
# real tree would share (and overwrite) each other's builds in one target dir, and a build of the
# real tree while the runner works could pick up a mutated library, or hand the runner an
# unmutated one. Only fencelock is rebuilt per mutant once that dir is warm.
# Exit status: 0 when every mutant was killed, 1 when one survived or did not apply.
set -euo pipefail
ROOT="${MUTANTS_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}"
TARGET="${MUTANTS_TARGET_DIR:-$ROOT/target/mutants}"
export CARGO_TARGET_DIR="$TARGET"
WORK="${MUTANTS_DIR:-$TARGET/mutants-tree}"

# Each mutant: a name, what it breaks, the file, a perl substitution (run with -0pe, so it may
# span lines) and the killers: `cargo test --all-features` arguments, one per test.
NAMES=() WHAT=() FILES=() SUBSTS=() KILLERS=()
mutant() {
  NAMES+=("$1") WHAT+=("$2") FILES+=("$3") SUBSTS+=("$4")
  shift 4
  local IFS=';'
  KILLERS+=("$*")
}

mutant writeback-no-raise "the write-back does not raise the counters" \
  crates/fencelock/src/redis/lua/write_back.lua \
  's/settle_counters\(n \+ 1, n \+ 1, n, best, v, legacy\)/-- mutant: counter not raised/' \
  "-p fencelock --lib redis::script_checks::the_write_back_raises_the_counter" \
  "-p fencelock --test fencing tokens_increase_across_1000"
mutant writeback-no-owner-check "the write-back raises counters where another client owns the key" \
  crates/fencelock/src/redis/lua/write_back.lua \
  's/if not all_owned\(n, ARGV\[1\]\) then return 0 end/-- mutant: no ownership check/' \
  "-p fencelock --lib redis::script_checks::a_write_back_on_a_key_another_client_owns" \
  "-p fencelock-sim --test sim a_grant_never_counts_a_node_its_key_left_between_rounds_seeds_0_to_99"
mutant writeback-quorum-unchecked "the client accepts a write-back that no quorum took" \
  crates/fencelock/src/redis/guard.rs \
  's/if wb\.decision != Decision::Reached \{/if false && wb.decision != Decision::Reached {/' \
  "-p fencelock --lib redis::script_checks::an_acquisition_whose_write_back_a_majority_refuses" \
  "-p fencelock-sim --test sim tokens_follow_the_counters_a_quorum_took_seeds_0_to_99"
mutant release-no-compare "the release deletes the key without comparing the owner value" \
  crates/fencelock/src/redis/lua/release.lua \
  's/if v\[1\] ~= ARGV\[1\] then\n(\s*-- MGET)/if false then\n$1/; s/if v\[1\] == ARGV\[1\] then/if true then/' \
  "-p fencelock --test redlock release_with_a_wrong_token_leaves_the_key"
mutant holder-not-in-value "a labelled client stores the bare token: its holder label is nowhere on the nodes (issue 33)" \
  crates/fencelock/src/redis/redlock.rs \
  's/\.carrying\(self\.holder\.as_deref\(\)\)/.carrying(None)/' \
  "-p fencelock-sim --test sim labelled_and_unlabelled_clients_exclude_each_other_and_show_their_own_holder_seeds_0_to_99" \
  "-p fencelock --test holder the_label_rides_in_the_lock_value_and_goes_with_it"
mutant holder-stale-side-key-trusted "a reader takes an older client's label key whatever its TTL: a label left behind names a later holder (issue 33)" \
  crates/fencelock/src/holder.rs \
  's/pub\(crate\) const LEGACY_HOLDER_SLACK_MS: i64 = 10;/pub(crate) const LEGACY_HOLDER_SLACK_MS: i64 = i64::MAX \/ 4;/' \
  "-p fencelock-sim --test sim labelled_and_unlabelled_clients_exclude_each_other_and_show_their_own_holder_seeds_0_to_99"
mutant labelled-owner-not-an-owner "a lock key whose value carries the holder label is taken for another program's value once its TTL is removed: run exits 2 and tells the operator to delete a live lock (issue 33 review)" \
  crates/fencelock-cli/src/probe/redis.rs \
  's/\.is_some_and\(fencelock::protocol::is_owner_value\);/.is_some_and(|v| v.len() == 32 \&\& fencelock::protocol::is_owner_value(v));/' \
  "-p fencelock-cli --test run_ops a_signal_while_waiting_ends_the_wait_at_once_and_runs_nothing"
mutant extend-keeps-side-key "the extension extends an older client's holder side key with the lock: a side key left behind by a lost lock takes the new holder's TTL and names it (issue 33)" \
  crates/fencelock/src/redis/lua/extend.lua \
  's/  redis\.call\(\x27pexpire\x27, KEYS\[i\], ARGV\[2\]\)\n/  redis.call(\x27pexpire\x27, KEYS[i], ARGV[2])\n  redis.call(\x27pexpire\x27, holder_key(KEYS[i]), ARGV[2])\n/' \
  "-p fencelock-sim --test sim labelled_and_unlabelled_clients_exclude_each_other_and_show_their_own_holder_seeds_0_to_99"
mutant writeback-off-by-one "the write-back stores token - 1, a value no holder got" \
  crates/fencelock/src/redis/guard.rs \
  's/self\.write_back\(&targets, keys, owner, token, kind\)/self.write_back(\&targets, keys, owner, token - 1, kind)/' \
  "-p fencelock --test counter a_derived_token_is_written_back_as_issued" \
  "-p fencelock-sim --test sim tokens_follow_the_counters_a_quorum_took_seeds_0_to_99"
mutant validity-ignores-elapsed "validity counted from the reply, not from before the request" \
  crates/fencelock/src/pure/validity.rs \
  's/ttl\.checked_sub\(elapsed\)\?/ttl.checked_sub(elapsed * 0)?/' \
  "-p fencelock --test redlock validity_is_below_the_ttl_and_shrinks" \
  "-p fencelock --test guarantees a_delayed_single_node_shortens_the_validity_by_the_delay" \
  "-p fencelock --test guarantees fenced_redlock_under_network_delay_counts_validity_from_the_send" \
  "-p fencelock-sim --test sim slow_replies_shorten_the_validity_seeds_0_to_99"
mutant round-waits-three-timeouts "a round waits three node timeouts for paused nodes" \
  crates/fencelock/src/redis/round.rs \
  's/std::pin::pin!\(tokio::time::sleep\(limit\)\)/std::pin::pin!(tokio::time::sleep(limit * 3))/' \
  "-p fencelock --test redlock paused_nodes_cost_about_one_node_timeout" \
  "-p fencelock-sim --test sim a_passing_failure_does_not_lose_a_held_lock_seeds_0_to_99"
mutant extend-unbatched "auto-extension sends one pipeline per lock, in turn, not one per batch" \
  crates/fencelock/src/redis/extender.rs \
  's/let \(counts, votes\) = self\.extend_batch_round\(&locks, timeout\)\.await;/let (mut counts, mut votes) = (Vec::new(), Default::default()); for l in &locks { let (c, v) = self.extend_batch_round(std::slice::from_ref(l), timeout).await; counts.extend(c); votes = v; }/' \
  "-p fencelock --test long_work one_client_extends_two_thousand_locks_in_batches" \
  "-p fencelock-sim --test sim hundreds_of_auto_extended_locks_stay_held_seeds_0_to_99"
mutant extension-lost-at-once "the extension rule loses the lock at the first failed attempt instead of retrying within the validity left (the rule before issue 15)" \
  crates/fencelock/src/pure/extension.rs \
  's/let due = now \+ schedule\.retry;/return Lost(LostCause::Unreachable);\n            #[allow(unreachable_code)]\n            let due = now + schedule.retry;/' \
  "-p fencelock --lib pure::extension::tests::a_failure_is_retried_within_the_validity_left" \
  "-p fencelock --test long_work a_passing_failure_of_a_majority_is_retried_within_the_validity" \
  "-p fencelock-sim --test sim a_passing_failure_does_not_lose_a_held_lock_seeds_0_to_99"
mutant extension-waits-on-a-hung-node "an extension round waits the whole validity for a hung node after another node failed (a brief break of one node and a hang of another lose the lock)" \
  crates/fencelock/src/redis/round.rs \
  's/let patient = matches!\(mode, Mode::UntilQuorum\)/let patient = false \&\& matches!(mode, Mode::UntilQuorum)/' \
  "-p fencelock-sim --test sim a_passing_failure_does_not_lose_a_held_lock_seeds_0_to_99"
mutant contention-as-unavailable "a lock held by another client is reported as unavailable when a node failed" \
  crates/fencelock/src/redis/redlock.rs \
  's/if votes\.held_by_other\(\) > n\.saturating_sub\(quorum\) \|\| votes\.failed\(\) == 0 \{/if votes.failed() == 0 {/' \
  "-p fencelock --test long_work a_job_of_ten_ttls_keeps_its_lock_while_a_minority_dies" \
  "-p fencelock-sim --test sim a_refusal_says_whether_the_lock_is_held_or_the_nodes_are_down_seeds_0_to_99"
mutant etcd-validity-outlasts-lease "etcd: the validity deadline runs half a TTL past the lease" \
  crates/fencelock/src/etcd/timing.rs \
  's/    sent\.checked_add\(valid\)\n/    sent.checked_add(valid + granted \/ 2)\n/' \
  "-p fencelock --test etcd extend_keeps_the_lease_and_reports_it_lost_once_expired" \
  "-p fencelock --test guarantees etcd_network_delay_shortens_the_validity"
mutant acquire-without-nx "acquisition sets the key whether or not another client holds it" \
  crates/fencelock/src/redis/ops.rs \
  's/cmd\.arg\(key\)\.arg\(token\)\.arg\("NX"\)\.arg\("PX"\)/cmd.arg(key).arg(token).arg("PX")/' \
  "-p fencelock --test redlock on_one_node_a_second_client_cannot_acquire_while_the_first_holds"
mutant guard-seed-before-issue "the amnesia guard seeds the nodes without a counter before the token is issued (and without the seed wait)" \
  crates/fencelock/src/redis/guard.rs \
  's/\n(\s*)let wb = self\.write_back\(/\n$1self.write_back(\&seeds, keys, owner, token, WriteBack::Epoch).await;\n$1let wb = self.write_back(/' \
  "-p fencelock --test amnesia a_failed_attempt_seeds_no_node" \
  "-p fencelock-sim --test sim a_restarted_node_is_not_seeded_below_a_token_it_lost_seeds_0_to_99"
mutant guard-untrusted-counted "the amnesia guard counts a read from a node without a counter as trusted (0)" \
  crates/fencelock/src/redis/ops.rs \
  's/exists: exists == 1,/exists: true,/' \
  "-p fencelock --test amnesia a_node_restarted_without_its_counter_never_yields_a_smaller_token" \
  "-p fencelock-sim --test sim a_node_without_its_counter_is_not_a_trusted_read_seeds_0_to_99"
mutant guard-epoch-on-quorum "a new epoch starts when a quorum (not every node) granted without a counter" \
  crates/fencelock/src/pure/fencing.rs \
  's/granting >= nodes && nodes > 0/granting > nodes \/ 2 && nodes > 0/' \
  "-p fencelock --lib fencing::tests::an_epoch_starts_only_when_every_node_granted" \
  "-p fencelock --test amnesia no_epoch_starts_while_a_node_with_the_counter_does_not_grant"
mutant writeback-seed-without-wait "issue 27 item 3: a node without its counter takes a seed at once, not a seed wait after it was first found so" \
  crates/fencelock/src/redis/lua/write_back.lua \
  's/\n  if not since then\n    redis\.call\(\x27set\x27, \x27fencelock:lost\x27, now\)\n    return 2\n  end\n  local held = [^\n]*\n  if now - held - tonumber\(since\) < tonumber\(ARGV\[3\]\) then return 2 end\n/\n  -- mutant: no seed wait\n/' \
  "-p fencelock --test counter a_seed_from_another_resource_never_makes_a_node_trusted_below_its_lost_record" \
  "-p fencelock --test counter a_restarted_node_is_seeded_only_after_the_seed_wait" \
  "-p fencelock-sim --test sim a_restarted_node_is_not_seeded_below_a_token_it_lost_seeds_0_to_99"
mutant guard-seed-without-wait "issue 27 item 3: the client seeds without asking for the seed wait (as an epoch start's write-back)" \
  crates/fencelock/src/redis/guard.rs \
  's/WriteBack::Seed\(Seed \{ wait \}\)/WriteBack::Epoch/' \
  "-p fencelock --test counter a_restarted_node_is_seeded_only_after_the_seed_wait" \
  "-p fencelock-sim --test sim a_restarted_node_is_not_seeded_below_a_token_it_lost_seeds_0_to_99"
mutant writeback-creates-lost-counter "issue 27: a plain write-back creates the counter of a node that lost it since its trusted read (evicted, or an operator's DEL), below a token it recorded" \
  crates/fencelock/src/redis/lua/write_back.lua \
  's/if exists == 0 and ARGV\[3\] ~= \x27epoch\x27 then/if exists == 0 and ARGV[3] and ARGV[3] ~= \x27epoch\x27 then/' \
  "-p fencelock --test counter a_plain_write_back_never_creates_a_counter_a_node_lost" \
  "-p fencelock --test counter only_an_epoch_start_or_a_seed_creates_a_missing_counter" \
  "-p fencelock --test fencing_model the_model_fences_as_the_lua_does" \
  "-p fencelock-sim --test sim a_write_back_never_creates_a_counter_lost_since_its_read_seeds_0_to_99"
mutant guard-writeback-always-epoch "issue 27: the client sends every write-back as an epoch start's, which creates a missing counter" \
  crates/fencelock/src/redis/guard.rs \
  's/"derived",\n(\s*)WriteBack::Plain,/"derived",\n$1WriteBack::Epoch,/' \
  "-p fencelock --test counter a_write_back_that_meets_a_lost_counter_is_not_counted" \
  "-p fencelock-sim --test sim a_write_back_never_creates_a_counter_lost_since_its_read_seeds_0_to_99"
mutant reseed-creates-lost-counters "issue 27 item 6: reseed creates a counter on a node that lost its own while others have theirs" \
  crates/fencelock/src/redis/lua/reseed.lua \
  's/elseif ARGV\[2\] ~= \x271\x27 then/elseif false then/' \
  "-p fencelock --lib redis::reseed::tests::the_reseed_script_creates_a_counter_only_when_asked" \
  "-p fencelock-cli --test reseed reseed_creates_no_counter_on_a_node_that_lost_it" \
  "-p fencelock-sim --test sim a_node_without_its_counter_is_not_a_trusted_read_seeds_0_to_99"
mutant token-proposed-past-i64 "issue 27 item 7: the client proposes a token above i64::MAX" \
  crates/fencelock/src/pure/fencing.rs \
  's/if p > TOKEN_MAX \{/if false \&\& p > TOKEN_MAX {/' \
  "-p fencelock --lib fencing::tests::a_proposal_is_above_the_last_token_and_the_clock" \
  "-p fencelock --test counter tokens_stop_at_the_largest_the_fences_store" \
  "-p fencelock-sim --test sim tokens_end_at_i64_max_seeds_0_to_99"
mutant token-derived-past-i64 "issue 27 item 7: a token above i64::MAX is derived from a counter at i64::MAX" \
  crates/fencelock/src/pure/fencing.rs \
  's/if max >= TOKEN_MAX \{/if max == u64::MAX {/' \
  "-p fencelock --lib fencing::tests::derive_takes_the_largest_trusted_read_plus_one" \
  "-p fencelock --test counter tokens_stop_at_the_largest_the_fences_store" \
  "-p fencelock-sim --test sim tokens_end_at_i64_max_seeds_0_to_99"
mutant node-takes-past-i64 "issue 27 item 7: a node takes a proposal above i64::MAX" \
  crates/fencelock/src/redis/lua/fence.lua \
  's/ and not bigger\(arg, TOKEN_MAX\)//' \
  "-p fencelock --test counter no_node_takes_a_token_beyond_the_fences_range" \
  "-p fencelock-sim --test sim tokens_end_at_i64_max_seeds_0_to_99"
mutant fence-accept-equal "the one-round path: a node takes a proposal equal to its counter (the token the last holder got)" \
  crates/fencelock/src/redis/lua/fence.lua \
  's/if exists == 0 or not bigger\(p, best\) then/if exists == 0 or (p ~= best and not bigger(p, best)) then/' \
  "-p fencelock --lib redis::script_checks::a_proposal_is_taken_with_the_grant_only_above_an_existing_counter" \
  "-p fencelock --lib redis::script_checks::a_queued_grant_takes_a_proposal_by_the_same_rule" \
  "-p fencelock --test fencing_model the_model_fences_as_the_lua_does" \
  "-p fencelock-sim --test sim tokens_follow_the_counters_a_quorum_took_seeds_0_to_99"
mutant fence-accept-untrusted "the one-round path: a node without its counter (restarted, evicted) takes a proposal" \
  crates/fencelock/src/redis/lua/fence.lua \
  's/if exists == 0 or not bigger\(p, best\) then/if not bigger(p, best) then/' \
  "-p fencelock --lib redis::script_checks::a_proposal_is_taken_with_the_grant_only_above_an_existing_counter" \
  "-p fencelock --test fencing_model the_model_fences_as_the_lua_does" \
  "-p fencelock-sim --test sim tokens_follow_the_counters_a_quorum_took_seeds_0_to_99"
mutant one-round-below-quorum "the one-round path issues a proposal that one node (not a quorum) accepted" \
  crates/fencelock/src/pure/fencing.rs \
  's/accepted >= quorum\)\.then_some/accepted >= 1).then_some/' \
  "-p fencelock --lib fencing::tests::a_proposal_is_above_the_last_token_and_the_clock" \
  "-p fencelock-sim --test sim tokens_follow_the_counters_a_quorum_took_seeds_0_to_99"
mutant quorum-of-one "one node's grant counts as a quorum" \
  crates/fencelock/src/pure/quorum.rs \
  's/pub fn quorum\(n: usize\) -> usize \{\n    n \/ 2 \+ 1\n/pub fn quorum(_n: usize) -> usize {\n    1\n/' \
  "-p fencelock-cli --test bench contended_sections_never_overlap_and_every_increment_counts" \
  "-p fencelock --test guarantees fenced_redlock_with_a_majority_down_fails_closed"

mutant quarantine-own-ttl "restart quarantine sized by the asking client's own TTL, not the longest TTL in use (issue 13's finding 2)" \
  crates/fencelock/src/redis/round.rs \
  's/info\.resolve\(longest\.max\(nodes\[i\]\.quarantine\(\)\.own_ttl\)\)/info.resolve(nodes[i].quarantine().own_ttl)/' \
  "-p fencelock-harness --test harness clients_with_different_ttls_never_hold_at_once_across_restarts_without_persistence"
mutant run-no-subreaper "fencelock run's guard and supervisor are not child subreapers: a background job of the command escapes them" \
  crates/fencelock-cli/src/run/guard.rs \
  's/unsafe \{ libc::prctl\(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0\) \};/\/\/ mutant: not a subreaper/' \
  "-p fencelock-harness --test harness run_never_lets_two_holders_processes_run_at_once"
mutant run-guard-spares-orphans "when the supervisor dies, fencelock run's guard waits for the command's processes instead of killing them" \
  crates/fencelock-cli/src/run/guard.rs \
  's/(The supervisor is gone, and with it the lock\x27s keeper: nothing may run on\.\n)(\s*)kill_tree\(me, libc::SIGKILL, true\);/$1$2\/\/ mutant: nothing killed/' \
  "-p fencelock-harness --test harness run_never_lets_two_holders_processes_run_at_once"
mutant run-watchdog-never-fires "the guard of fencelock run never kills at the deadline by its own clock: a stopped supervisor lets the command outlive the lock" \
  crates/fencelock-cli/src/run/watchdog.rs \
  's/Some\(at\) if !self\.fired && now_ns >= at => \{/Some(at) if false \&\& !self.fired \&\& now_ns >= at => {/' \
  "-p fencelock-cli --test run_tree a_stopped_supervisor_does_not_let_the_command_outlive_its_validity"
mutant run-watchdog-not-moved "the supervisor never moves the guard's kill time after an extension: the command is killed at the first deadline" \
  crates/fencelock-cli/src/run.rs \
  's/guard\.kill_at\(self\.kill_at\);/\/\/ mutant: not moved/' \
  "-p fencelock-cli --test run_tree a_background_job_keeps_the_lock_until_it_exits"
mutant nodeset-no-check "a client accepts a node that records another node set: clients of overlapping lists both hold a lock" \
  crates/fencelock/src/pure/nodeset.rs \
  's/if let Some\(why\) = mismatch\(&mut aliases, own, record\) \{/if let Some(why) = mismatch(\&mut aliases, own, record).filter(|_| false) {/' \
  "-p fencelock --test node_set clients_given_overlapping_node_lists_do_not_both_hold_a_lock"
mutant nodeset-no-wait "a client's first connections do not wait for each other: its own nodes count before a shared node shows the other set" \
  crates/fencelock/src/redis/nodeset.rs \
  's/tokio::time::timeout\(self\.wait, /tokio::time::timeout(Duration::ZERO, /' \
  "-p fencelock --test node_set a_client_counts_no_node_before_the_slow_shared_ones_answer" \
  "-p fencelock-sim --test sim a_new_client_waits_for_the_shared_nodes_of_an_overlapping_list_seeds_0_to_99"

mutant bench-counter-alone "the bench's sections run after the release and overlaps are not counted: only the counter can tell" \
  crates/fencelock-cli/src/bench.rs \
  's/if self\.inside\.fetch_add\(1, Ordering::AcqRel\) > 0 \{\n\s*self\.overlaps\.fetch_add\(1, Ordering::AcqRel\);\n\s*\}/let _ = self.inside.fetch_add(1, Ordering::AcqRel);/; s/(if !shared\.section\(number, &mut counter, &counter_key\)\.await \{\n\s*errors \+= 1;\n\s*\}\n\s*mine \+= 1;\n)(\s*)(if !contender\.give\(&key, held\)\.await \{\n\s*errors \+= 1;\n\s*\}\n)/$2$3$2$1/' \
  "-p fencelock-cli --test bench contended_sections_never_overlap_and_every_increment_counts"

mutant permit-line-ignored "a slot's grant ignores the semaphore's waiting line (a freed permit goes to whoever asks first)" \
  crates/fencelock/src/redis/lua/acquire_permit.lua \
  's/^if live_ahead\(/if false and live_ahead(/m' \
  "-p fencelock --test semaphore waiters_are_admitted_in_the_order_they_came_and_a_try_does_not_pass_them" \
  "-p fencelock --test semaphore_model the_model_admits_as_the_lua_does" \
  "-p fencelock-sim --test sim the_waiting_lines_keep_their_order_seeds_0_to_99"
mutant etcd-admits-one-too-many "etcd's semaphore admits a waiter with N waiters ahead of it" \
  crates/fencelock/src/etcd/semaphore.rs \
  's/if ahead >= k\.slots\.len\(\) as i64 \{/if ahead > k.slots.len() as i64 {/' \
  "-p fencelock --test etcd_family waiters_are_admitted_in_the_order_they_came"
mutant etcd-leader-unproclaimed "an etcd observer reports the oldest candidate before it wrote its value (before it leads)" \
  crates/fencelock/src/etcd/election.rs \
  's/proclaimed: kv\.mod_revision\(\) > rev,/proclaimed: true,/' \
  "-p fencelock --test etcd_family a_dead_leaders_successor_takes_over_after_the_ttl_with_a_larger_term"
mutant etcd-no-member-rotation "a failed etcd request leaves the cluster on the same member" \
  crates/fencelock/src/etcd/members.rs \
  's/let next = \(index \+ 1\) % n;/let next = index;/' \
  "-p fencelock --test etcd a_killed_follower_leaves_the_lock_available"
mutant etcd-watch-no-progress "an etcd watch never asks a silent member for its progress" \
  crates/fencelock/src/etcd/mod.rs \
  's/_ = check\.tick\(\) => None,/() = std::future::pending::<()>() => { let _ = check.tick(); None }/' \
  "-p fencelock --test etcd a_waiter_whose_member_stops_is_served_through_another"
mutant harness-permits-plus-one "the harness's semaphore clients take N + 1 permits: the at-most-N rule must see it" \
  crates/fencelock-harness/src/family.rs \
  's/client\.semaphore\(RESOURCE, n\)/client.semaphore(RESOURCE, n + 1)/' \
  "-p fencelock-harness --test harness redis_semaphores_keep_n_holders_and_elections_one_leader_per_term"
mutant rw-read-ignores-writer "a node grants a read lock while a writer holds the key" \
  crates/fencelock/src/redis/lua/read_acquire.lua \
  's/if held and held ~= \x27fencelock:readers\x27 then return \{0, record\} end/if false then return {0, record} end/' \
  "-p fencelock --test rwlock readers_share_and_the_mutex_is_the_write_side" \
  "-p fencelock --test rwlock_model the_model_locks_as_the_lua_does" \
  "-p fencelock-harness --test harness rwlock_mode_keeps_writers_alone_and_the_fenced_record_safe"
mutant rw-writer-not-ahead "readers ignore the writers waiting in line: a stream of readers starves a writer" \
  crates/fencelock/src/redis/lua/readers.lua \
  's/elseif not string\.find\(id, \x27\^\[\^\.\]\*%\.r\x27\) then/elseif false then/' \
  "-p fencelock --test rwlock a_writer_behind_a_stream_of_readers_gets_in" \
  "-p fencelock-sim --test sim the_waiting_lines_keep_their_order_seeds_0_to_99"
mutant rw-marker-short "the readers' marker expires a second before the longest reader's entry" \
  crates/fencelock/src/redis/lua/readers.lua \
  's/local left = tonumber\(top\[2\]\) - now/local left = tonumber(top[2]) - now - 1000/' \
  "-p fencelock --test rwlock_model the_model_locks_as_the_lua_does" \
  "-p fencelock-sim --test sim a_reader_held_to_its_last_millisecond_keeps_writers_out_seeds_0_to_99"
mutant rw-no-record "a write lock is granted without recording its token for readers" \
  crates/fencelock/src/rwlock.rs \
  's/let Some\(token\) = lock\.fencing_token\(\)\.map\(\|t\| t\.value\(\)\) else \{/let Some(token) = lock.fencing_token().map(|t| t.value()).filter(|_| false) else {/' \
  "-p fencelock --test rwlock readers_learn_the_last_writers_token" \
  "-p fencelock-sim --test sim the_claimed_faults_are_safe_seeds_first_quarter"

mutant ahead-never-announced "a plain lock on several nodes is a bare SET NX PX with no TTL announced ahead" \
  crates/fencelock/src/redis/ops.rs \
  's/let ahead = \(plain_set && announces\)/let ahead = (false \&\& plain_set \&\& announces)/' \
  "-p fencelock --test quarantine a_restarted_node_waits_for_the_longest_ttl_any_client_uses" \
  "-p fencelock --test quarantine plain_grants_announce_their_ttl_ahead_once_per_window_on_each_node"
mutant ahead-kept-across-connections "the announcement sent ahead is kept per process, not per connection" \
  crates/fencelock/src/redis/conn.rs \
  's/self\.ahead\.lock\(\)/MUTANT_AHEAD.lock()/g; s/\z/\nstatic MUTANT_AHEAD: Mutex<Vec<(Duration, Ahead)>> = Mutex::new(Vec::new());\n/' \
  "-p fencelock --test quarantine a_node_restarted_empty_is_announced_to_again_before_its_next_plain_grant"
mutant ttls-set-expires-with-the-writer "announce expires the whole set at the writer's own deadline, cutting a longer TTL's entry (issue 27, item 1)" \
  crates/fencelock/src/redis/lua/announce.lua \
  's/redis\.call\(\x27pexpireat\x27, k, latest\)/redis.call(\x27pexpireat\x27, k, untl)/' \
  "-p fencelock --test quarantine a_short_ttl_never_shortens_the_record_of_a_longer_one" \
  "-p fencelock --test fencing_model the_model_announces_as_the_lua_does" \
  "-p fencelock-sim --test sim a_short_ttl_beside_a_long_one_keeps_the_record_seeds_0_to_99"
mutant extension-unannounced "an extension does not announce its TTL in its script (as the batch's extensions did, behind an announcement at the head of the pipeline; issue 27, item 2)" \
  crates/fencelock/src/redis/lua/extend.lua \
  's/^announce\(ARGV\[2\]\)$/-- mutant: not announced/m' \
  "-p fencelock --test quarantine a_batched_extension_is_covered_by_its_own_announcement" \
  "-p fencelock-sim --test sim a_held_extension_stays_covered_by_the_record_seeds_0_to_99"
mutant flush-aged-by-uptime "a node without its marker is judged as old as its uptime (a FLUSHALL counted at once; issue 27, item 4)" \
  crates/fencelock/src/redis/quarantine.rs \
  's/let Some\(value\) = report\.marker else \{\n(\s*)return seen_now\(/let Some(value) = report.marker else {\n$1return suspect(/' \
  "-p fencelock --test quarantine a_flush_on_a_majority_while_a_lock_is_held_starts_the_quarantine" \
  "-p fencelock --lib redis::quarantine::tests::a_loss_without_a_restart_is_counted_from_when_it_is_seen" \
  "-p fencelock-sim --test sim a_flush_of_a_majority_starts_the_quarantine_seeds_0_to_99"
mutant grant-marker-unchecked "a grant counts whatever the node's marker reads right behind it (an open connection never sees a flush; issue 27, item 4)" \
  crates/fencelock/src/redis/round.rs \
  's/Ok\(found\) if handle\.info\.marker_holds\(found\.as_deref\(\)\) => \{\}/Ok(found) if true || handle.info.marker_holds(found.as_deref()) => {}/' \
  "-p fencelock --test quarantine a_flush_on_a_majority_while_a_lock_is_held_starts_the_quarantine" \
  "-p fencelock-sim --test sim a_flush_of_a_majority_starts_the_quarantine_seeds_0_to_99"
mutant etcd-carried-lease-reuses-the-key "a lease carried over to the next lock writes the old lock's key again" \
  crates/fencelock/src/etcd/mod.rs \
  's/Some\(n\) => keys::carried_key\(p, lease, n\),/Some(_) => side.key(p, lease),/' \
  "-p fencelock --test etcd a_released_lease_carries_the_next_lock_and_a_stale_token_touches_neither"
mutant etcd-carried-extension-trusts-the-lease "an extension of a carried lease does not check that the lock's key is still there" \
  crates/fencelock/src/etcd/mod.rs \
  's/let keyed = matches!\(held\.ending, Ending::DeleteKey \{ \.\. \}\);/let keyed = false \&\& matches!(held.ending, Ending::DeleteKey { .. });/' \
  "-p fencelock --test etcd a_released_lease_carries_the_next_lock_and_a_stale_token_touches_neither"
mutant etcd-token-renews-before-looking "an extension by token renews the lease before it looks for the token's key" \
  crates/fencelock/src/etcd/mod.rs \
  's/if by_token && !self\.key_still_ours\(held, budget\)\.await\?/if false \&\& by_token \&\& !self.key_still_ours(held, budget).await?/' \
  "-p fencelock --test etcd a_released_lease_carries_the_next_lock_and_a_stale_token_touches_neither"
mutant etcd-token-revokes-without-looking "a release by a token without a use number revokes its lease without looking for its key" \
  crates/fencelock/src/etcd/mod.rs \
  's/if look && !self\.key_still_ours\(held, limit\)\.await\?/if false \&\& look \&\& !self.key_still_ours(held, limit).await?/' \
  "-p fencelock --test etcd a_released_lease_carries_the_next_lock_and_a_stale_token_touches_neither"
mutant etcd-gone-spare-not-replaced "a spare lease found gone fails the acquisition instead of a new grant" \
  crates/fencelock/src/etcd/mod.rs \
  's/Err\(fail\) if fail\.lease_gone => \{\n(\s*)tracing::debug!\(\n(\s*)lease = spare\.lease/Err(fail) if false \&\& fail.lease_gone => {\n$1tracing::debug!(\n$2lease = spare.lease/' \
  "-p fencelock --test etcd a_spare_lease_revoked_from_outside_is_replaced_by_a_new_grant"
mutant etcd-key-check-serializable "the look at a lock's key (a release or extension by token, a carried lease's extension) is a transaction of comparisons alone, which etcd answers from a member's own possibly stale state: a lagging member says a held lock is not held" \
  crates/fencelock/src/etcd/mod.rs \
  's/let txn = Txn::new\(\)\.when\(\[key_is_ours\(held\)\]\)\.and_then\(\[TxnOp::get\(\n\s*held\.key\.clone\(\),\n\s*Some\(GetOptions::new\(\)\.with_count_only\(\)\),\n\s*\)\]\);/let txn = Txn::new().when([key_is_ours(held)]); let _ = GetOptions::new;/' \
  "-p fencelock --test etcd checks_of_a_lock_key_on_a_lagging_member_read_the_present"
mutant etcd-retried-release-trusts-gone "a release whose first try got no answer reports the lock released when the next try finds it gone (issue 35 item 1)" \
  crates/fencelock/src/etcd/mod.rs \
  's/Ok\(false\) if unanswered => \{/Ok(false) if unanswered => {\n                    if unanswered { self.note_release(); return Ok(()); }/' \
  "-p fencelock --test etcd a_release_that_retried_does_not_report_a_lock_deleted_by_its_token_released" \
  "-p fencelock --test etcd a_set_release_that_retried_does_not_report_a_lease_revoked_by_its_token_released"
mutant etcd-permit-take-unread "a look at the semaphore's line ignores the mark a take of ours left (issue 35 item 2)" \
  crates/fencelock/src/etcd/semaphore.rs \
  's/if modified != entry\.revision \{/if false \&\& modified != entry.revision {/' \
  "-p fencelock --test etcd_family a_waiter_finds_the_slot_a_take_without_an_answer_gave_it"
mutant election-log-trim-by-rank "the election log's append trims by rank (score, then member text), not by the terms' exact value (issue 27 item 8)" \
  crates/fencelock/src/redis/lua/election_append.lua \
  's/for i = 1, extra do redis\.call\(\x27zrem\x27, KEYS\[2\], low\[i\]\) end/redis.call(\x27zremrangebyrank\x27, KEYS[2], 0, extra - 1)/' \
  "-p fencelock --lib redis::script_checks::the_election_log_keeps_its_newest_terms_exactly_above_2_pow_53" \
  "-p fencelock-sim --test sim an_observer_sees_the_last_leader_when_terms_cross_10_pow_18_seeds_0_to_99"
mutant election-failed-campaign-not-withdrawn "a campaign that fails after its append leaves its log entry for observers to report (issue 35 item 4)" \
  crates/fencelock/src/election.rs \
  's/self\.log\.withdraw\(term, value\)\.await;/let _ = (term, value);/' \
  "-p fencelock --lib election::tests::a_campaign_whose_append_reached_a_minority_is_not_reported"
mutant observer-counts-untrusted "an election observer counts every node that answers, a node restarted empty too, as before issue 35 item 3" \
  crates/fencelock/src/redis/election.rs \
  's/\.filter\(\|\(_, admitted\)\| admitted\.is_some\(\)\)/.filter(|_| true)/' \
  "-p fencelock --lib election::tests::an_observer_does_not_skip_a_leader_whose_entries_a_restart_lost" \
  "-p fencelock-sim --test sim an_election_log_and_its_observer_come_through_a_node_restart_seeds_0_to_99"
mutant election-log-no-reconnect "an election log's kept connection, broken by a node's restart, fails the next append instead of being replaced" \
  crates/fencelock/src/redis/election.rs \
  's/Err\(e\) if kept && super::conn::is_broken\(&e\) => \{/Err(e) if false \&\& kept \&\& super::conn::is_broken(\&e) => {/' \
  "-p fencelock --lib election::tests::a_campaign_after_a_node_restart_appends_on_a_new_connection" \
  "-p fencelock-sim --test sim an_election_log_and_its_observer_come_through_a_node_restart_seeds_0_to_99"
mutant etcd-aged-spare-not-renewed "the lease of a lock released past a tenth of its TTL is kept for the next lock without a renewal, as if renewed" \
  crates/fencelock/src/etcd/mod.rs \
  's/match self\.keep_alive\(held\.lease, left\)\.await \{/match { let _ = left; Ok::<Instant, Fail>(Instant::now()) } {/' \
  "-p fencelock --test etcd a_lock_in_a_run_released_after_a_tenth_of_its_ttl_renews_its_lease_for_the_next"
mutant etcd-spare-counted-from-its-take "a lock on a spare lease counts its validity from when it takes the spare, not from the lease's last grant or renewal" \
  crates/fencelock/src/etcd/mod.rs \
  's/Some\(spare\) => \(spare\.lease, spare\.ttl, spare\.renewed, Some\(spare\.next_use\)\)/Some(spare) => (spare.lease, spare.ttl, Instant::now(), Some(spare.next_use))/' \
  "-p fencelock --test etcd a_lock_in_a_run_released_after_a_tenth_of_its_ttl_renews_its_lease_for_the_next"
mutant etcd-lone-aged-lock-carries "a lone lock (no release of its client just before) released past a tenth of its TTL renews its lease for a next lock instead of revoking it" \
  crates/fencelock/src/etcd/mod.rs \
  's/in_a_run: self\.in_a_run\(started, entry\.ttl\),/in_a_run: true,/' \
  "-p fencelock --test etcd a_lone_lock_released_after_a_tenth_of_its_ttl_revokes_its_lease_and_the_next_grants_one"
mutant etcd-run-never-seen "no lock counts as one of a run: a lock released past a tenth of its TTL always revokes its lease" \
  crates/fencelock/src/etcd/mod.rs \
  's/in_a_run: self\.in_a_run\(started, entry\.ttl\),/in_a_run: false,/' \
  "-p fencelock --test etcd a_lock_in_a_run_released_after_a_tenth_of_its_ttl_renews_its_lease_for_the_next"

mutant citation-unfenced "docs/guarantees.md: the fenced row's minority cell cites a test whose clients never turn fencing on (issue 36)" \
  docs/guarantees.md \
  's/\| T-minority-fenced, H-fenced; M-guard \|/| T-minority, H-fenced; M-guard |/' \
  "-p fencelock --test guarantees every_cell_cites_tests_that_make_its_fault_in_its_mode"
mutant fence-admits-stale "the fence admits a token below the row's (a stale holder's write lands)" \
  crates/fencelock/src/fence/logic.rs \
  's/    verdict\?;\n/    let _ = verdict;\n/' \
  "-p fencelock --test guarantees etcd_a_paused_holder_process_is_refused_by_the_fence"
mutant reentry-unchecked "a task asking again for a lock it holds is not refused: it waits on itself" \
  crates/fencelock/src/reentry.rs \
  's/\.is_some_and\(\|v\| v\.iter\(\)\.any\(\|\(h, _\)\| \*h == me\)\)/.is_some_and(|v| v.iter().any(|(h, _)| *h == me) \&\& false)/' \
  "-p fencelock --test reentrancy the_same_task_is_refused_at_once_and_other_tasks_wait" \
  "-p fencelock --test guarantees etcd_the_same_task_is_refused_at_once_and_other_tasks_wait"

mutant run-signal-ignored-while-waiting "fencelock run does not watch its signals while it waits for the lock: SIGTERM waits behind the holder (issue 29 item 1)" \
  crates/fencelock-cli/src/run.rs \
  's/sig = signals\.recv\(\) => return/sig = signals.recv(), if false => return/' \
  "-p fencelock-cli --test run_ops a_signal_while_waiting_ends_the_wait_at_once_and_runs_nothing"
mutant line-leave-not-awaited "a waiter that gives up leaves the line in a task close does not wait for: a process that exits leaves its place behind (issue 29 item 1)" \
  crates/fencelock/src/redis/line.rs \
  's/let counted = super::round::Background::count\(&self\.background\);/let counted = ();/' \
  "-p fencelock-cli --test run_ops a_signal_while_waiting_ends_the_wait_at_once_and_runs_nothing" \
  "-p fencelock-sim --test sim calls_cut_short_and_waiters_that_leave_leave_nothing_behind_seeds_0_to_99"
mutant handover-first-in-line-waits "the first attempt in line, granted on the nodes a release reached and refused on the others, serves the whole retry delay while the lock stands free behind it (contended's 100-200 ms stalls, issue 33)" \
  crates/fencelock/src/redis/line.rs \
  's/Some\(_\) if \(wake\.is_some\(\) \|\| first_in_line\) && quick/Some(_) if wake.is_some() \&\& quick/' \
  "-p fencelock-sim --test sim the_waiting_lines_keep_their_order_seeds_0_to_99"
mutant extend-batch-no-reload "a batched extension that meets NOSCRIPT does not load its scripts: a SCRIPT FLUSH loses every held lock (issue 29 item 3)" \
  crates/fencelock/src/redis/ops.rs \
  's/Err\(e\) if is_noscript\(&e\) =>/Err(e) if false \&\& is_noscript(\&e) =>/' \
  "-p fencelock --test long_work a_script_flush_on_every_node_does_not_stop_the_batched_extensions" \
  "-p fencelock-cli --test run_ops a_script_flush_while_run_holds_does_not_lose_the_lock" \
  "-p fencelock-sim --test sim hundreds_of_auto_extended_locks_stay_held_seeds_0_to_99"
mutant writer-record-no-ttl "the writer record is kept without a TTL: a key per resource name, forever (issue 29 item 4)" \
  crates/fencelock/src/redis/lua/write_record.lua \
  's/redis\.call\(\x27set\x27, KEYS\[2\], c, \x27PX\x27, ARGV\[3\]\)/redis.call(\x27set\x27, KEYS[2], c)/' \
  "-p fencelock-cli --test run_ops fencing_runs_on_many_names_leave_no_key_per_name" \
  "-p fencelock --test rwlock_model the_model_locks_as_the_lua_does" \
  "-p fencelock-sim --test sim records_expire_and_readers_still_learn_the_last_writer_seeds_0_to_99"
mutant rw-record-no-fallback "a reader whose resource's writer record expired reads 0, not the node's largest record (issue 29 item 4)" \
  crates/fencelock/src/redis/lua/read_acquire.lua \
  's/ or redis\.call\(\x27get\x27, KEYS\[7\]\)//' \
  "-p fencelock --test rwlock_model the_model_locks_as_the_lua_does" \
  "-p fencelock-sim --test sim records_expire_and_readers_still_learn_the_last_writer_seeds_0_to_99"

mutant nodb-as-unavailable "a database the node lacks (redis://host/99) is an unnamed failure again: retried as unavailable, exit 69 (issue 29 item 6)" \
  crates/fencelock/src/redis/describe.rs \
  's/"ERR" if detail\.as_deref\(\)\.is_some_and\(\|d\| d\.contains\("DB index"\)\)/"ERR" if false/' \
  "-p fencelock --test node_errors a_database_the_node_lacks_is_a_configuration_error_not_retried" \
  "-p fencelock-cli --test errors a_database_the_node_lacks_is_a_configuration_error_at_once" \
  "-p fencelock-sim --test sim a_refusal_says_whether_the_lock_is_held_or_the_nodes_are_down_seeds_0_to_99"
mutant client-cert-as-node-failure "a client certificate refused by the client's own TLS library is an unnamed node failure again (issue 29 item 6)" \
  crates/fencelock/src/redis/describe.rs \
  's/if e\.kind\(\) == ErrorKind::InvalidClientConfig \{/if false \&\& e.kind() == ErrorKind::InvalidClientConfig {/' \
  "-p fencelock --test tls a_client_certificate_its_own_tls_library_refuses_is_named_as_the_clients"
mutant plaintext-unprobed "rediss:// to a plain-text node is never asked in plain text: it reads as a hung node (issue 29 item 6)" \
  crates/fencelock/src/redis/conn.rs \
  's/Ok\(Ok\(_\)\) => true,/Ok(Ok(_)) => false,/; s/Ok\(Err\(reply\)\) => reply\.code\(\)\.is_some\(\),/Ok(Err(_)) => false,/' \
  "-p fencelock --test tls rediss_to_a_plaintext_node_says_so"
mutant refusal-warns-check-it-runs "the node-down warning says 'check that the node runs' for a node that answered with a refusal (issue 29 item 6)" \
  crates/fencelock/src/telemetry.rs \
  's/Some\(e\.hint\(\)\)/None/' \
  "-p fencelock-cli --test errors a_refusing_node_warns_with_its_cure_not_check_that_it_runs"
mutant doctor-no-write-probe "doctor reads a node but never checks that it takes a write: a node out of memory under noeviction passes (issue 29 item 5)" \
  crates/fencelock-cli/src/probe/redis/doctor.rs \
  's/    checks\.extend\(write_check\(f\)\);\n//' \
  "-p fencelock-cli --test errors doctor_fails_a_node_that_refuses_writes_and_warns_near_maxmemory"
mutant evicting-unwarned "acquire and run say nothing of a node whose eviction policy may drop lock keys (issue 29 item 5)" \
  crates/fencelock/src/redis/conn.rs \
  's/if policy\.is_empty\(\) \|\| policy == "noeviction" \{/if true {/' \
  "-p fencelock-cli --test errors acquire_and_run_warn_once_about_an_evicting_node" \
  "-p fencelock-sim --test sim a_node_that_evicts_a_held_key_gives_no_second_holder_and_is_warned_of_once_seeds_0_to_99"
mutant inspect-blind-says-not-held "inspect with no quorum of nodes reachable exits 0 (issue 29 item 7)" \
  crates/fencelock-cli/src/probe/redis.rs \
  's/Some\(message\) => Err\(Failure::new\(exit::UNAVAILABLE, message\)\.into\(\)\),/Some(_) => Ok(exit::OK),/' \
  "-p fencelock-cli --test inspect no_node_reachable_is_an_error_not_not_held"
mutant inspect-no-family "inspect reads no semaphore slot, reader or election log (issue 29 item 7)" \
  crates/fencelock-cli/src/probe/redis.rs \
  's/if let Err\(why\) = family\(&mut conn, resource, tag, &mut state\)\.await \{/if let Err(why) = Ok::<(), String>(()) {/' \
  "-p fencelock-cli --test inspect permits_readers_and_the_leader_are_shown"
mutant warm-up-waits-for-all "the CLI's warm-up waits for every node: one paused node adds the connect timeout to each command (issue 29 item 8)" \
  crates/fencelock-cli/src/settings.rs \
  's/    let mut votes = client\.connect_quorum\(\)\.await;/    let mut votes = client.connect().await;/' \
  "-p fencelock-cli --test consistency one_paused_node_does_not_cost_every_command_the_connect_timeout"
mutant empty-nodes-unnamed "FENCELOCK_NODES set but empty is not told as such (the check that keeps it from the dev set is skipped) (issue 29 item 8)" \
  crates/fencelock-cli/src/settings.rs \
  's/        if env\.trim\(\)\.is_empty\(\) \{/        if false {/' \
  "-p fencelock-cli --test consistency an_empty_fencelock_nodes_is_an_error_not_the_dev_set"
mutant metrics-dir-accepted "run --metrics-file DIR runs and leaves DIR.tmp (issue 29 item 8)" \
  crates/fencelock-cli/src/metrics.rs \
  's/        if path\.is_dir\(\) \{/        if false {/; s/        if written\.is_err\(\) \{/        if false {/' \
  "-p fencelock-cli --test consistency a_metrics_file_that_is_a_directory_is_refused_and_leaves_nothing"
mutant locks-held-never-falls "the gauge of locks held rises at each grant and never falls (issue 29 item 8)" \
  crates/fencelock/src/lock.rs \
  's/crate::telemetry::held\(&self\.client\.telemetry\(\)\.label\(&self\.keys\[0\]\), -1\.0\);//' \
  "-p fencelock --test metrics locks_held_rise_with_each_grant_and_fall_with_each_release_or_drop"
mutant undo-disarmed-early "an acquisition's drop guard is disarmed as soon as it is armed: a call cut short leaves its keys for a TTL (issue 29 item 10)" \
  crates/fencelock/src/redis/undo.rs \
  's/armed: Some\(\(backend\.clone\(\), keys\.to_vec\(\), token\.into\(\), side\)\),/armed: Some((backend.clone(), keys.to_vec(), token.into(), side)).filter(|_| false),/' \
  "-p fencelock --test cancel acquisitions_cut_short_leave_no_key" \
  "-p fencelock --test cancel the_familys_calls_cut_short_leave_no_key" \
  "-p fencelock-sim --test sim calls_cut_short_and_waiters_that_leave_leave_nothing_behind_seeds_0_to_99"
mutant wait-woken-by-own-release "a waiter whose failed attempt set keys is woken by its own release and retries at once (issue 29 item 12)" \
  crates/fencelock/src/redis/line.rs \
  's/Some\(s\) if !sets_off_its_own_wake\(&err\) =>/Some(s) =>/' \
  "-p fencelock --test cancel a_wait_woken_by_its_own_release_still_follows_the_delays" \
  "-p fencelock-sim --test sim calls_cut_short_and_waiters_that_leave_leave_nothing_behind_seeds_0_to_99"

mutant flush-no-resend "the drop of a client's last handle on a current-thread runtime does not send the pending releases (issue 29 item 11)" \
  crates/fencelock/src/client.rs \
  's/Ok\(_\) => self\.resend\(bound\),/Ok(_) => {}/' \
  "-p fencelock --test first_hour a_lock_dropped_on_one_thread_is_released_without_close"

mutant campaign-cut-short-not-withdrawn "a campaign cut short during its announcement leaves its entry in the log of leaders (issue 29 item 10)" \
  crates/fencelock/src/election.rs \
  's/let Some\(lock\) = self\.lock\.take\(\) else \{/let Some(lock) = self.lock.take().filter(|_| false) else {/' \
  "-p fencelock --test cancel a_campaign_cut_short_leaves_no_entry_in_the_log"

mutant release-marked-before-sent "Lock::release marks the lock released before its round: a release cut short leaves the keys for a TTL (issue 29 item 10)" \
  crates/fencelock/src/lock.rs \
  's/(pub async fn release\(mut self\) -> Result<Votes> \{\n)/$1        self.released = true;\n/' \
  "-p fencelock --test cancel releases_cut_short_leave_no_key"

mutant extend-token-ttl-ignored "extend without --ttl ignores the TTL acquire's token carries and sets the default: a lock taken with --ttl 30s is cut to 10 s (issue 29 item 8)" \
  crates/fencelock-cli/src/lockcmds/extend.rs \
  's/settings\.ttl = ttl;/let _ = ttl;/' \
  "-p fencelock-cli --test consistency extend_without_ttl_keeps_the_ttl_the_lock_was_taken_with"

mutant help-lists-refused-flags "up and inspect --help (and their man pages) list the global flags they refuse (issue 29 item 8)" \
  crates/fencelock-cli/src/cli.rs \
  's/\.arg\(arg\.clone\(\)\.hide\(true\)\)/.arg(arg.clone().hide(false))/' \
  "-p fencelock-cli --test consistency up_and_inspect_help_list_only_the_flags_they_take"

mutant etcd-close-skips-revokes "etcd: close() does not wait for the lease revokes of calls cut short (issue 29)" \
  crates/fencelock/src/backend.rs \
  's/Backend::Etcd\(e\) => e\.settle_releases\(bound\)\.await,/Backend::Etcd(_) => true,/' \
  "-p fencelock --test cancel etcd_close_waits_for_the_revokes_of_calls_cut_short"

mutant etcd-inspect-no-family "inspect on etcd reads the resource's line only: a semaphore's permits, a read-write lock's readers and an election's leader go unseen (issue 29 item 7)" \
  crates/fencelock-cli/src/probe/etcd.rs \
  's/let family = read_family\(&mut client, resource, &line\)\.await\?;/let family = Family::default();/' \
  "-p fencelock-cli --test inspect on_etcd_permits_readers_the_writer_and_the_leader_are_shown"

mutant pg-acquire-ignores-expiry "postgres: the acquisition overwrites a live row (its check of live rows and its WHERE on the expiry gone): two holders (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/WHERE l\.resource = ANY\(p_resources\) AND l\.expires_at > t\n/WHERE false\n/; s/WHERE l\.expires_at <= clock_timestamp\(\);/WHERE true;/' \
  "-p fencelock --test postgres_lock a_second_client_is_refused_while_the_first_holds_then_gets_it" \
  "-p fencelock --test postgres_lock clients_racing_for_one_resource_never_hold_it_together"
mutant pg-release-ignores-owner "postgres: the release deletes the row whoever owns it (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/WHERE l\.resource = ANY\(p_resources\) AND l\.owner = p_owner\n/WHERE l.resource = ANY(p_resources) AND (l.owner = p_owner OR true)\n/' \
  "-p fencelock --test postgres_lock a_release_or_extension_by_the_wrong_owner_does_nothing"
mutant pg-token-not-from-the-sequence "postgres: the token is a constant, not the sequence's next value (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/nextval\(\x27fencelock_tokens\x27\)/1/' \
  "-p fencelock --test postgres_lock tokens_increase_across_holders_and_a_server_crash"
mutant pg-extend-revives-expired "postgres: an extension revives a row past its expiry (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/WHERE resource = ANY\(\$1\) AND owner = \$2 AND expires_at > clock_timestamp\(\)/WHERE resource = ANY(\$1) AND owner = \$2/' \
  "-p fencelock --test postgres_lock an_expired_lock_is_not_revived_and_is_taken_over_with_a_larger_token"
mutant pg-failure-counts-as-extension "postgres: an extension the database did not answer counts as done: the lost signal never fires (issue 32)" \
  crates/fencelock/src/pglock/mod.rs \
  's/Outcome::failed\(Attempt::Failed, outcome\.to_string\(\)\)/Outcome::extended(started + self.ttl)/' \
  "-p fencelock --test postgres_lock auto_extension_holds_the_lock_and_the_lost_signal_fires_when_the_server_stops"
mutant pg-no-request-timeout "postgres: a statement waits as long as the database keeps it (no client timeout, no statement_timeout) (issue 32)" \
  crates/fencelock/src/pglock/mod.rs \
  's/let limit = limit\.min\(self\.request_timeout\);/let limit = limit.max(Duration::from_secs(60));/; s/SET statement_timeout = \{ms\}/SET statement_timeout = 0/' \
  "-p fencelock --test postgres_lock a_statement_blocked_behind_a_row_lock_gives_up_within_the_request_timeout"
mutant pg-release-does-not-notify "postgres: a release wakes no waiter (no NOTIFY): waiters wake at their heartbeat only (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/live := live AND d\.live;\n(\s*)IF EXISTS/live := live AND d.live;\n$1IF false AND EXISTS/' \
  "-p fencelock --test postgres_lock waiters_are_granted_in_line_order_and_woken_by_the_release"
mutant pg-release-unserialized "postgres: the release of one resource looks for waiters without the resource's lock: a waiter that enters while the release commits is not woken (issue 32, protocol v2)" \
  crates/fencelock/src/pglock/sql.rs \
  's/(strpos\(p_resources\[1\], \x27:permit:\x27\) = 0 THEN\n\s*)PERFORM pg_advisory_xact_lock\(hashtextextended\(p_resources\[1\], 0\)\);/$1NULL;/' \
  "-p fencelock --test postgres_lock a_waiter_that_comes_while_a_release_commits_is_not_left_asleep"
mutant pg-v1-not-kept "postgres: the setup of version 2 no longer installs version 1's release: a running client of version 1 fails on every release (issue 32, protocol v2)" \
  crates/fencelock/src/pglock/sql.rs \
  's/CREATE OR REPLACE FUNCTION fencelock_release_v1\(/CREATE OR REPLACE FUNCTION fencelock_release_v1_gone(/' \
  "-p fencelock --test postgres_lock a_client_of_the_first_protocol_version_shares_the_database_with_this_one"
mutant pg-release-ignores-the-semaphores-line "postgres: the release of a semaphore's slot looks for places in the slot's line, not the semaphore's: its waiters wake at their heartbeat only (issue 32, protocol v2)" \
  crates/fencelock/src/pglock/sql.rs \
  's/WHERE w\.resource IN \(d\.resource, fencelock_permit_line_v2\(d\.resource\)\)\)/WHERE w.resource = d.resource)/' \
  "-p fencelock --test postgres_lock a_semaphore_of_three_grants_three_permits_never_four_and_wakes_its_waiters"
mutant pg-try-passes-the-line "postgres: a try ignores the waiters in line (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/\(p_seq IS NULL OR w\.seq < p_seq\)/(p_seq IS NOT NULL AND w.seq < p_seq)/' \
  "-p fencelock --test postgres_lock a_try_never_passes_a_waiter_and_a_place_that_expires_or_is_left_frees_the_line"
mutant pg-line-backwards "postgres: a waiter waits for the waiters behind it, not ahead: last in, first out (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/\(p_seq IS NULL OR w\.seq < p_seq\)/(p_seq IS NULL OR w.seq > p_seq)/' \
  "-p fencelock --test postgres_lock waiters_are_granted_in_line_order_and_woken_by_the_release"
mutant pg-cancelled-waiter-stays "postgres: a cancelled wait leaves its place in line until it expires (issue 32)" \
  crates/fencelock/src/pglock/mod.rs \
  's/let Some\(backend\) = self\.backend\.take\(\) else \{/let Some(backend) = self.backend.take().filter(|_| false) else {/' \
  "-p fencelock --test postgres_lock a_cancelled_waiter_leaves_the_line"
mutant pg-several-checks-the-first "postgres: a lock of several resources checks the first resource only (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/WHERE l\.resource = ANY\(p_resources\) AND l\.expires_at > t\n/WHERE l.resource = p_resources[1] AND l.expires_at > t\n/' \
  "-p fencelock --test postgres_lock a_lock_of_several_resources_is_all_or_nothing_with_one_token"
mutant pg-several-tokens "postgres: each resource of a lock of several gets a token of its own (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/SELECT DISTINCT r, p_owner, o_token,/SELECT DISTINCT r, p_owner, nextval(\x27fencelock_tokens\x27),/' \
  "-p fencelock --test postgres_lock a_lock_of_several_resources_is_all_or_nothing_with_one_token"
mutant pg-permit-counts-nothing "postgres: a permit is taken without counting the live permits (the first slot, held or not): N+1 holders (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/WHERE NOT EXISTS \(SELECT 1 FROM fencelock_locks l\n(\s*)WHERE l\.resource = s\.r AND l\.expires_at > t\)/WHERE true/; s/RAISE EXCEPTION \x27fencelock: a permit was taken while serialized\x27;/NULL;/' \
  "-p fencelock --test postgres_lock a_semaphore_of_three_grants_three_permits_never_four_and_wakes_its_waiters"
mutant pg-permit-try-passes-the-line "postgres: a try for a permit ignores the semaphore's waiters (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/WHERE w\.resource = p_line AND \(p_seq IS NULL OR w\.seq < p_seq\)/WHERE w.resource = p_line AND (p_seq IS NOT NULL AND w.seq < p_seq)/' \
  "-p fencelock --test postgres_lock a_semaphore_of_three_grants_three_permits_never_four_and_wakes_its_waiters"
mutant pg-reader-ignores-the-writer "postgres: a read lock is granted while a writer holds the resource (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/WHERE l\.resource = p_resource AND l\.expires_at > t\n/WHERE l.resource = p_resource AND false\n/' \
  "-p fencelock --test postgres_lock readers_share_a_writer_excludes_them_and_a_waiting_writer_goes_before_later_readers"
mutant pg-writer-ignores-readers "postgres: a write lock (the mutex) is granted while readers hold the resource (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/\n\s*SELECT r\.expires_at FROM fencelock_readers r\n\s*WHERE r\.resource = ANY\(p_resources\) AND r\.expires_at > t\n\s*UNION ALL//' \
  "-p fencelock --test postgres_lock readers_share_a_writer_excludes_them_and_a_waiting_writer_goes_before_later_readers"
mutant pg-observer-skips-leaders "postgres: an observer reads only the newest leader each time, skipping the terms between (issue 32)" \
  crates/fencelock/src/pglock/sql.rs \
  's/LIMIT CASE WHEN \$2::bigint IS NULL THEN 1 END/LIMIT 1/' \
  "-p fencelock --test postgres_lock an_election_has_one_leader_per_term_observers_see_each_in_order_and_a_lost_leader_is_signalled"
mutant zk-token-from-sequence "zookeeper: the token is the node's sequence number (which restarts with its directory), not its czxid (issue 32)" \
  crates/fencelock/src/zk/mod.rs \
  's/let token = u64::try_from\(stat\.czxid\)/let token = u64::try_from(sequence.into_i64() + 1)/' \
  "-p fencelock --test zookeeper a_second_client_is_refused_while_the_first_holds_then_gets_it"
mutant zk-watch-the-holder "zookeeper: every waiter watches the lowest node (the holder), not the one just before it: a release wakes the herd (issue 32)" \
  crates/fencelock/src/zk/line.rs \
  's/Rule::Exclusive => ahead\.max_by_key/Rule::Exclusive => ahead.min_by_key/' \
  "-p fencelock --lib zk::line::tests::the_lowest_sequence_holds_and_each_waiter_watches_the_one_just_before_it" \
  "-p fencelock --test zookeeper each_waiter_watches_only_the_node_just_before_it"
mutant zk-validity-outlasts-session "zookeeper: the validity deadline runs a session timeout past the session's (issue 32)" \
  crates/fencelock/src/zk/timing.rs \
  's/let valid = session\.checked_sub\(drift\)/let valid = (session * 2).checked_sub(drift)/' \
  "-p fencelock --lib zk::timing::tests::the_deadline_counts_from_the_send_time_less_the_drift" \
  "-p fencelock --test zookeeper a_stalled_holders_lost_signal_comes_before_the_next_grant" \
  "-p fencelock --test zookeeper a_holder_cut_off_from_the_server_is_told_before_the_next_grant"
mutant zk-failure-counts-as-extension "zookeeper: a check the ensemble did not answer counts as an extension: the lost signal never fires (issue 32)" \
  crates/fencelock/src/zk/mod.rs \
  's/Outcome::failed\(Attempt::Failed, fail\.outcome\(\)\.to_string\(\)\)/Outcome::extended(started + client.session_timeout())/' \
  "-p fencelock --test zookeeper the_server_killed_under_a_held_lock_fires_lost_by_the_deadline_and_a_restart_serves_again" \
  "-p fencelock --test zookeeper a_holder_cut_off_from_the_server_is_told_before_the_next_grant" \
  "-p fencelock --test zookeeper_family a_cut_off_holders_lost_signal_comes_before_the_next_grant_for_each_primitive"
mutant zk-cancelled-waiter-keeps-its-node "zookeeper: a waiter cut short leaves its node in line until its session ends (issue 32)" \
  crates/fencelock/src/zk/mod.rs \
  's/fn drop\(&mut self\) \{\n        if !self\.armed \{/fn drop(&mut self) {\n        if true || !self.armed {/' \
  "-p fencelock --test zookeeper a_waiter_that_gives_up_or_is_cancelled_leaves_no_node_behind" \
  "-p fencelock --test backends zookeeper_keeps_the_mutex_contract"
mutant zk-many-token-smallest "zookeeper: a lock of several resources takes the smallest czxid of its nodes as its token, not the largest (issue 32)" \
  crates/fencelock/src/zk/mod.rs \
  's/let token = grants\.iter\(\)\.map\(\|g\| g\.held\.token\)\.max\(\)\?;/let token = grants.iter().map(|g| g.held.token).min()?;/' \
  "-p fencelock --test zookeeper_family a_lock_of_several_resources_is_all_or_nothing_without_deadlock"
mutant zk-permit-count-unchecked "zookeeper: a semaphore's waiter does not check the permit count in use: clients with different counts admit more holders than the smaller one allows (issue 32)" \
  crates/fencelock/src/zk/semaphore.rs \
  's/if theirs\.parse::<usize>\(\)\.ok\(\) == Some\(n\) \{/if true {/' \
  "-p fencelock --test zookeeper_family a_semaphore_never_has_more_than_n_holders_and_admits_in_order"
mutant zk-permit-waiters-watch-the-first "zookeeper: every semaphore waiter behind the first one watches the oldest place in line (a holder's), not the waiter just before it: a release wakes the herd (issue 32)" \
  crates/fencelock/src/zk/line.rs \
  's/ahead\.into_iter\(\)\.max_by_key/ahead.into_iter().min_by_key/' \
  "-p fencelock --lib zk::line::tests::a_permit_is_admitted_with_fewer_than_n_ahead_and_only_the_first_waiter_watches_all" \
  "-p fencelock --test zookeeper_family semaphore_waiters_each_watch_one_node_not_the_herd"
mutant zk-reader-ignores-writers "zookeeper: a read lock does not wait for the writers ahead of it: a reader holds beside a writer (issue 32)" \
  crates/fencelock/src/zk/line.rs \
  's/\.filter\(\|\(_, c\)\| !is_reader\(c\)\)/.filter(|(_, c)| !is_reader(c) \&\& false)/' \
  "-p fencelock --lib zk::line::tests::readers_wait_only_for_writers_ahead_and_writers_for_everyone_ahead" \
  "-p fencelock --test zookeeper_family readers_share_writers_exclude_and_a_waiting_writer_goes_before_later_readers" \
  "-p fencelock --test backends the_family_keeps_its_contract_on_every_backend"
mutant zk-observer-term-from-announcement "zookeeper: an observer reports the announcement's zxid (mzxid) as the term, not the leader's node's czxid, which the leader fences with (issue 32)" \
  crates/fencelock/src/zk/election.rs \
  's/let term = u64::try_from\(stat\.czxid\)/let term = u64::try_from(stat.mzxid)/' \
  "-p fencelock --test zookeeper_family one_leader_at_a_time_with_growing_terms_and_observers_see_each_leader"
mutant zk-permit-validity-outlasts-session "zookeeper: a permit's validity deadline runs a session timeout past its place in line's: a holder whose session expired believes it holds its permit after the next holder was granted it (issue 32)" \
  crates/fencelock/src/zk/semaphore.rs \
  's/deadline: lease\.deadline,/deadline: lease.deadline + client.session_timeout(),/' \
  "-p fencelock --test zookeeper_faults the_family_keeps_its_guarantees_when_the_leader_dies_a_follower_stops_and_holders_stall"
mutant zk-reader-validity-outlasts-session "zookeeper: a read lock's validity deadline runs a session timeout past its grant's: a stalled reader whose session expired believes it reads after a writer was granted (issue 32)" \
  crates/fencelock/src/zk/mod.rs \
  's/grant\.last_writer = Some\(recorded\);/grant.last_writer = Some(recorded);\n                grant.deadline += self.ttl;/' \
  "-p fencelock --test zookeeper_faults the_family_keeps_its_guarantees_when_the_leader_dies_a_follower_stops_and_holders_stall"
mutant zk-observer-reports-again "zookeeper: an observer reports the leader it reported last again (term >= last): after the leader stalled past its session it announces the stalled leader, not the next (issue 32)" \
  crates/fencelock/src/zk/election.rs \
  's/if stat\.version > 0 && term > self\.last \{/if stat.version > 0 \&\& term >= self.last {/' \
  "-p fencelock --test zookeeper_faults the_family_keeps_its_guarantees_when_the_leader_dies_a_follower_stops_and_holders_stall"
mutant zk-many-keeps-the-first-on-give-up "zookeeper: a lock of several resources that gives up on a later resource keeps the earlier ones' nodes until its session ends: not all or nothing (issue 32)" \
  crates/fencelock/src/zk/mod.rs \
  's/if let Some\(t\) = taken \{\n(\s*)t\.release\(self\)\.await;/if let Some(t) = taken {\n$1std::mem::forget(t);/' \
  "-p fencelock --test zookeeper_faults the_family_keeps_its_guarantees_when_the_leader_dies_a_follower_stops_and_holders_stall"
mutant zk-failed-release-left-to-the-session "zookeeper: a release the ensemble did not answer leaves its nodes to the session, which the live client keeps open: the lock stays held until the client goes (issue 32)" \
  crates/fencelock/src/zk/mod.rs \
  's/                self\.release_in_background\(held\);\n//' \
  "-p fencelock --test zookeeper_faults the_family_keeps_its_guarantees_when_the_leader_dies_a_follower_stops_and_holders_stall"
mutant zk-digest-nodes-open-to-anyone "zookeeper: a client with a digest identity makes its nodes open to anyone (world:anyone), not to that identity only (issue 32)" \
  crates/fencelock/src/zk/mod.rs \
  's/        if self\.digest\.is_some\(\) \{\n            mode\.with_acls/        if false \&\& self.digest.is_some() {\n            mode.with_acls/' \
  "-p fencelock --test zookeeper digest_authentication_keeps_the_nodes_to_its_identity_and_refuses_others_clearly"
mutant sentinel-failover-not-a-loss "a Sentinel node whose primary changed is judged by the uptime of the promoted replica, not as a loss seen now: counted at once after a failover that lost a held lock (issue 31)" \
  crates/fencelock/src/redis/conn.rs \
  's/if marker\.and_then\(crate::pure::nodeset::identity\) == Some\(run_id\) \{/if true || marker.and_then(crate::pure::nodeset::identity) == Some(run_id) {/' \
  "-p fencelock --test sentinel a_failover_that_lost_a_held_lock_keeps_it_out_of_reach_and_tokens_in_order" \
  "-p fencelock --test sentinel redlock_over_three_sentinel_groups_counts_each_group_as_one_node" \
  "-p fencelock --test cluster a_killed_shard_primary_that_lost_a_held_lock_keeps_it_out_of_reach_and_tokens_in_order" \
  "-p fencelock-sim --test sim sentinel_failovers_keep_one_holder_and_token_order_seeds_0_to_99"
mutant sentinel-quarantine-own-ttl-only "after a failover the quarantine lasts the client's own TTL, not the longest TTL the node's replicated record holds (issue 31)" \
  crates/fencelock/src/redis/round.rs \
  's/if nodes\[i\]\.addr\(\)\.follows_primary\(\) \{/if false \&\& nodes[i].addr().follows_primary() {/' \
  "-p fencelock --test sentinel a_failover_that_lost_a_held_lock_keeps_it_out_of_reach_and_tokens_in_order" \
  "-p fencelock --test cluster a_killed_shard_primary_that_lost_a_held_lock_keeps_it_out_of_reach_and_tokens_in_order" \
  "-p fencelock-sim --test sim sentinel_failovers_keep_one_holder_and_token_order_seeds_0_to_99"
mutant sentinel-failover-keeps-counter "a failover is judged as a loss but the node counter is kept: a stale counter is trusted (issue 31)" \
  crates/fencelock/src/redis/lua/failover.lua \
  "s/^redis\.call\('del', KEYS\[2\]\)\n/-- mutant: the counter kept\n/m" \
  "-p fencelock --test sentinel a_failover_that_lost_a_counter_raise_never_yields_a_smaller_token_over_three_groups" \
  "-p fencelock-sim --test sim sentinel_failovers_keep_one_holder_and_token_order_seeds_0_to_99"
mutant sentinel-readonly-kept "a connection that meets READONLY (a primary demoted under it) is kept: every later request goes to the replica (issue 31)" \
  crates/fencelock/src/redis/conn.rs \
  's/\|\| e\.kind\(\) == redis::ErrorKind::Server\(redis::ServerErrorKind::ReadOnly\)/|| false \&\& e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)/' \
  "-p fencelock --test sentinel a_primary_demoted_under_a_kept_connection_is_dropped_and_never_written" \
  "-p fencelock-sim --test sim sentinel_failovers_keep_one_holder_and_token_order_seeds_0_to_99"
mutant sentinel-no-role-check "the node the Sentinels name is used without checking ROLE says master (issue 31)" \
  crates/fencelock/src/redis/sentinel.rs \
  's/    if first == "master" \{/    if true || first == "master" {/' \
  "-p fencelock --test sentinel a_primary_demoted_under_a_kept_connection_is_dropped_and_never_written" \
  "-p fencelock-sim --test sim sentinel_failovers_keep_one_holder_and_token_order_seeds_0_to_99"
mutant cluster-quarantine-off "a redis+cluster:// node has the restart quarantine off by default (as a plain single node): a failover that lost a held lock hands it to a second client at once (issue 31)" \
  crates/fencelock/src/config.rs \
  's/\["redis\+sentinel:\/\/", "redis\+cluster:\/\/"\]/["redis+sentinel:\/\/"]/' \
  "-p fencelock --test cluster a_killed_shard_primary_that_lost_a_held_lock_keeps_it_out_of_reach_and_tokens_in_order" \
  "-p fencelock-sim --test sim redis_cluster_failovers_and_slot_moves_keep_one_holder_and_their_locks_seeds_0_to_99"
mutant cluster-tag-dropped "a cluster node's keys are sent without the hash tag: they scatter over the shards (issue 31)" \
  crates/fencelock/src/redis/conn.rs \
  's/let tagging = addr\.hash_tag\(\)\.map\(\|tag\| Tagging::of\(&tag\)\);/let tagging = addr.hash_tag().and(None::<Arc<Tagging>>);/' \
  "-p fencelock --test cluster a_lock_and_a_fenced_lock_through_a_cluster_url" \
  "-p fencelock-sim --test sim redis_cluster_failovers_and_slot_moves_keep_one_holder_and_their_locks_seeds_0_to_99"
mutant cluster-moved-kept "a connection that meets MOVED (the tag's slot served elsewhere now) is kept: every later request is redirected (issue 31)" \
  crates/fencelock/src/redis/conn.rs \
  's/\|\| super::cluster::moved\(e\)/|| false \&\& super::cluster::moved(e)/' \
  "-p fencelock --test cluster a_manual_failover_keeps_an_auto_extended_lock_and_nobody_else_gets_it" \
  "-p fencelock-sim --test sim redis_cluster_failovers_and_slot_moves_keep_one_holder_and_their_locks_seeds_0_to_99"
mutant cluster-release-channel-untagged "a waiter on a cluster node listens on the release channel of the untagged key, where its scripts never publish: woken only by polling (issue 31)" \
  crates/fencelock/src/redis/mod.rs \
  's/nodes\.iter\(\)\.map\(\|n\| n\.addr\(\)\.hash_tag\(\)\)\.collect\(\),/nodes.iter().map(|_| None).collect(),/' \
  "-p fencelock --test cluster the_family_works_on_a_cluster_and_keeps_every_key_in_the_tags_slot" \
  "-p fencelock-sim --test sim redis_cluster_failovers_and_slot_moves_keep_one_holder_and_their_locks_seeds_0_to_99"
mutant cluster-ask-not-followed "a cluster node's request that meets ASK (its keys on the node importing the tag's slot) is not followed there: the node fails the round, and a held lock whose key moved first is lost during the move (issue 31)" \
  crates/fencelock/src/redis/tagged.rs \
  's/let Some\(\(target, _slot\)\) = redirect\.redirect_node\(\) else \{/let Some((target, _slot)) = None::<(\&str, u16)> else {/' \
  "-p fencelock --test cluster a_slot_move_is_followed_by_ask_within_the_round_and_never_gives_a_second_holder" \
  "-p fencelock-sim --test sim redis_cluster_failovers_and_slot_moves_keep_one_holder_and_their_locks_seeds_0_to_99"
mutant cluster-ask-pipeline-not-followed "a cluster node's pipeline (the auto-extender's batch) does not follow ASK: an auto-extended lock whose key moved first is lost during the move (issue 31)" \
  crates/fencelock/src/redis/tagged.rs \
  's/\.filter\(\|_\| !tagged\.is_transaction\(\)\)/.filter(|_| false \&\& !tagged.is_transaction())/' \
  "-p fencelock --test cluster a_slot_move_is_followed_by_ask_within_the_round_and_never_gives_a_second_holder" \
  "-p fencelock-sim --test sim redis_cluster_failovers_and_slot_moves_keep_one_holder_and_their_locks_seeds_0_to_99"
mutant cluster-split-not-retried "a cluster node's extension or release that a key-by-key slot move split (TRYAGAIN, a script's non local key) is not sent again: a release while the lock's keys sit on two nodes fails, and the lock is left to its TTL (issue 31)" \
  crates/fencelock/src/redis/tagged.rs \
  's/let mut retry = self\.split_retry_until\.map\(SplitRetry::until\);/let mut retry = None::<SplitRetry>;/' \
  "-p fencelock --test cluster a_slot_moved_key_by_key_keeps_extending_releases_and_reads_the_election_log" \
  "-p fencelock-sim --test sim redis_cluster_failovers_and_slot_moves_keep_one_holder_and_their_locks_seeds_0_to_99"
mutant cluster-election-ask-not-followed "an election's log connections do not follow ASK: while the tag's slot moves, an observer reads nothing once the log's key moved, until the move ends (issue 31)" \
  crates/fencelock/src/redis/election.rs \
  's/\.following_ask\(self\.askings\[i\]\.clone\(\)\);/.following_ask(None);/' \
  "-p fencelock --test cluster a_slot_moved_key_by_key_keeps_extending_releases_and_reads_the_election_log" \
  "-p fencelock-sim --test sim redis_cluster_failovers_and_slot_moves_keep_one_holder_and_their_locks_seeds_0_to_99"
mutant cli-pg-doctor-async-commit-passes "doctor passes a PostgreSQL session with synchronous_commit off, which can lose an acknowledged lock and reuse its token (issue 32)" \
  crates/fencelock-cli/src/probe/pg.rs \
  's/"off" => check\(/"off (mutant)" => check(/' \
  "-p fencelock-cli --bin fencelock probe::pg::tests::what_loses_locks_fails_and_what_may_warns" \
  "-p fencelock-cli --test zk_pg postgres_takes_extends_inspects_releases_and_checks"
mutant cli-zk-inspect-permits-unpaired "inspect on ZooKeeper pairs no permit with its holder's place in line: the holders' labels are missing and every holder is shown as waiting (issue 32)" \
  crates/fencelock-cli/src/probe/zk.rs \
  's/!owner\.is_empty\(\) && p\.node\.starts_with/owner.is_empty() \&\& p.node.starts_with/' \
  "-p fencelock-cli --test inspect zookeeper_shows_permits_readers_the_writer_and_the_leader"
mutant cli-zk-doctor-quorum-of-half "doctor counts half the listed ZooKeeper servers as a quorum: an ensemble that cannot grant passes with a warning (issue 32)" \
  crates/fencelock-cli/src/probe/zk.rs \
  's/let quorum = listed \/ 2 \+ 1;/let quorum = listed \/ 2;/' \
  "-p fencelock-cli --bin fencelock probe::zk::tests::a_lost_quorum_or_two_leaders_fail" \
  "-p fencelock-cli --test zk_pg zookeeper_takes_inspects_releases_and_checks"

index_of() {
  local i
  for i in "${!NAMES[@]}"; do [[ "${NAMES[$i]}" == "$1" ]] && { echo "$i"; return 0; }; done
  echo "unknown mutant: $1 (scripts/mutants.sh --list)" >&2
  return 1
}

# The tree the mutants are applied to: the working tree, or with MUTANTS_FROM=REV (a commit,
# HEAD) that commit as git stores it, exported once per run, so that edits made in the working
# tree while a long run goes on (a mutant applied there by hand, a half-written change) never
# reach a copy.
SRC="$ROOT"
if [[ -n "${MUTANTS_FROM:-}" ]]; then
  SRC="$WORK.src"
  rm -rf "$SRC" && mkdir -p "$SRC"
  git -C "$ROOT" archive "$MUTANTS_FROM" | tar -x -C "$SRC"
fi

sync_tree() {
  mkdir -p "$WORK"
  rsync -a --delete --exclude /target --exclude /.git --exclude fencelock-harness-out "$SRC/" "$WORK/"
}

# Applies mutant $1 (an index) to the copy; fails when the substitution no longer matches.
apply() {
  local file="${FILES[$1]}"
  perl -0pe "${SUBSTS[$1]}" "$SRC/$file" >"$WORK/$file.mutant"
  if cmp -s "$SRC/$file" "$WORK/$file.mutant"; then
    rm -f "$WORK/$file.mutant"
    return 1
  fi
  mv "$WORK/$file.mutant" "$WORK/$file"
}

# Puts the file back. A plain copy (a new mtime) makes cargo rebuild it.
restore() {
  cp "$SRC/${FILES[$1]}" "$WORK/${FILES[$1]}"
}

if [[ "${1:-}" == "--list" ]]; then
  for i in "${!NAMES[@]}"; do printf '%-28s %s\n' "${NAMES[$i]}" "${WHAT[$i]}"; done
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  # A refactor can leave a substitution matching nothing: the mutant would then "survive"
  # unseen, or be reported as not applying only when someone runs it.
  stale=0
  for i in "${!NAMES[@]}"; do
    if perl -0pe "${SUBSTS[$i]}" "$ROOT/${FILES[$i]}" | cmp -s - "$ROOT/${FILES[$i]}"; then
      echo "mutant ${NAMES[$i]} no longer applies to ${FILES[$i]}: the code it breaks changed; update its substitution here (perl -0pe) and run scripts/mutants.sh ${NAMES[$i]} to see it killed" >&2
      stale=1
    fi
  done
  ((stale == 0)) && echo "all ${#NAMES[@]} mutants apply"
  exit "$stale"
fi
if [[ "${1:-}" == "--tree" ]]; then
  i="$(index_of "${2:?--tree NAME}")"
  sync_tree
  apply "$i" || { echo "mutant $2 no longer applies to ${FILES[$i]}" >&2; exit 1; }
  echo "$WORK"
  exit 0
fi

selected=()
if (($# == 0)); then
  selected=("${!NAMES[@]}")
else
  for name in "$@"; do selected+=("$(index_of "$name")"); done
fi

sync_tree
logs="$WORK.logs"
mkdir -p "$logs"
status=0
rows=()
for i in "${selected[@]}"; do
  name="${NAMES[$i]}"
  if ! apply "$i"; then
    rows+=("| \`$name\` | ${WHAT[$i]} | - | DID NOT APPLY (update the substitution) |")
    status=1
    continue
  fi
  IFS=';' read -r -a killers <<<"${KILLERS[$i]}"
  for k in "${killers[@]}"; do
    log="$logs/$name.$(echo "$k" | tr -c 'a-zA-Z0-9_' '_').log"
    started=$SECONDS
    # shellcheck disable=SC2086 # the killer is a list of cargo arguments
    if (cd "$WORK" && cargo test -q --all-features $k) >"$log" 2>&1; then
      verdict="SURVIVED"
      status=1
    elif grep -q "could not compile" "$log"; then
      verdict="BUILD FAILED (see $log)"
      status=1
    else
      verdict="killed ($((SECONDS - started)) s with the build)"
    fi
    rows+=("| \`$name\` | ${WHAT[$i]} | \`$k\` | $verdict |")
    echo "$name: $k: $verdict" >&2
  done
  restore "$i"
done
echo "| mutant | what it breaks | killed by (cargo test --all-features ...) | result |"
echo "| --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
exit $status
