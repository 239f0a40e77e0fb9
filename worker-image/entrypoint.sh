#!/usr/bin/env bash
# shellcheck disable=SC2329  # on_signal and its helpers run from traps
# entrypoint.sh - vastui worker: setup -> paramfetch -> benchmark -> prove.
#
# Vast runs the image in ssh mode; the onstart command backgrounds this script. Each stage logs
# to its own file under var/log/vastui/, every stage change appends one JSON event to
# var/lib/vastui/events.jsonl and rewrites var/lib/vastui/status.json. A failed stage emits a
# "fail" event (reason + error_tail) and the script exits non-zero; later stages never start.
# See worker-image/README.md for the contract. Never prints environment values (secrets).

set -uo pipefail
export LC_ALL=C

R="${WORKER_ROOT:-/}"
R="${R%/}"
BIN_DIR="$R/usr/local/bin"
LOG_DIR="$R/var/log/vastui"
STATE_DIR="$R/var/lib/vastui"
RUN_DIR="$R/run"
CUZK_LOG="$LOG_DIR/cuzk.log"

# shellcheck source=vastui-lib.sh disable=SC1091  # the lib sits next to the script
. "${BASH_SOURCE[0]%/*}/vastui-lib.sh"

EVENTS="$STATE_DIR/events.jsonl"
STATUS="$STATE_DIR/status.json"
RESULT_FILE="$STATE_DIR/bench-result.json"
PARAM_DIR="$R/data/zk/params"
CUZK_CONFIG="$STATE_DIR/cuzk.toml"
CURIO_LOG="$LOG_DIR/curio.log"
export FIL_PROOFS_PARAMETER_CACHE="${FIL_PROOFS_PARAMETER_CACHE:-$R/var/tmp/filecoin-proof-parameters}"

VASTUI_IMAGE="${VASTUI_IMAGE:-unknown}"
VASTUI_IMAGE_DIGEST="${VASTUI_IMAGE_DIGEST:-unknown}"
SETUP_TUNNEL_WAIT="${SETUP_TUNNEL_WAIT:-300}"
PARAMFETCH_CMD="${PARAMFETCH_CMD:-curio fetch-params 32GiB}"
PARAMFETCH_TIMEOUT="${PARAMFETCH_TIMEOUT:-5400}"
PARAMFETCH_PROGRESS_INTERVAL="${PARAMFETCH_PROGRESS_INTERVAL:-30}"
CUZK_READY_TIMEOUT="${CUZK_READY_TIMEOUT:-600}"
CURIO_READY_TIMEOUT="${CURIO_READY_TIMEOUT:-600}"
export CUZK_LISTEN="${CUZK_LISTEN:-127.0.0.1:9820}"
export CUZK_STATUS_ADDR="${CUZK_STATUS_ADDR:-127.0.0.1:9821}"
# The proofs production curio keeps in flight ([Cuzk] MaxPending, deps/config/types.go); the
# benchmark measures at the same concurrency.
export CUZK_MAX_PENDING="${CUZK_MAX_PENDING:-10}"
CUZK_PROVE_TIMEOUT="${CUZK_PROVE_TIMEOUT:-30m}"
CURIO_CUZK_LAYER="${CURIO_CUZK_LAYER:-vastui-cuzk}"
CURIO_EXTRA_LAYERS="${CURIO_EXTRA_LAYERS:-}"
CURIO_PROOFSHARE="${CURIO_PROOFSHARE:-1}"
POLL=0.2

stage="init"
stage_started_at="$EPOCHREALTIME"
children=()
NOW_S=0

now_s() { NOW_S=${EPOCHREALTIME%.*}; } # real seconds: a tunnel is a real-time matter
clock_s() { clock_ms; NOW_S=$((CLOCK_MS / 1000)); } # the worker's clock (see vastui-lib.sh)


slog() { # stage-log: slog STAGE MESSAGE...
  local st=$1
  shift
  printf '%s [entrypoint] %s\n' "$(now_iso)" "$*" >>"$LOG_DIR/$st.log"
}


# JSON array of the last meaningful error lines of FILE after byte OFFSET (error_lines).
error_tail_json() {
  tail -c +"$(($2 + 1))" -- "$1" 2>/dev/null | error_lines | awk '!seen[$0]++' | tail -n 20 | json_lines
}

