#!/usr/bin/env bash
# shellcheck disable=SC2329  # on_exit/on_signal and their helpers run from traps
# benchmark.sh - PoRep C2 benchmark for cuzk, designed against the real daemon
# (filecoin-project/curio extern/cuzk; see worker-image/README.md for the contract and sources).
#
# 1. daemon_start  cuzk-daemon with a memory budget from the container's cgroup limit, under
#                  RUST_LOG=info; ready = "cuzk-daemon ready" in its log AND `cuzk-bench status`
#                  answering (the daemon logs "ready" before it binds the port, main.rs:257-258)
# 2. warmup        one PoRep proof and, when the run has Snap proofs, one SnapDeals proof: each
#                  loads its SRS and starts its circuit's background PCE extraction
# 3. pce           wait until every extraction the daemon started has ended ("background PCE
#                  extraction complete" or "... failed"), so that none competes with the timed
#                  proofs. The daemon is NOT restarted: a restarted daemon does not load the saved
#                  PCE (PceCache::load_from_disk has no caller, cuzk-core/src/pipeline.rs) and
#                  would extract it again during the timed run.
# 4. timed_run     BENCH_PROOFS proofs, BENCH_CONCURRENCY in flight (production curio keeps up to
#                  [Cuzk] MaxPending = 10 Prove calls in flight: deps/config/types.go,
#                  harmony/taskhelp/max.go). The rate is proofs completed over the run's time:
#                  the least-squares slope of completed proofs against time through every finish
#                  (see final_rate_milli), so the pipeline's fill does not count against the
#                  machine and failed proofs' time does. Failures are counted and reported.
#                  BENCH_SNAP_PROOFS of them are SnapDeals proofs, spread through the run: a
#                  proofshare provider proves whatever kind the market sends
#                  (tasks/proofshare/task_prove.go:271-289).
# 5. done          each proof's latency at that concurrency (queue included: curio's
#                  ProveTimeout counts it, lib/cuzk/client.go:116-122) sizes the MaxPending
#                  production runs with (vastui-lib.sh deadline_size); the rate it can keep there
#                  is compared with MIN_RATE
#
# Always leaves var/lib/vastui/bench-result.json (EXIT trap), whatever happens; rate_per_hour
# only for pass and below_min (partial_rate_per_hour: what a run that ended otherwise measured).
# Exit codes: 0 pass, 10 below_min, 11 aborted_early, 12 error, 13 timeout.

set -uo pipefail
export LC_ALL=C

R="${WORKER_ROOT:-/}"
R="${R%/}"
LOG_DIR="$R/var/log/vastui"
STATE_DIR="$R/var/lib/vastui"
RUN_DIR="$R/run"
CUZK_LOG="$LOG_DIR/cuzk.log"

# shellcheck source=vastui-lib.sh disable=SC1091  # the lib sits next to the script
. "${BASH_SOURCE[0]%/*}/vastui-lib.sh"
signal_guard "$@"

RESULT_FILE="$STATE_DIR/bench-result.json"
WORK_DIR="$STATE_DIR/bench"
PARAM_DIR="$R/data/zk/params"
CUZK_CONFIG="$STATE_DIR/cuzk.toml"
export FIL_PROOFS_PARAMETER_CACHE="${FIL_PROOFS_PARAMETER_CACHE:-$R/var/tmp/filecoin-proof-parameters}"

MIN_RATE="${MIN_RATE:-0}"
BENCH_PROOFS="${BENCH_PROOFS:-12}"
BENCH_CONCURRENCY="${BENCH_CONCURRENCY:-${CUZK_MAX_PENDING:-10}}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-2400}"
BENCH_READY_TIMEOUT="${BENCH_READY_TIMEOUT:-300}"
BENCH_PCE_TIMEOUT="${BENCH_PCE_TIMEOUT:-900}"
BENCH_PROOF_TIMEOUT="${BENCH_PROOF_TIMEOUT:-1800}"
BENCH_MAX_FAILED="${BENCH_MAX_FAILED:-2}"
BENCH_C1="${BENCH_C1:-$R/usr/local/share/vastui/c1.json}"
BENCH_C1_URL="${BENCH_C1_URL:-}"
BENCH_C1_SHA256="${BENCH_C1_SHA256:-}"
BENCH_MINER_ID="${BENCH_MINER_ID:-1000}"
BENCH_SNAP_PROOFS="${BENCH_SNAP_PROOFS:-0}"
BENCH_SNAP_VANILLA="${BENCH_SNAP_VANILLA:-$R/usr/local/share/vastui/snap-vanilla.json}"
BENCH_SNAP_META="${BENCH_SNAP_META:-$R/usr/local/share/vastui/snap.json}"
CUZK_MAX_PENDING="${CUZK_MAX_PENDING:-10}"
CUZK_PROVE_TIMEOUT="${CUZK_PROVE_TIMEOUT:-30m}"
PROVE_DEADLINE_MARGIN="${PROVE_DEADLINE_MARGIN:-0.2}"
BENCH_EARLY_ABORT="${BENCH_EARLY_ABORT:-1}"
BENCH_KEEP_DAEMON="${BENCH_KEEP_DAEMON:-0}"
BENCH_POLL_INTERVAL="${BENCH_POLL_INTERVAL:-0.2}"
CUZK_SAFETY_MARGIN_GIB="${CUZK_SAFETY_MARGIN_GIB:-5}"
CUZK_LISTEN="${CUZK_LISTEN:-127.0.0.1:9820}"
CUZK_STATUS_ADDR="${CUZK_STATUS_ADDR:-127.0.0.1:9821}"
MAX_TAIL=20

