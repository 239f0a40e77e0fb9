#!/usr/bin/env bash
# shellcheck disable=SC2329  # on_exit/on_signal and their helpers run from traps
# benchmark.sh - PoRep C2 benchmark for cuzk.
#
# 1. daemon_start  start cuzk-daemon (log: var/log/vastui/cuzk.log), wait for "cuzk-daemon ready"
# 2. warmup        one PoRep proof (loads the SRS, triggers the background PCE extraction)
# 3. pce           wait for "PCE saved to disk" + "background PCE extraction complete", restart the
#                  daemon so it loads the PCE from disk ("PCE loaded from disk"), preload the SRS
# 4. timed_run     BENCH_PROOFS sequential proofs, one `cuzk-bench single` each; each proof's
#                  time is cuzk-bench's own "wall time: N ms"; rate = completed*3600/sum(seconds)
# 5. done          compare with MIN_RATE
#
# Always leaves var/lib/vastui/bench-result.json (EXIT trap), whatever happens.
# Exit codes: 0 pass, 10 below_min, 11 aborted_early, 12 error, 13 timeout.
# See worker-image/README.md for the full contract.

set -uo pipefail

# shellcheck source=vastui-lib.sh disable=SC1091  # the lib sits next to the script
. "${BASH_SOURCE[0]%/*}/vastui-lib.sh"
export LC_ALL=C

R="${WORKER_ROOT:-/}"
R="${R%/}"
LOG_DIR="$R/var/log/vastui"
STATE_DIR="$R/var/lib/vastui"
RUN_DIR="$R/run"
CUZK_LOG="$LOG_DIR/cuzk.log"
RESULT_FILE="$STATE_DIR/bench-result.json"
WORK_DIR="$STATE_DIR/bench"
PARAM_DIR="$R/data/zk/params"
CUZK_CONFIG="$STATE_DIR/cuzk.toml"
DAEMON_PID_FILE="$RUN_DIR/cuzk-daemon.pid"
export FIL_PROOFS_PARAMETER_CACHE="${FIL_PROOFS_PARAMETER_CACHE:-$R/var/tmp/filecoin-proof-parameters}"

MIN_RATE="${MIN_RATE:-0}"
BENCH_PROOFS="${BENCH_PROOFS:-12}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-2400}"
BENCH_C1="${BENCH_C1:-$R/usr/local/share/vastui/c1.json}"
BENCH_C1_URL="${BENCH_C1_URL:-}"
BENCH_EARLY_ABORT="${BENCH_EARLY_ABORT:-1}"
BENCH_POLL_INTERVAL="${BENCH_POLL_INTERVAL:-0.2}"
CUZK_LISTEN="${CUZK_LISTEN:-127.0.0.1:9820}"
CUZK_STATUS_ADDR="${CUZK_STATUS_ADDR:-127.0.0.1:9821}"

ERR_RE='ERROR|[Pp]anic|panicked|[Ee]rror:|FAILED|[Oo]ut of memory|CUDA error|[Ff]atal|FATAL|Segmentation fault|core dumped|Killed|Traceback'
NOISE_RE='paramfetch|^\[#[0-9a-fA-F]+ | DL:[0-9]|ETA:'
MAX_TAIL=20

# ------------------------------------------------------------------ state
outcome=""
stage="daemon_start"
reason=""
exit_code=12
completed=0
failed=0
sum_ms=0
min_ms=0
proof_ms=()
warmup_ms=""
pce_loaded=false
extra_errors=()
daemon_pid=""
daemon_offset=0
bench_offset=0
child_pid=""
started_at="$EPOCHREALTIME"
NOW_MS=0

say() { printf '[bench] %s\n' "$*"; }