# emit_event STAGE EVENT [EXTRA_JSON_MEMBERS]
emit_event() {
  local extra=${3:-}
  printf '{"ts":%s,"stage":%s,"event":%s%s}\n' "${EVENT_TS:-$EPOCHREALTIME}" "$(json_str "$1")" \
    "$(json_str "$2")" "${extra:+,$extra}" >>"$EVENTS"
}

# write_status STATE [REASON_JSON]
write_status() {
  local state=$1 reason=${2:-null} tmp="$STATUS.tmp.$$"
  printf '{"stage":%s,"state":%s,"stage_started_at":%s,"reason":%s,"updated_at":%s,"image":{"name":%s,"digest":%s},"pid":%d}\n' \
    "$(json_str "$stage")" "$(json_str "$state")" "$stage_started_at" "$reason" \
    "$EPOCHREALTIME" "$(json_str "$VASTUI_IMAGE")" "$(json_str "$VASTUI_IMAGE_DIGEST")" "$$" \
    >"$tmp" && mv -f -- "$tmp" "$STATUS"
}

start_stage() {
  stage=$1
  stage_started_at="$EPOCHREALTIME"
  write_status running
  EVENT_TS=$stage_started_at emit_event "$stage" start
  slog "$stage" "stage $stage start"
}

ok_stage() {
  local dur
  dur=$(elapsed_since "$stage_started_at")
  emit_event "$stage" ok "\"duration_s\":$dur${1:+,$1}"
  write_status ok
  slog "$stage" "stage $stage ok (${dur} s)"
}