# ------------------------------------------------------------------ state
outcome=""
stage="daemon_start"
reason=""
exit_code=12
completed=0
failed=0
finished=0
finish_ms=()   # clock ms of each finish (completed or failed) of the current run
finish_done=() # proofs completed by then
warmup_ms=""
warm_completed=0
warm_failed=0
pce_state="none"
budget_gib=""
sector_num=""
extra_errors=()
daemon_died=0
latencies=()
declare -A kind_done=() kind_failed=() # porep|snap -> proofs of the timed run
snap_args=()
max_pending=""
sized_rate=""
sized_latency=""
deadline_limit=""
daemon_offset=0
ticker=""
declare -A inflight=() # cuzk-bench pid -> proof index
started=()             # proof index -> clock ms at submission
started_at="$EPOCHREALTIME"

say() { printf '%s [bench] %s\n' "$(now_iso)" "$*"; }

# The run's rate in thousandths of a proof per hour: the least-squares slope of proofs completed
# against time, through every finish of the timed run (failed proofs are finishes that complete
# nothing: their time counts). Completed ÷ wall time, without the pipeline's fill (the first
# finish comes after a whole proof's latency) and without favouring a machine whose GPUs finish
# proofs in pairs. Two finishes: completed after the first over the span; one: its latency.
final_rate_milli() {
  local n=${#finish_ms[@]}
  if ((n >= 3)); then
    local i
    for ((i = 0; i < n; i++)); do
      printf '%d %d\n' $((finish_ms[i] - finish_ms[0])) "${finish_done[i]}"
    done | awk '{ n++; t += $1; c += $2; tt += $1 * $1; tc += $1 * $2 }
      END { d = n * tt - t * t; if (d <= 0) exit 1; s = (n * tc - t * c) / d
            if (s < 0) s = 0; printf "%d", s * 3600000000 }'
  elif ((n == 2 && finish_ms[1] > finish_ms[0])); then
    printf '%d' $(((finish_done[1] - finish_done[0]) * 3600000000 / (finish_ms[1] - finish_ms[0])))
  elif ((completed > 0 && ${#latencies[@]} > 0 && latencies[0] > 0)); then
    printf '%d' $((3600000000 / latencies[0]))
  else
    return 1
  fi
}

# cuzk-bench's error lines, each once. Once the daemon died, every proof in flight lost its
# connection: the daemon's own lines and how it died say what happened, the transport errors
# (an "Error: Prove RPC failed" chain per proof) say nothing more.
bench_lines() {
  awk -v died="$daemon_died" 'died && (/^Error: / || /^  /) { next } !seen[$0]++'
}

collect_error_tail() {
  local daemon_budget=14 bench_budget=4
  {
    tail -c +"$((daemon_offset + 1))" -- "$CUZK_LOG" 2>/dev/null | error_lines | awk '!seen[$0]++' |
      tail -n "$daemon_budget"
    local f
    for f in "$WORK_DIR"/*.out; do
      [[ -f $f ]] && cat -- "$f"
    done | error_lines | bench_lines | tail -n "$bench_budget"
    if ((${#extra_errors[@]} > 0)); then
      printf '%s\n' "${extra_errors[@]}"
    fi
  } | tail -n "$MAX_TAIL"
}

# The timed run's latencies (ms, sorted): nearest-rank percentile $1 (0-100).
percentile_ms() {
  local n=${#sorted_lat[@]} idx
  ((n > 0)) || return 1
  idx=$(((n * $1 + 99) / 100 - 1))
  ((idx < 0)) && idx=0
  printf '%d' "${sorted_lat[idx]}"
}

sorted_lat=()
sort_latencies() {
  sorted_lat=()
  ((${#latencies[@]} > 0)) || return 0
  mapfile -t sorted_lat < <(printf '%s\n' "${latencies[@]}" | sort -n)
}

# {"p50","p95","max","service"}: a proof's latency at the run's concurrency, queue included (as
# curio's ProveTimeout counts it); "service" is the quickest, the nearest to a proof alone.
latency_json() {
  sort_latencies
  ((${#sorted_lat[@]} > 0)) || {
    printf 'null'
    return 0
  }
  printf '{"p50":%s,"p95":%s,"max":%s,"service":%s}' "$(fmt_milli "$(percentile_ms 50)")" \
    "$(fmt_milli "$(percentile_ms 95)")" "$(fmt_milli "${sorted_lat[-1]}")" \
    "$(fmt_milli "${sorted_lat[0]}")"
}

# Only a run that reached its verdict (pass, below_min) measured the machine: any other outcome
# has no rate_per_hour. What the timed run measured before it ended (two finishes a moment apart
# when the daemon died, a few before an early abort) is partial_rate_per_hour, for a person to
# read; nothing before the timed run (a warmup proof's latency) is a rate at all.
rated_outcome() { [[ $outcome == pass || $outcome == below_min ]]; }
partial_outcome() { ! rated_outcome && [[ $stage == timed_run ]]; }

write_result() {
  local tmp="$RESULT_FILE.tmp.$$" rate="null" partial="null" min="null" secs="" ms window="null"
  local warm="null" bench_n=null conc=null budget=null sector=null r m
  if r=$(final_rate_milli); then
    if rated_outcome; then
      rate=$(fmt_milli "$r")
    elif partial_outcome; then
      partial=$(fmt_milli "$r")
    fi
  fi
  if m=$(to_milli "$MIN_RATE"); then min=$(fmt_milli "$m"); fi
  for ms in "${latencies[@]}"; do secs+="${secs:+,}$(fmt_milli "$ms")"; done
  if ((${#finish_ms[@]} > 1)); then
    window=$(fmt_milli $((finish_ms[-1] - finish_ms[0])))
  fi
  [[ -n $warmup_ms ]] && warm=$(fmt_milli "$warmup_ms")
  [[ $BENCH_PROOFS =~ ^[0-9]{1,9}$ ]] && bench_n=$((10#$BENCH_PROOFS))
  [[ $BENCH_CONCURRENCY =~ ^[0-9]{1,9}$ ]] && conc=$((10#$BENCH_CONCURRENCY))
  [[ -n $budget_gib ]] && budget=$budget_gib
  [[ -n $sector_num ]] && sector=$sector_num
  local daemon="null"
  if [[ $outcome == pass && $BENCH_KEEP_DAEMON == 1 ]] && daemon_alive; then daemon=$DAEMON_PID; fi
  local snap_n=null kinds latency deadline
  [[ $BENCH_SNAP_PROOFS =~ ^[0-9]{1,9}$ ]] && snap_n=$((10#$BENCH_SNAP_PROOFS))
  kinds=$(printf '{"porep":{"completed":%d,"failed":%d},"snap":{"completed":%d,"failed":%d}}' \
    "${kind_done[porep]:-0}" "${kind_failed[porep]:-0}" "${kind_done[snap]:-0}" "${kind_failed[snap]:-0}")
  latency=$(latency_json)
  deadline=null
  if [[ -n $deadline_limit ]]; then
    deadline=$(printf '{"prove_timeout_seconds":%s,"limit_seconds":%s,"configured_max_pending":%d,"max_pending":%d,"rate_at_max_pending":%s,"latency_at_max_pending_seconds":%s}' \
      "$(fmt_milli "$(duration_ms "$CUZK_PROVE_TIMEOUT")")" "$(fmt_milli "$deadline_limit")" \
      "$CUZK_MAX_PENDING" "${max_pending:-0}" "$(fmt_milli "${sized_rate:-0}")" \
      "$(fmt_milli "${sized_latency:-0}")")
  fi
  mkdir -p -- "$STATE_DIR"
  printf '{"outcome":%s,"stage":%s,"reason":%s,"rate_per_hour":%s,"partial_rate_per_hour":%s,"min_rate":%s,"bench_proofs":%s,"snap_proofs":%s,"concurrency":%s,"proofs_completed":%d,"proofs_failed":%d,"proofs_by_kind":%s,"window_seconds":%s,"proof_seconds":[%s],"latency_seconds":%s,"deadline":%s,"max_pending":%s,"warmup_seconds":%s,"pce":%s,"memory_budget_gib":%s,"plan_gib":%d,"cpus":%d,"max_parallel_synthesis":%d,"gpu_threads":%d,"sector_num":%s,"miner_id":%s,"daemon_pid":%s,"daemon_completed":%d,"daemon_failed":%d,"exit_code":%d,"started_at":%s,"finished_at":%s,"error_tail":%s}\n' \
    "$(json_str "$outcome")" "$(json_str "$stage")" "$(json_str "$reason")" "$rate" "$partial" "$min" \
    "$bench_n" "$snap_n" "$conc" "$completed" "$failed" "$kinds" "$window" "$secs" "$latency" \
    "$deadline" "${max_pending:-null}" "$warm" \
    "$(json_str "$pce_state")" "$budget" "$PLAN_NEED_GIB" "$CPUS" "$MAX_PARALLEL_SYNTH" \
    "$GPU_THREADS" "$sector" "$(json_str "$BENCH_MINER_ID")" "$daemon" \
    $((warm_completed + completed)) $((warm_failed + failed)) \
    "$exit_code" "$started_at" "$EPOCHREALTIME" "$(collect_error_tail | json_lines)" \
    >"$tmp" && mv -f -- "$tmp" "$RESULT_FILE"
}

# Polled, never waited for: after a trap interrupted `wait -n`, a wait on a child that bash
# reaped meanwhile never returns (bash 5.2.15; CI: a SIGTERMed benchmark.sh hung in the wait for
# its ticker, the TERM handled, nothing written).
kill_children() {
  local pid i alive pids=("${!inflight[@]}")
  [[ -n $ticker ]] && pids+=("$ticker")
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null
  done
  for ((i = 0; i < 40; i++)); do
    alive=0
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    ((alive)) || break
    sleep 0.05
  done
  for pid in "${pids[@]}"; do
    kill -KILL "$pid" 2>/dev/null
  done
  inflight=()
  ticker=""
}

on_exit() {
  local rc=$?
  trap - EXIT
  trap '' TERM INT HUP USR1 # the guard repeats a signal until we exit (vastui-lib.sh)
  # a signal whose trap bash lost still stops the run as one (signal_guard, vastui-lib.sh)
  if [[ -z $signalled ]] && guard_signalled; then
    mark_signalled "$GUARD_SIG"
  fi
  if [[ -z $outcome ]]; then
    outcome=error
    reason="benchmark.sh exited unexpectedly (status $rc)"
    extra_errors+=("$reason")
  fi
  case $outcome in
    pass) exit_code=0 ;;
    below_min) exit_code=10 ;;
    aborted_early) exit_code=11 ;;
    timeout) exit_code=13 ;;
    *) exit_code=12 ;;
  esac
  kill_children
  if [[ $outcome != pass || $BENCH_KEEP_DAEMON != 1 ]]; then
    daemon_stop
  fi
  write_result
  local shown="n/a" min_shown="$MIN_RATE" m r
  if r=$(final_rate_milli); then
    if rated_outcome; then
      shown=$(fmt_milli "$r" 1)
    elif partial_outcome; then
      say "partial rate before the run ended: $(fmt_milli "$r" 1) proofs/hour (not the machine's rate)"
    fi
  fi
  if m=$(to_milli "$MIN_RATE"); then min_shown=$(fmt_milli "$m" 1); fi
  [[ -n $reason ]] && say "reason: $reason"
  printf 'RESULT: %s proofs/hour (min %s) %s\n' "$shown" "$min_shown" "${outcome^^}"
  exit "$exit_code"
}

signalled=""
mark_signalled() {
  signalled=$1
  outcome=error
  reason="benchmark interrupted by SIG$1"
  extra_errors+=("benchmark.sh received SIG$1 during stage $stage")
}

on_signal() {
  trap '' TERM INT HUP USR1
  mark_signalled "$1"
  exit 12
}

# Moves on to stage $1, unless a signal came whose trap bash lost: then the run stops here, in
# the stage it was in.
enter_stage() {
  if guard_signalled; then
    on_signal "$GUARD_SIG"
  fi
  stage=$1
}

trap on_exit EXIT
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT USR1 # the guard relays SIGINT as SIGUSR1 (vastui-lib.sh)
trap 'on_signal HUP' HUP

finish() {
  outcome=$1
  reason=$2
  exit 0 # the EXIT trap maps the outcome to the exit code and writes the result
}

# The daemon died: its own lines are in the tail already; add how it died.
finish_daemon_died() { # $1 = what it was doing
  local status
  status=$(daemon_exit_status 2) || status="?"
  local sig
  sig=$(signal_name "$status")
  daemon_died=1
  extra_errors+=("$(daemon_death_line "$status")")
  finish error "cuzk-daemon died $1 (${sig:-exit status $status})"
}

check_deadline() {
  clock_ms
  if ((CLOCK_MS >= deadline_ms)); then
    finish timeout "benchmark timeout: exceeded ${BENCH_TIMEOUT} s during $stage"
  fi
}

# ------------------------------------------------------------------ daemon

# cuzk's config from the shared writer (vastui-lib.sh): the budget from the container's cgroup
# limit minus CUZK_SAFETY_MARGIN_GIB and the tuning from its CPUs, as production will run it.
bench_cuzk_config() {
  write_cuzk_config "$CUZK_CONFIG" "$CUZK_SAFETY_MARGIN_GIB"
  budget_gib=$MEM_BUDGET_GIB
  local shown_limit="none" shown_total="?"
  [[ -n $MEM_LIMIT_BYTES ]] && shown_limit="$((MEM_LIMIT_BYTES / 1073741824)) GiB"
  [[ -n $MEM_TOTAL_BYTES ]] && shown_total="$((MEM_TOTAL_BYTES / 1073741824)) GiB"
  say "memory budget ${budget_gib:-auto}${budget_gib:+GiB} (container limit $shown_limit, MemTotal $shown_total, margin ${CUZK_SAFETY_MARGIN_GIB} GiB; plan ${PLAN_NEED_GIB} GiB)"
  say "cuzk tuned for ${CPUS} CPUs: max_parallel_synthesis ${MAX_PARALLEL_SYNTH}, gpu_threads ${GPU_THREADS}, synthesis threads ${SYNTH_THREADS}"
}

# The daemon reads the SRS from its param_cache; paramfetch writes FIL_PROOFS_PARAMETER_CACHE.
link_params() {
  local f
  for f in "$FIL_PROOFS_PARAMETER_CACHE"/*.params "$FIL_PROOFS_PARAMETER_CACHE"/*.vk \
    "$FIL_PROOFS_PARAMETER_CACHE"/*.srs; do
    [[ -e $f && ! -e "$PARAM_DIR/${f##*/}" ]] && ln -s -- "$f" "$PARAM_DIR/${f##*/}"
  done
  return 0
}

log_count() { grep -cF -- "$1" < <(tail -c +"$((daemon_offset + 1))" -- "$CUZK_LOG" 2>/dev/null); }

start_daemon() {
  daemon_offset=$(file_size "$CUZK_LOG")
  daemon_launch "$CUZK_CONFIG"
  say "cuzk-daemon started (pid $DAEMON_PID), waiting for it to be ready"
  local status wait_s=$BENCH_READY_TIMEOUT rc
  clock_ms
  (((deadline_ms - CLOCK_MS) / 1000 < wait_s)) && wait_s=$(((deadline_ms - CLOCK_MS + 999) / 1000))
  daemon_wait_ready "$daemon_offset" "$wait_s" "$BENCH_POLL_INTERVAL"
  rc=$?
  if ((rc == 1)); then
    status=$(daemon_exit_status 2) || status="?"
    extra_errors+=("$(daemon_death_line "$status")")
    finish error "cuzk-daemon exited during startup ($(signal_name "$status")${status:+ status $status})"
  fi
  ((rc == 0)) || check_deadline # the benchmark's own deadline came first: a timeout
  if ((rc == 2)); then
    extra_errors+=("cuzk-daemon logged no \"cuzk-daemon ready\" within ${BENCH_READY_TIMEOUT} s")
    finish error "cuzk-daemon not ready after ${BENCH_READY_TIMEOUT} s"
  elif ((rc == 3)); then
    extra_errors+=("cuzk-daemon logged ready but $CUZK_LISTEN did not answer within ${BENCH_READY_TIMEOUT} s")
    finish error "cuzk-daemon logged ready but did not answer on $CUZK_LISTEN within ${BENCH_READY_TIMEOUT} s"
  fi
  say "cuzk-daemon ready and answering on $CUZK_LISTEN"
}

# ------------------------------------------------------------------ proofs

# One line from the daemon's /status on what it is doing (cuzk-core/src/status.rs).
status_summary() {
  local json jobs gpu oldest
  json=$(curl -sf --max-time 3 "http://$CUZK_STATUS_ADDR/status") || return 1
  jobs=$(grep -o '"job_id":' <<<"$json" | wc -l)
  gpu=$(grep -o '"state":"proving"' <<<"$json" | wc -l)
  oldest=$(grep -oE '"started_secs_ago":[0-9]+' <<<"$json" | cut -d: -f2 | sort -n | tail -n 1)
  printf 'cuzk /status: %d proofs in the pipeline (oldest started %s s ago), %d GPU workers proving' \
    "$jobs" "${oldest:-?}" "$gpu"
}

# The kind of proof $2 of the run whose files are named $1: the timed run spreads its
# BENCH_SNAP_PROOFS Snap proofs evenly (with 2 in 12: proofs 6 and 12).
declare -A proof_kind=() # proof index -> porep|snap, for the run in progress
kind_of() {
  case $1 in
    warmup) printf 'porep' ;;
    snapwarm) printf 'snap' ;;
    *)
      if ((SNAP_N > 0 && $2 * SNAP_N / TOTAL > ($2 - 1) * SNAP_N / TOTAL)); then
        printf 'snap'
      else
        printf 'porep'
      fi
      ;;
  esac
}

# Starts proof $1 (output in $WORK_DIR/$2.out, kind $3) in the background. A Snap proof takes
# the vanilla partition proofs and the three commitments (cuzk-bench/src/main.rs:40-86, 900-990).
submit_proof() {
  local idx=$1 name=$2 kind=$3
  if [[ $kind == snap ]]; then
    cuzk-bench --addr "http://$CUZK_LISTEN" single -t snap --vanilla "$BENCH_SNAP_VANILLA" \
      "${snap_args[@]}" >"$WORK_DIR/$name.out" 2>&1 </dev/null &
  else
    cuzk-bench --addr "http://$CUZK_LISTEN" single -t porep --c1 "$BENCH_C1" \
      --sector-num "$sector_num" --miner-id "$BENCH_MINER_ID" >"$WORK_DIR/$name.out" 2>&1 </dev/null &
  fi
  inflight[$!]=$idx
  proof_kind[$idx]=$kind
  clock_ms
  started[idx]=$CLOCK_MS
}

proof_name() { printf '%s-%04d' "$1" "$2"; }

# Watches the proofs in flight; called on every tick. Hung proofs, a dead daemon, the deadline.
periodic_checks() {
  check_deadline
  if ! daemon_alive; then
    finish_daemon_died "during $1"
  fi
  local pid idx age since limit=$((BENCH_PROOF_TIMEOUT * 1000))
  for pid in "${!inflight[@]}"; do
    idx=${inflight[$pid]}
    # With BENCH_CONCURRENCY proofs in flight a slow machine's proof waits its turn: it is hung
    # only when the pipeline finished nothing for the whole timeout.
    since=${started[$idx]}
    if ((${#finish_ms[@]} > 0 && finish_ms[-1] > since)); then since=${finish_ms[-1]}; fi
    age=$((CLOCK_MS - since))
    if ((age >= limit)); then
      extra_errors+=("proof $idx: no result after ${BENCH_PROOF_TIMEOUT} s (cuzk-daemon alive, proof hung)")
      local summary
      summary=$(status_summary) && extra_errors+=("$summary")
      finish error "proof $idx hung: no result after ${BENCH_PROOF_TIMEOUT} s"
    fi
  done
}

# Runs proofs 1..$1 with at most $2 in flight; $3 names the stage for messages, $4 the files.
# on_proof (below) sees each result as it comes in.
run_proofs() {
  local total=$1 lanes=$2 what=$3 prefix=$4 submitted=0 done_pid rc idx
  RUN_TOTAL=$total
  while ((finished < total)); do
    while ((submitted < total && ${#inflight[@]} < lanes)); do
      submitted=$((submitted + 1))
      submit_proof "$submitted" "$(proof_name "$prefix" "$submitted")" \
        "$(kind_of "$prefix" "$submitted")"
    done
    if [[ -z $ticker ]]; then
      sleep "$BENCH_POLL_INTERVAL" &
      ticker=$!
    fi
    done_pid=""
    wait -n -p done_pid "${!inflight[@]}" "$ticker" 2>/dev/null
    rc=$?
    [[ -n ${done_pid:-} ]] || continue # a trap ran (wait -p then unsets done_pid)
    if [[ $done_pid == "$ticker" ]]; then
      ticker=""
      periodic_checks "$what"
      continue
    fi
    idx=${inflight[$done_pid]:-}
    [[ -n $idx ]] || continue
    unset "inflight[$done_pid]"
    on_proof "$idx" "$rc" "$WORK_DIR/$(proof_name "$prefix" "$idx").out" "$what"
  done
}

RUN_TOTAL=0
on_proof() { # $1 index, $2 cuzk-bench status, $3 its output, $4 what
  local idx=$1 rc=$2 out=$3 what=$4 status ms kind=${proof_kind[$1]:-porep}
  clock_ms
  finished=$((finished + 1))
  status=$(sed -nE 's/^status:[[:space:]]+([A-Z]+)$/\1/p' -- "$out" | tail -n 1)
  ms=$(sed -nE 's/^wall time:[[:space:]]*([0-9]+)[[:space:]]*ms$/\1/p' -- "$out" | tail -n 1)
  if ((rc != 0)); then
    # A broken RPC: give the daemon's supervisor a moment to record a death.
    daemon_exit_status 1 >/dev/null
    daemon_alive || finish_daemon_died "during $what"
  fi
  if ((rc == 0)) && [[ $status == COMPLETED ]]; then
    completed=$((completed + 1))
    # single exits 0 for a FAILED proof too (cuzk-bench/src/main.rs:496-499): read status:
    [[ -n $ms ]] && latencies+=("$ms")
    [[ $stage == timed_run ]] && kind_done[$kind]=$((${kind_done[$kind]:-0} + 1))
    say "proof $idx/$RUN_TOTAL ($kind): COMPLETED in $(fmt_milli "${ms:-0}") s"
  else
    failed=$((failed + 1))
    local why
    why=$(sed -nE 's/^error:[[:space:]]+(.*)$/\1/p; s/^(Error: .*)$/\1/p' -- "$out" | head -n 1)
    [[ $stage == timed_run ]] && kind_failed[$kind]=$((${kind_failed[$kind]:-0} + 1))
    say "proof $idx/$RUN_TOTAL ($kind): ${status:-ERROR} (cuzk-bench exit $rc): ${why:-no result}"
    if ((failed > BENCH_MAX_FAILED)); then
      finish error "too many failed proofs ($failed of $finished) in $what"
    fi
  fi
  # A proof finished when cuzk-bench printed its answer (the last write to its output), not when
  # this script got round to it: a shell that stalls would record a burst of finishes, a false
  # pace and an early abort (CI, 400x: a 0.2 s stall is 80 s of the worker's clock).
  local at=$CLOCK_MS wrote
  if wrote=$(file_mtime_ms "$out") && ((wrote < at)); then at=$wrote; fi
  finish_ms+=("$at")
  finish_done+=("$completed")
  if [[ $stage == timed_run ]]; then
    early_abort_check
  fi
}

# After each finish: could even a 25% better pace than the one so far still reach MIN_RATE? The
# pace is read from the finishes in time order, and it must fail both with and without the latest
# finish: one straggler (a proof slowed by something of its own, or a result read out of turn
# while others finished before it) does not condemn a machine; a slow one fails both from its
# fourth finish on.
early_abort_check() {
  [[ $BENCH_EARLY_ABORT == 1 ]] || return 0
  ((finished >= 4 && finished < TOTAL && min_m > 0)) || return 0
  local i prev=0 line all prefix times=() oks=()
  while read -r line; do
    times+=("${line% *}")
    oks+=("${line#* }")
  done < <(
    for ((i = 0; i < ${#finish_ms[@]}; i++)); do
      printf '%d %d\n' "${finish_ms[i]}" $((finish_done[i] - prev))
      prev=${finish_done[i]}
    done | sort -n -k1,1
  )
  all=$(best_case_milli "${#times[@]}") || return 0
  prefix=$(best_case_milli $((${#times[@]} - 1))) || return 0
  if ((all < min_m && prefix < min_m)); then
    ((prefix > all)) && all=$prefix
    finish aborted_early "benchmark aborted_early: best case $(fmt_milli "$all" 1) < $(fmt_milli "$min_m" 1) proofs/h after $finished proofs"
  fi
}

# The best case over the first $1 finishes of times/oks (early_abort_check's): every other proof
# completes, each after 0.8 of the mean interval so far. Status 1 when it cannot be judged.
best_case_milli() {
  local k=$1 gaps=$(($1 - 1)) remaining=$((TOTAL - $1)) span done_since=0 i
  ((gaps >= 2 && remaining > 0)) || return 1
  span=$((times[k - 1] - times[0]))
  ((span > 0)) || return 1
  for ((i = 1; i < k; i++)); do done_since=$((done_since + oks[i])); done
  printf '%d' $(((done_since + remaining) * 3600000000 / (span + remaining * span * 4 / (5 * gaps))))
}

# ------------------------------------------------------------------ main
mkdir -p -- "$LOG_DIR" "$STATE_DIR" "$RUN_DIR" "$WORK_DIR" "$PARAM_DIR"
rm -f -- "$RESULT_FILE" "$WORK_DIR"/*.out
touch -- "$CUZK_LOG"
daemon_offset=$(file_size "$CUZK_LOG")

BENCH_TIMEOUT=$(int_or "$BENCH_TIMEOUT" 0)
BENCH_READY_TIMEOUT=$(int_or "$BENCH_READY_TIMEOUT" 300)
BENCH_PCE_TIMEOUT=$(int_or "$BENCH_PCE_TIMEOUT" 900)
BENCH_PROOF_TIMEOUT=$(int_or "$BENCH_PROOF_TIMEOUT" 1800)
BENCH_MAX_FAILED=$(int_or "$BENCH_MAX_FAILED" 2)
CUZK_SAFETY_MARGIN_GIB=$(int_or "$CUZK_SAFETY_MARGIN_GIB" 5)
deadline_ms=$((${BENCH_TIMEOUT:-2400} * 1000))
if ((BENCH_TIMEOUT == 0)); then
  BENCH_TIMEOUT=2400
  deadline_ms=$((BENCH_TIMEOUT * 1000))
  finish error "invalid BENCH_TIMEOUT (want whole seconds > 0)"
fi
if ! [[ $BENCH_PROOFS =~ ^[0-9]{1,9}$ ]] || ((10#$BENCH_PROOFS == 0)); then
  finish error "invalid BENCH_PROOFS (want an integer > 0)"
fi
if ! [[ $BENCH_CONCURRENCY =~ ^[0-9]{1,4}$ ]] || ((10#$BENCH_CONCURRENCY == 0)); then
  finish error "invalid BENCH_CONCURRENCY (want an integer > 0)"
fi
if ! [[ $BENCH_MINER_ID =~ ^[0-9]{1,19}$ ]]; then
  finish error "invalid BENCH_MINER_ID (want the actor id of the C1's miner, e.g. 1000)"
fi
TOTAL=$((10#$BENCH_PROOFS))
LANES=$((10#$BENCH_CONCURRENCY))
min_m=$(to_milli "$MIN_RATE") || finish error "invalid MIN_RATE (want a decimal number)"
if ! [[ $BENCH_SNAP_PROOFS =~ ^[0-9]{1,9}$ ]] || ((10#$BENCH_SNAP_PROOFS >= TOTAL)); then
  finish error "invalid BENCH_SNAP_PROOFS (want an integer from 0 to BENCH_PROOFS - 1)"
fi
SNAP_N=$((10#$BENCH_SNAP_PROOFS))
CUZK_MAX_PENDING=$(int_or "$CUZK_MAX_PENDING" 10)
margin_m=$(to_milli "$PROVE_DEADLINE_MARGIN") || finish error "invalid PROVE_DEADLINE_MARGIN (want a decimal number)"

say "PoRep C2 benchmark for cuzk: ${TOTAL} proofs (${SNAP_N} SnapDeals), ${LANES} in flight, min rate ${MIN_RATE} proofs/h, timeout ${BENCH_TIMEOUT} s"

# The C1 input: a lotus-bench `simple commit1` output ({"SectorNum":..,"Phase1Out":..}); its
# replica id is bound to the miner and sector it was sealed for, so those flags must match it
# or every proof fails its self-check (cuzk-core/src/engine.rs:572-638).
if [[ ! -s $BENCH_C1 && -n $BENCH_C1_URL ]]; then
  say "downloading the C1 input"
  mkdir -p -- "$(dirname -- "$BENCH_C1")"
  curl -fsSL --retry 3 --max-time "$BENCH_TIMEOUT" -o "$BENCH_C1.part" -- "$BENCH_C1_URL" &&
    mv -f -- "$BENCH_C1.part" "$BENCH_C1"
fi
if [[ ! -s $BENCH_C1 ]]; then
  extra_errors+=("error: C1 input not found: $BENCH_C1")
  finish error "C1 input missing: $BENCH_C1"
fi
if [[ -n $BENCH_C1_SHA256 ]]; then
  got=$(sha256sum -- "$BENCH_C1" | cut -d' ' -f1)
  if [[ $got != "$BENCH_C1_SHA256" ]]; then
    extra_errors+=("error: C1 input $BENCH_C1 has sha256 $got, expected $BENCH_C1_SHA256")
    finish error "C1 input checksum mismatch"
  fi
fi
sector_num=$(head -c 200 -- "$BENCH_C1" | sed -nE 's/.*"SectorNum":[[:space:]]*([0-9]{1,19}).*/\1/p')
if [[ -z $sector_num ]]; then
  extra_errors+=("error: no SectorNum in the C1 input $BENCH_C1 (not a lotus-bench c1 JSON?)")
  finish error "C1 input has no SectorNum"
fi
# The Snap input: vanilla partition proofs (a JSON array of base64 strings, as cuzk-bench reads
# --vanilla) and, in the meta file, the commitments and ids they were made for
# (cuzk-bench/src/main.rs:40-86, 900-990; RegisteredUpdateProof 32 GiB = 3).
if ((SNAP_N > 0)); then
  if [[ ! -s $BENCH_SNAP_VANILLA || ! -s $BENCH_SNAP_META ]]; then
    extra_errors+=("error: Snap input not found: $BENCH_SNAP_VANILLA, $BENCH_SNAP_META")
    finish error "Snap input missing: $BENCH_SNAP_VANILLA"
  fi
  meta=$(head -c 4096 -- "$BENCH_SNAP_META" | tr -d '\n')
  snap_args=()
  for field in comm_r_old comm_r_new comm_d_new; do
    value=$(sed -nE "s/.*\"$field\":[[:space:]]*\"([0-9a-fA-F]{64})\".*/\1/p" <<<"$meta")
    [[ -n $value ]] || finish error "Snap input $BENCH_SNAP_META has no 32-byte hex $field"
    snap_args+=("--${field//_/-}" "$value")
  done
  for field in registered_proof sector_num miner_id; do
    value=$(sed -nE "s/.*\"$field\":[[:space:]]*\"?([0-9]{1,19})\"?.*/\1/p" <<<"$meta")
    [[ -n $value ]] || finish error "Snap input $BENCH_SNAP_META has no $field"
    snap_args+=("--${field//_/-}" "$value")
  done
fi
for bin in cuzk-daemon cuzk-bench; do
  command -v "$bin" >/dev/null || {
    extra_errors+=("error: $bin not found on PATH")
    finish error "$bin not found"
  }
done

# 1. daemon_start
bench_cuzk_config
link_params
start_daemon

# 2. warmup
enter_stage warmup
say "warmup proof (SRS load, PCE extraction)"
clock_ms
warm_start=$CLOCK_MS
run_proofs 1 1 "the warmup" warmup
cat -- "$WORK_DIR/$(proof_name warmup 1).out"
if ((completed == 0)); then
  why=$(sed -nE 's/^error:[[:space:]]+(.*)$/\1/p; s/^Error: (.*)$/\1/p' -- "$WORK_DIR/$(proof_name warmup 1).out" | head -n 1)
  finish error "warmup proof failed${why:+: $why}"
fi
if ((SNAP_N > 0)); then
  say "SnapDeals warmup proof (its own SRS and PCE)"
  finished=0
  run_proofs 1 1 "the Snap warmup" snapwarm
  cat -- "$WORK_DIR/$(proof_name snapwarm 1).out"
  if ((completed < 2)); then
    why=$(sed -nE 's/^error:[[:space:]]+(.*)$/\1/p; s/^Error: (.*)$/\1/p' -- "$WORK_DIR/$(proof_name snapwarm 1).out" | head -n 1)
    finish error "Snap warmup proof failed${why:+: $why}"
  fi
fi
clock_ms
warmup_ms=$((CLOCK_MS - warm_start))

# 3. pce
enter_stage pce
say "waiting for the background PCE extraction to end"
clock_ms
pce_deadline=$((CLOCK_MS + BENCH_PCE_TIMEOUT * 1000))
while :; do
  begun=$(log_count "background PCE extraction starting")
  ended=$(($(log_count "background PCE extraction complete") + $(log_count "background PCE extraction failed")))
  ((begun > 0 && ended >= begun)) && break
  daemon_alive || finish_daemon_died "during the PCE extraction"
  clock_ms
  if ((CLOCK_MS >= pce_deadline)); then
    extra_errors+=("the background PCE extraction did not end within ${BENCH_PCE_TIMEOUT} s")
    finish timeout "PCE extraction did not finish within ${BENCH_PCE_TIMEOUT} s"
  fi
  check_deadline
  nap "$BENCH_POLL_INTERVAL"
done
if (($(log_count "background PCE extraction failed") > 0)); then
  pce_state=failed
  say "warning: the background PCE extraction failed (the daemon proves without it)"
elif (($(log_count "failed to save PCE to disk (non-fatal)") > 0)); then
  pce_state=not_saved
  say "warning: the PCE could not be saved to disk; it stays cached in memory"
else
  pce_state=cached
  say "PCE extracted and cached"
fi

# 4. timed_run
enter_stage timed_run
warm_completed=$completed
warm_failed=$failed
completed=0
failed=0
finished=0
latencies=()
finish_ms=()
finish_done=()
say "timed run: ${TOTAL} proofs, ${LANES} in flight"
run_proofs "$TOTAL" "$LANES" "the timed run" proof
for f in "$WORK_DIR"/proof-*.out; do
  cat -- "$f"
done

# 5. done
enter_stage "done"
if ! rate_m=$(final_rate_milli) || ((completed == 0)); then
  finish error "no proof completed"
fi
summary="${completed} proofs, ${failed} failed, ${LANES} in flight"
# curio's deadline: the MaxPending production runs with and the rate it keeps there
sort_latencies
timeout_ms=$(duration_ms "$CUZK_PROVE_TIMEOUT")
deadline_size "$rate_m" "${sorted_lat[0]:-0}" "$CUZK_MAX_PENDING" "$timeout_ms" "$margin_m"
max_pending=$SIZED_MAX_PENDING
sized_rate=$SIZED_RATE_M
sized_latency=$SIZED_LATENCY_MS
deadline_limit=$SIZED_LIMIT_MS
limit_min="$(fmt_milli $((SIZED_LIMIT_MS / 60)) 1) min"
if ((max_pending == 0)); then
  finish below_min "benchmark below_min: a proof takes $(fmt_milli $((SIZED_LATENCY_MS / 60)) 1) min at the least, over the $limit_min curio's ProveTimeout $CUZK_PROVE_TIMEOUT allows ($(fmt_milli "$rate_m" 1) proofs/h; $summary)"
fi
if ((rate_m >= min_m && sized_rate >= min_m)); then
  finish pass "benchmark pass: $(fmt_milli "$rate_m" 1) >= $(fmt_milli "$min_m" 1) proofs/h ($summary; MaxPending $max_pending: a proof waits $(fmt_milli $((sized_latency / 60)) 1) of $limit_min)"
fi
if ((rate_m >= min_m)); then
  finish below_min "benchmark below_min: at MaxPending $max_pending (a proof must finish within $limit_min of curio's ProveTimeout $CUZK_PROVE_TIMEOUT) it keeps $(fmt_milli "$sized_rate" 1) < $(fmt_milli "$min_m" 1) proofs/h ($summary)"
fi
finish below_min "benchmark below_min: $(fmt_milli "$rate_m" 1) < $(fmt_milli "$min_m" 1) proofs/h ($summary)"