now_ms() {
  local t="${EPOCHREALTIME/./}"
  NOW_MS=$((10#$t / 1000))
}


# "29.5" -> 29500 (thousandths); fails on anything that is not a plain decimal.
to_milli() {
  local v=$1 int frac
  [[ $v =~ ^([0-9]*)(\.([0-9]*))?$ && -n "${BASH_REMATCH[1]}${BASH_REMATCH[3]}" ]] || return 1
  int=${BASH_REMATCH[1]:-0}
  frac="${BASH_REMATCH[3]}000"
  frac=${frac:0:3}
  printf '%d' $((10#$int * 1000 + 10#$frac))
}

# 31412 -> "31.412"; with a second argument 1 -> "31.4" (rounded).
fmt_milli() {
  local v=$1 digits=${2:-3} t
  if ((digits == 1)); then
    t=$(((v + 50) / 100))
    printf '%d.%d' $((t / 10)) $((t % 10))
  else
    printf '%d.%03d' $((v / 1000)) $((v % 1000))
  fi
}

strip_ansi() { sed -E $'s/\x1b\\[[0-9;?]*[A-Za-z]//g; s/\r$//; s/[[:space:]]+$//'; }

log_since() { tail -c +"$(($1 + 1))" -- "$CUZK_LOG" 2>/dev/null; }

log_has() { grep -qF -- "$2" < <(log_since "$1"); }


daemon_alive() { [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; }

daemon_exit_status() {
  local rc=0
  [[ -n $daemon_pid ]] || { printf 'n/a'; return; }
  wait "$daemon_pid" 2>/dev/null
  rc=$?
  printf '%d' "$rc"
}

collect_error_tail() {
  local budget=$((MAX_TAIL - ${#extra_errors[@]}))
  ((budget < 0)) && budget=0
  {
    log_since "$bench_offset"
    local f
    for f in "$WORK_DIR"/*.out; do
      [[ -f $f ]] && cat -- "$f"
    done
  } | strip_ansi | grep -E -- "$ERR_RE" | grep -Ev -- "$NOISE_RE" | cut -c1-500 | uniq | tail -n "$budget"
  if ((${#extra_errors[@]} > 0)); then
    printf '%s\n' "${extra_errors[@]}"
  fi
}

write_result() {
  local tmp="$RESULT_FILE.tmp.$$" rate="null" min="null" secs="" tail_json="" line first=1 ms
  local -a tail_lines=()
  if ((completed > 0 && sum_ms > 0)); then
    rate=$(fmt_milli $((completed * 3600000000 / sum_ms)))
  fi
  if min_m=$(to_milli "$MIN_RATE"); then min=$(fmt_milli "$min_m"); fi
  for ms in "${proof_ms[@]}"; do
    secs+="${secs:+,}$(fmt_milli "$ms")"
  done
  mapfile -t tail_lines < <(collect_error_tail)
  for line in "${tail_lines[@]}"; do
    [[ -n $line ]] || continue
    if ((first)); then first=0; else tail_json+=","; fi
    tail_json+=$(json_str "$line")
  done
  local warm="null"
  [[ -n $warmup_ms ]] && warm=$(fmt_milli "$warmup_ms")
  local bench_n="$BENCH_PROOFS"
  if [[ $bench_n =~ ^[0-9]{1,9}$ ]]; then bench_n=$((10#$bench_n)); else bench_n=null; fi
  mkdir -p -- "$STATE_DIR"
  printf '{"outcome":%s,"stage":%s,"reason":%s,"rate_per_hour":%s,"min_rate":%s,"bench_proofs":%s,"proofs_completed":%d,"proofs_failed":%d,"proof_seconds":[%s],"warmup_seconds":%s,"pce_loaded":%s,"exit_code":%d,"started_at":%s,"finished_at":%s,"error_tail":[%s]}\n' \
    "$(json_str "$outcome")" "$(json_str "$stage")" "$(json_str "$reason")" "$rate" "$min" \
    "$bench_n" "$completed" "$failed" "$secs" "$warm" "$pce_loaded" "$exit_code" \
    "$started_at" "$EPOCHREALTIME" "$tail_json" >"$tmp" && mv -f -- "$tmp" "$RESULT_FILE"
}

kill_child() {
  if [[ -n $child_pid ]]; then
    kill -TERM "$child_pid" 2>/dev/null
    wait "$child_pid" 2>/dev/null
    child_pid=""
  fi
}

stop_daemon() {
  [[ -n $daemon_pid ]] || return 0
  if kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid" 2>/dev/null
    local i
    for ((i = 0; i < 50; i++)); do
      kill -0 "$daemon_pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$daemon_pid" 2>/dev/null
  fi
  wait "$daemon_pid" 2>/dev/null
  daemon_pid=""
  rm -f -- "$DAEMON_PID_FILE"
}

on_exit() {
  local rc=$?
  trap - EXIT TERM INT HUP
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
  kill_child
  stop_daemon
  write_result
  local shown="n/a" min_shown="$MIN_RATE" m
  if ((completed > 0 && sum_ms > 0)); then
    shown=$(fmt_milli $((completed * 3600000000 / sum_ms)) 1)
  fi
  if m=$(to_milli "$MIN_RATE"); then min_shown=$(fmt_milli "$m" 1); fi
  [[ -n $reason ]] && say "reason: $reason"
  local verdict="${outcome^^}"
  printf 'RESULT: %s proofs/hour (min %s) %s\n' "$shown" "$min_shown" "$verdict"
  exit "$exit_code"
}

on_signal() {
  outcome=error
  reason="benchmark interrupted by SIG$1"
  extra_errors+=("benchmark.sh received SIG$1 during stage $stage")
  exit 12
}

trap on_exit EXIT
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
trap 'on_signal HUP' HUP

finish() {
  outcome=$1
  reason=$2
  exit 0 # the EXIT trap maps the outcome to the exit code and writes the result
}

check_deadline() {
  now_ms
  if ((NOW_MS >= deadline_ms)); then
    finish timeout "benchmark timeout: exceeded ${BENCH_TIMEOUT} s during $stage"
  fi
}

# Runs cuzk-bench with its output in $WORK_DIR/$1, bounded by the overall deadline.
# Sets BENCH_RC. Runs in the background so signals are handled at once.
BENCH_RC=0
run_bench() {
  local out="$WORK_DIR/$1" rem
  shift
  check_deadline
  rem=$(((deadline_ms - NOW_MS + 999) / 1000))
  timeout -k 5 "$rem" cuzk-bench --addr "http://$CUZK_LISTEN" "$@" >"$out" 2>&1 &
  child_pid=$!
  wait "$child_pid"
  BENCH_RC=$?
  child_pid=""
  if ((BENCH_RC == 124 || BENCH_RC == 137)); then
    check_deadline
  fi
}

write_cuzk_config() {
  mkdir -p -- "$PARAM_DIR" "$(dirname -- "$CUZK_CONFIG")"
  {
    printf '# generated by benchmark.sh\n[daemon]\nlisten = %s\nstatus_listen = %s\n\n' \
      "$(json_str "$CUZK_LISTEN")" "$(json_str "$CUZK_STATUS_ADDR")"
    printf '[srs]\nparam_cache = %s\n\n' "$(json_str "$PARAM_DIR")"
    printf '[memory]\ntotal_budget = "auto"\nsafety_margin = "5GiB"\n\n[logging]\nlevel = "info"\n'
  } >"$CUZK_CONFIG"
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

start_daemon() {
  daemon_offset=$(file_size "$CUZK_LOG")
  cuzk-daemon --config "$CUZK_CONFIG" --listen "$CUZK_LISTEN" >>"$CUZK_LOG" 2>&1 &
  daemon_pid=$!
  printf '%s\n' "$daemon_pid" >"$DAEMON_PID_FILE"
  say "cuzk-daemon started (pid $daemon_pid), waiting for it to be ready"
  while ! log_has "$daemon_offset" "cuzk-daemon ready"; do
    if ! daemon_alive; then
      finish error "cuzk-daemon exited during startup (status $(daemon_exit_status))"
    fi
    check_deadline
    sleep "$BENCH_POLL_INTERVAL"
  done
  say "cuzk-daemon ready"
}

proof_failed() { # $1 = output file name, $2 = rc
  (($2 != 0)) && return 0
  grep -qE '^status:[[:space:]]*(FAILED|CANCELLED|TIMEOUT|UNKNOWN)' -- "$WORK_DIR/$1" && return 0
  return 1
}

wall_ms_of() {
  sed -nE 's/^wall time:[[:space:]]*([0-9]+)[[:space:]]*ms.*/\1/p' -- "$WORK_DIR/$1" | tail -n 1
}

# ------------------------------------------------------------------ main
mkdir -p -- "$LOG_DIR" "$STATE_DIR" "$RUN_DIR" "$WORK_DIR" "$PARAM_DIR"
rm -f -- "$RESULT_FILE" "$WORK_DIR"/*.out
touch -- "$CUZK_LOG"
bench_offset=$(file_size "$CUZK_LOG")
now_ms
start_ms=$NOW_MS

if [[ $BENCH_TIMEOUT =~ ^[0-9]{1,9}$ ]]; then BENCH_TIMEOUT=$((10#$BENCH_TIMEOUT)); fi
if [[ $BENCH_PROOFS =~ ^[0-9]{1,9}$ ]]; then BENCH_PROOFS=$((10#$BENCH_PROOFS)); fi
if ! [[ $BENCH_TIMEOUT =~ ^[0-9]+$ ]] || ((BENCH_TIMEOUT == 0)); then
  BENCH_TIMEOUT=2400
  deadline_ms=$((start_ms + BENCH_TIMEOUT * 1000))
  finish error "invalid BENCH_TIMEOUT (want whole seconds > 0)"
fi
deadline_ms=$((start_ms + BENCH_TIMEOUT * 1000))
if ! [[ $BENCH_PROOFS =~ ^[0-9]+$ ]] || ((BENCH_PROOFS == 0)); then
  finish error "invalid BENCH_PROOFS (want an integer > 0)"
fi
min_m=$(to_milli "$MIN_RATE") || finish error "invalid MIN_RATE (want a decimal number)"

say "PoRep C2 benchmark for cuzk: ${BENCH_PROOFS} proofs, min rate ${MIN_RATE} proofs/h, timeout ${BENCH_TIMEOUT} s"

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
for bin in cuzk-daemon cuzk-bench; do
  command -v "$bin" >/dev/null || {
    extra_errors+=("error: $bin not found on PATH")
    finish error "$bin not found"
  }
done

# 1. daemon_start
write_cuzk_config
link_params
start_daemon

# 2. warmup
stage=warmup
say "warmup proof (SRS load + PCE extraction)"
run_bench 00-warmup.out single -t porep --c1 "$BENCH_C1"
cat -- "$WORK_DIR/00-warmup.out"
if proof_failed 00-warmup.out "$BENCH_RC"; then
  daemon_alive || finish error "cuzk-daemon died during warmup (status $(daemon_exit_status))"
  finish error "warmup proof failed (cuzk-bench exit $BENCH_RC)"
fi
warmup_ms=$(wall_ms_of 00-warmup.out)

# 3. pce
stage=pce
if [[ ${CUZK_DISABLE_PCE:-0} == 1 ]]; then
  say "PCE disabled (CUZK_DISABLE_PCE=1), skipping the PCE wait"
elif log_has "$daemon_offset" "PCE loaded from disk"; then
  say "PCE already on disk"
else
  say "waiting for the background PCE extraction to finish and be saved"
  until log_has "$daemon_offset" "PCE saved to disk" &&
    log_has "$daemon_offset" "background PCE extraction complete"; do
    daemon_alive || finish error "cuzk-daemon died during PCE extraction (status $(daemon_exit_status))"
    check_deadline
    sleep "$BENCH_POLL_INTERVAL"
  done
  say "PCE saved to disk"
fi
say "restarting cuzk-daemon to load the PCE from disk"
stop_daemon
start_daemon
run_bench 01-preload.out preload -c porep-32g
cat -- "$WORK_DIR/01-preload.out"
daemon_alive || finish error "cuzk-daemon died while loading the SRS/PCE (status $(daemon_exit_status))"
if log_has "$daemon_offset" "PCE loaded from disk"; then
  pce_loaded=true
  say "PCE loaded from disk"
else
  say "warning: the daemon did not report loading the PCE from disk"
fi

# 4. timed_run
stage=timed_run
say "timed run: ${BENCH_PROOFS} sequential proofs"
for ((i = 1; i <= BENCH_PROOFS; i++)); do
  printf -v name 'p%04d.out' "$i"
  run_bench "$name" single -t porep --c1 "$BENCH_C1"
  cat -- "$WORK_DIR/$name"
  ms=$(wall_ms_of "$name")
  if proof_failed "$name" "$BENCH_RC" || [[ -z $ms ]]; then
    failed=$((failed + 1))
    say "proof $i/${BENCH_PROOFS} FAILED (cuzk-bench exit $BENCH_RC)"
    daemon_alive || finish error "cuzk-daemon died during the timed run (status $(daemon_exit_status))"
    ((failed > 2)) && finish error "too many failed proofs ($failed of $i)"
  else
    completed=$((completed + 1))
    proof_ms+=("$ms")
    sum_ms=$((sum_ms + ms))
    ((min_ms == 0 || ms < min_ms)) && min_ms=$ms
    say "proof $i/${BENCH_PROOFS}: $(fmt_milli "$ms") s, running rate $(fmt_milli $((completed * 3600000000 / sum_ms)) 1) proofs/h"
  fi
  remaining=$((BENCH_PROOFS - i))
  if [[ $BENCH_EARLY_ABORT == 1 ]] && ((remaining > 0 && min_m > 0 && completed > 0)); then
    best=$(((completed + remaining) * 3600000000 / (sum_ms + remaining * min_ms)))
    if ((best < min_m)); then
      finish aborted_early "benchmark aborted_early: best case $(fmt_milli "$best" 1) < $(fmt_milli "$min_m" 1) proofs/h after $i proofs"
    fi
  fi
done

# 5. done
stage="done"
if ((completed == 0)); then
  finish error "no proof completed"
fi
rate_m=$((completed * 3600000000 / sum_ms))
if ((rate_m >= min_m)); then
  finish pass "benchmark pass: $(fmt_milli "$rate_m" 1) >= $(fmt_milli "$min_m" 1) proofs/h"
fi
finish below_min "benchmark below_min: $(fmt_milli "$rate_m" 1) < $(fmt_milli "$min_m" 1) proofs/h"