elapsed_since() { # seconds (3 decimals) since an EPOCHREALTIME value
  local a=${1/./} b=${EPOCHREALTIME/./} d
  d=$(((10#$b - 10#$a) / 1000))
  printf '%d.%03d' $((d / 1000)) $((d % 1000))
}

# fail_stage REASON_JSON ERROR_TAIL_JSON EXIT_CODE
fail_stage() {
  emit_event "$stage" fail "\"reason\":$1,\"error_tail\":$2"
  write_status failed "$1"
  slog "$stage" "stage $stage FAILED"
  stop_children
  exit "${3:-1}"
}

fail_plain() { fail_stage "$(json_str "$1")" "${2:-[]}" "${3:-1}"; }

stop_children() {
  local pid i
  for pid in "${children[@]}"; do
    kill -TERM "$pid" 2>/dev/null
  done
  for pid in "${children[@]}"; do
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  children=()
  # The prove stage's daemon is not our child (its supervisor is): stop it by its pid file.
  if [[ $stage == prove && -s $DAEMON_PID_FILE ]]; then
    DAEMON_PID=$(<"$DAEMON_PID_FILE")
    [[ $DAEMON_PID =~ ^[0-9]+$ ]] && daemon_stop
  fi
}

on_signal() {
  trap - TERM INT HUP
  local sig=$1
  if [[ $stage != init ]]; then
    emit_event "$stage" fail "\"reason\":$(json_str "entrypoint stopped by SIG$sig"),\"error_tail\":[$(json_str "entrypoint.sh received SIG$sig")]"
    write_status failed "$(json_str "entrypoint stopped by SIG$sig")"
  fi
  stop_children
  rm -f -- "$RUN_DIR/entrypoint.pid"
  exit $((128 + $2))
}
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT
trap 'on_signal HUP 1' HUP

lotus_addr() { forward_addr 1234 "${LOTUS_API_ADDR:-127.0.0.1:1234}" "$RUN_DIR/lotus-api-addr"; }

# ------------------------------------------------------------------ stages

stage_setup() {
  start_stage setup
  slog setup "image ${VASTUI_IMAGE} digest ${VASTUI_IMAGE_DIGEST}"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L >>"$LOG_DIR/setup.log" 2>&1
  fi
  local bin
  for bin in cuzk-daemon cuzk-bench curio; do
    if ! command -v "$bin" >/dev/null; then
      slog setup "error: $bin not found on PATH"
      fail_plain "missing binary: $bin" "[$(json_str "error: $bin not found on PATH")]"
    fi
  done
  if [[ ! -x $BIN_DIR/benchmark.sh ]]; then
    fail_plain "missing binary: benchmark.sh" "[$(json_str "error: $BIN_DIR/benchmark.sh not found")]"
  fi

  local deadline addr out errf="$RUN_DIR/setup-curl.err" attempt=0 last_err="" version=""
  local body='{"jsonrpc":"2.0","method":"Filecoin.Version","params":[],"id":1}'
  now_s
  deadline=$((NOW_S + SETUP_TUNNEL_WAIT))
  while :; do
    attempt=$((attempt + 1))
    addr=$(lotus_addr)
    out=$(curl -sS --max-time 5 -H 'Content-Type: application/json' --data "$body" \
      "http://$addr/rpc/v1" 2>"$errf")
    local rc=$?
    out="${out#"${out%%[![:space:]]*}"}"
    if ((rc == 0)) && [[ $out == "{"* && $out == *'"result"'* ]]; then
      [[ $out =~ \"Version\":\"([^\"]*)\" ]] && version=${BASH_REMATCH[1]}
      slog setup "Lotus API answered through the tunnel at $addr (version ${version:-unknown})"
      break
    fi
    if ((rc != 0)); then
      last_err="$(tr -d '\r' <"$errf" | tail -n 1)"
      [[ -n $last_err ]] || last_err="curl exit $rc"
    else
      last_err="error: unexpected answer from http://$addr/rpc/v1: ${out:0:200}"
    fi
    slog setup "attempt $attempt: Lotus API at $addr not answering: $last_err"
    now_s
    if ((NOW_S >= deadline)); then
      slog setup "error: lotus api unreachable through tunnel after ${SETUP_TUNNEL_WAIT} s"
      fail_plain "lotus api unreachable through tunnel" "[$(json_str "$last_err")]"
    fi
    nap 1
  done
  rm -f -- "$errf"
  ok_stage "\"lotus_addr\":$(json_str "$addr")"
}

stage_paramfetch() {
  start_stage paramfetch
  local log="$LOG_DIR/paramfetch.log" offset pid rc=0 last_emit pct="" last_pct="" started
  local -a cmd=()
  read -r -a cmd <<<"$PARAMFETCH_CMD"
  ((${#cmd[@]} > 0)) || fail_plain "paramfetch: PARAMFETCH_CMD is empty"
  offset=$(file_size "$log")
  mkdir -p -- "$FIL_PROOFS_PARAMETER_CACHE"
  "${cmd[@]}" >>"$log" 2>&1 &
  pid=$!
  children+=("$pid")
  clock_s
  started=$NOW_S
  last_emit=$NOW_S
  while kill -0 "$pid" 2>/dev/null; do
    nap "$POLL"
    clock_s
    if ((NOW_S - last_emit >= PARAMFETCH_PROGRESS_INTERVAL)); then
      last_emit=$NOW_S
      pct=$(tail -c +"$((offset + 1))" -- "$log" | grep -oE '\([0-9]{1,3}%\)' | tail -n 1 | tr -dc '0-9')
      if [[ -n $pct ]]; then
        emit_event paramfetch progress "\"percent\":$((10#$pct)),\"stalled\":$([[ $pct == "$last_pct" ]] && echo true || echo false)"
        last_pct=$pct
      fi
    fi
    if ((PARAMFETCH_TIMEOUT > 0 && NOW_S - started >= PARAMFETCH_TIMEOUT)); then
      fail_plain "paramfetch timeout after ${PARAMFETCH_TIMEOUT} s" \
        "$(error_tail_json "$log" "$offset")"
    fi
  done
  wait "$pid"
  rc=$?
  children=()
  if ((rc != 0)); then
    fail_plain "paramfetch failed (exit $rc)" "$(error_tail_json "$log" "$offset")"
  fi
  ok_stage
}

stage_benchmark() {
  start_stage benchmark
  local log="$LOG_DIR/benchmark.log" offset pid rc result reason tail_json outcome=""
  offset=$(file_size "$log")
  rm -f -- "$RESULT_FILE"
  BENCH_KEEP_DAEMON=1 "$BIN_DIR/benchmark.sh" >>"$log" 2>&1 &
  pid=$!
  children+=("$pid")
  wait "$pid"
  rc=$?
  children=()
  result=""
  [[ -s $RESULT_FILE ]] && result=$(tr -d '\n' <"$RESULT_FILE")
  if [[ $result != "{"*"}" ]]; then
    fail_plain "benchmark produced no result (exit $rc)" "$(error_tail_json "$log" "$offset")" 12
  fi
  emit_event benchmark result "\"result\":$result"
  [[ $result =~ \"outcome\":\"([a-z_]+)\" ]] && outcome=${BASH_REMATCH[1]}
  if [[ $outcome == pass ]]; then
    ok_stage
    return 0
  fi
  local re='"reason":"(([^"\\]|\\.)*)"'
  if [[ $result =~ $re && -n ${BASH_REMATCH[1]} ]]; then
    reason="\"${BASH_REMATCH[1]}\""
  else
    reason=$(json_str "benchmark ${outcome:-error} (exit $rc)")
  fi
  tail_json=${result#*\"error_tail\":}
  tail_json=${tail_json%\}}
  [[ $tail_json == "["*"]" ]] || tail_json="[]"
  ((rc != 0)) || rc=12
  fail_stage "$reason" "$tail_json" "$rc"
}

write_cuzk_config() {
  local budget='"auto"'
  memory_budget 5
  [[ -n $MEM_BUDGET_GIB ]] && budget="\"${MEM_BUDGET_GIB}GiB\""
  mkdir -p -- "$PARAM_DIR"
  {
    printf '# generated by entrypoint.sh (cuzk-core/src/config.rs keys)\n[daemon]\nlisten = %s\nstatus_listen = %s\n\n' \
      "$(json_str "$CUZK_LISTEN")" "$(json_str "$CUZK_STATUS_ADDR")"
    printf '[srs]\nparam_cache = %s\n\n' "$(json_str "$PARAM_DIR")"
    printf '[memory]\ntotal_budget = %s\nsafety_margin = "5GiB"\n\n[logging]\nlevel = "info"\n' "$budget"
  } >"$CUZK_CONFIG"
}

fail_daemon_exited() { # $1 = log offset
  local status
  status=$(daemon_exit_status 2) || status="?"
  fail_plain "$(daemon_exit_reason "$status")" "$(daemon_failure_tail "$1" "$status")"
}

# A daemon for production: the benchmark's, which keeps the PCE its warmup extracted (a new
# daemon would not load it from disk, cuzk-core/src/pipeline.rs), else a new one.
prove_daemon() {
  local offset
  if [[ -s $DAEMON_PID_FILE && ! -e $DAEMON_EXIT_FILE ]]; then
    DAEMON_PID=$(<"$DAEMON_PID_FILE")
    if [[ $DAEMON_PID =~ ^[0-9]+$ ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
      slog prove "cuzk-daemon of the benchmark (pid $DAEMON_PID) keeps serving, with its PCE in memory"
      emit_event prove progress "\"detail\":\"cuzk-daemon of the benchmark kept (pid $DAEMON_PID)\""
      return 0
    fi
  fi
  write_cuzk_config
  offset=$(file_size "$CUZK_LOG")
  daemon_launch "$CUZK_CONFIG"
  slog prove "cuzk-daemon started (pid $DAEMON_PID)"
  daemon_wait_ready "$offset" "$CUZK_READY_TIMEOUT" "$POLL"
  case $? in
    0) ;;
    1) fail_daemon_exited "$offset" ;;
    2) fail_plain "cuzk-daemon not ready after ${CUZK_READY_TIMEOUT} s" "$(daemon_failure_tail "$offset" "")" ;;
    *) fail_plain "cuzk-daemon logged ready but did not answer on $CUZK_LISTEN within ${CUZK_READY_TIMEOUT} s" \
      "$(daemon_failure_tail "$offset" "")" ;;
  esac
  emit_event prove progress "\"detail\":\"cuzk-daemon ready (pid $DAEMON_PID)\""
}

# curio reaches the cluster's database and the chain node through the controller's tunnels:
# YSQL and YCQL (CURIO_DB_* env, cmd/curio/main.go:108-186) and the Lotus API (FULLNODE_API_INFO
# wins over the base layer's [Apis] ChainApiInfo, deps/chainapi_resolve.go). Nothing here is
# printed: the password and the token are secrets.
curio_env() {
  local db cql lotus base token
  db=$(forward_addr 5433 "${CURIO_DB_HOST:-127.0.0.1}:${CURIO_DB_PORT:-5433}")
  cql=$(forward_addr 9042 "${CURIO_DB_HOST_CQL:-${CURIO_DB_HOST:-127.0.0.1}}:${CURIO_DB_CASSANDRA_PORT:-9042}")
  export CURIO_DB_HOST="${db%:*}" CURIO_DB_PORT="${db##*:}"
  export CURIO_DB_HOST_CQL="${cql%:*}" CURIO_DB_CASSANDRA_PORT="${cql##*:}"
  if [[ -z ${FULLNODE_API_INFO:-} ]]; then
    # The chain node's token from the cluster's base layer, pointed at the tunnel's end.
    lotus=$(lotus_addr)
    base=$(curio config get base 2>/dev/null) || base=""
    token=$(sed -nE 's/.*ChainApiInfo[[:space:]]*=[[:space:]]*\[[[:space:]]*"([A-Za-z0-9_.-]+):.*/\1/p' <<<"$base" | head -n 1)
    if [[ -n $token ]]; then
      export FULLNODE_API_INFO="$token:/ip4/${lotus%:*}/tcp/${lotus##*:}/http"
    fi
  fi
}

# The cluster database through the controller's tunnel, before curio needs it. The tunnel is
# the controller's SSH connection: an engine that restarts, or reconnects to the direct port Vast
# reported after the proxy, leaves it down for a moment, and one refused `curio config set`
# would otherwise end a worker that has just passed its benchmark. Waits like setup's Lotus
# check (SETUP_TUNNEL_WAIT), re-reading the forward's address on every attempt.
wait_curio_db() {
  local addr deadline attempt=0
  now_s
  deadline=$((NOW_S + SETUP_TUNNEL_WAIT))
  while :; do
    attempt=$((attempt + 1))
    addr=$(forward_addr 5433 "${CURIO_DB_HOST:-127.0.0.1}:${CURIO_DB_PORT:-5433}")
    # shellcheck disable=SC2016 # $1 and $2 are the inner shell's arguments
    if timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "${addr%:*}" "${addr##*:}" 2>/dev/null; then
      ((attempt == 1)) || slog prove "curio database answers through the tunnel at $addr"
      return 0
    fi
    slog prove "attempt $attempt: curio database at $addr not answering (tunnel down?)"
    now_s
    if ((NOW_S >= deadline)); then
      fail_plain "curio database unreachable through tunnel" \
        "[$(json_str "error: connect $addr refused for ${SETUP_TUNNEL_WAIT} s")]"
    fi
    nap 1
  done
}

# The layer that points curio at this worker's daemon, stored in the cluster database the way
# curio users do it: `curio config set --title NAME FILE` (cmd/curio/config.go:60-122).
curio_layer() {
  local file="$STATE_DIR/$CURIO_CUZK_LAYER.toml" out="$RUN_DIR/curio-config-set.out" rc
  {
    printf '# written by vastui entrypoint.sh for every worker (the same for all of them)\n'
    if [[ $CURIO_PROOFSHARE == 1 ]]; then
      printf '[Subsystems]\n  EnableProofShare = true\n\n'
    fi
    printf '[Cuzk]\n  Address = %s\n  MaxPending = %d\n  ProveTimeout = %s\n' \
      "$(json_str "$CUZK_LISTEN")" "$CUZK_MAX_PENDING" "$(json_str "$CUZK_PROVE_TIMEOUT")"
  } >"$file"
  curio config set --title "$CURIO_CUZK_LAYER" "$file" >"$out" 2>&1
  rc=$?
  cat -- "$out" >>"$CURIO_LOG"
  if ((rc != 0)); then
    fail_plain "curio config set failed (exit $rc)" "$(error_lines <"$out" | tail -n 20 | json_lines)"
  fi
  slog prove "curio layer $CURIO_CUZK_LAYER: [Cuzk] Address = $CUZK_LISTEN"
}

stage_prove() {
  start_stage prove
  local daemon_offset curio_offset curio_pid rc deadline layers
  daemon_offset=$(file_size "$CUZK_LOG")
  # workerctl cuzk-counters reports the daemon's error lines from here on, as this stage does
  printf '%s\n' "$daemon_offset" >"$RUN_DIR/cuzk-prove-offset"
  prove_daemon
  printf '%s\n' "$CUZK_STATUS_ADDR" >"$RUN_DIR/cuzk-status-addr"
  printf '%s\n' "$CUZK_LISTEN" >"$RUN_DIR/cuzk-listen-addr"
  wait_curio_db
  curio_env
  curio_layer
  layers="${CURIO_EXTRA_LAYERS:+$CURIO_EXTRA_LAYERS,}$CURIO_CUZK_LAYER"
  curio_offset=$(file_size "$CURIO_LOG")
  curio run --layers "$layers" >>"$CURIO_LOG" 2>&1 </dev/null &
  curio_pid=$!
  children+=("$curio_pid")
  printf '%s\n' "$curio_pid" >"$RUN_DIR/curio.pid"
  slog prove "curio run --layers $layers (pid $curio_pid)"
  # curio logs "cuzk proving daemon enabled" once its layers set [Cuzk] Address
  # (cmd/curio/tasks/tasks.go:180-185); without it, curio does not use cuzk at all.
  clock_ms
  deadline=$((CLOCK_MS + CURIO_READY_TIMEOUT * 1000))
  until grep -qF "cuzk proving daemon enabled" < <(tail -c +"$((curio_offset + 1))" -- "$CURIO_LOG"); do
    if ! kill -0 "$curio_pid" 2>/dev/null; then
      wait "$curio_pid"
      rc=$?
      fail_plain "curio exited (status $rc)" "$(error_tail_json "$CURIO_LOG" "$curio_offset")"
    fi
    daemon_alive || fail_daemon_exited "$daemon_offset"
    clock_ms
    if ((CLOCK_MS >= deadline)); then
      fail_plain "curio did not enable cuzk within ${CURIO_READY_TIMEOUT} s (no \"cuzk proving daemon enabled\" in its log)" \
        "$(error_tail_json "$CURIO_LOG" "$curio_offset")"
    fi
    nap "$POLL"
  done
  emit_event prove progress "\"detail\":\"running\""
  slog prove "cuzk-daemon (pid $DAEMON_PID) and curio (pid $curio_pid) running; curio uses cuzk"
  while :; do
    daemon_alive || fail_daemon_exited "$daemon_offset"
    if ! kill -0 "$curio_pid" 2>/dev/null; then
      wait "$curio_pid"
      rc=$?
      fail_plain "curio exited (status $rc)" "$(error_tail_json "$CURIO_LOG" "$curio_offset")"
    fi
    nap "$POLL"
  done
}

# ------------------------------------------------------------------ main
# Whole seconds only (never let an env value reach bash arithmetic unchecked).
SETUP_TUNNEL_WAIT=$(int_or "$SETUP_TUNNEL_WAIT" 300)
PARAMFETCH_TIMEOUT=$(int_or "$PARAMFETCH_TIMEOUT" 5400)
PARAMFETCH_PROGRESS_INTERVAL=$(int_or "$PARAMFETCH_PROGRESS_INTERVAL" 30)
CUZK_READY_TIMEOUT=$(int_or "$CUZK_READY_TIMEOUT" 600)
CURIO_READY_TIMEOUT=$(int_or "$CURIO_READY_TIMEOUT" 600)
CUZK_MAX_PENDING=$(int_or "$CUZK_MAX_PENDING" 10)
mkdir -p -- "$LOG_DIR" "$STATE_DIR" "$RUN_DIR" "$PARAM_DIR"
if [[ -s $RUN_DIR/entrypoint.pid ]]; then
  other=$(<"$RUN_DIR/entrypoint.pid")
  if [[ $other =~ ^[0-9]+$ && $other != "$$" ]] && kill -0 "$other" 2>/dev/null &&
    grep -qa entrypoint.sh "/proc/$other/cmdline" 2>/dev/null; then
    printf 'entrypoint.sh already running (pid %s)\n' "$other" >&2
    exit 0
  fi
fi
printf '%s\n' "$$" >"$RUN_DIR/entrypoint.pid"
write_status running

stage_setup
stage_paramfetch
stage_benchmark
stage_prove
