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

# shellcheck source=vastui-lib.sh disable=SC1091  # the lib sits next to the script
. "${BASH_SOURCE[0]%/*}/vastui-lib.sh"
export LC_ALL=C

R="${WORKER_ROOT:-/}"
R="${R%/}"
BIN_DIR="$R/usr/local/bin"
LOG_DIR="$R/var/log/vastui"
STATE_DIR="$R/var/lib/vastui"
RUN_DIR="$R/run"
EVENTS="$STATE_DIR/events.jsonl"
STATUS="$STATE_DIR/status.json"
RESULT_FILE="$STATE_DIR/bench-result.json"
PARAM_DIR="$R/data/zk/params"
CUZK_CONFIG="$STATE_DIR/cuzk.toml"
CUZK_LOG="$LOG_DIR/cuzk.log"
CURIO_LOG="$LOG_DIR/curio.log"
export FIL_PROOFS_PARAMETER_CACHE="${FIL_PROOFS_PARAMETER_CACHE:-$R/var/tmp/filecoin-proof-parameters}"

VASTUI_IMAGE="${VASTUI_IMAGE:-unknown}"
VASTUI_IMAGE_DIGEST="${VASTUI_IMAGE_DIGEST:-unknown}"
SETUP_TUNNEL_WAIT="${SETUP_TUNNEL_WAIT:-300}"
PARAMFETCH_CMD="${PARAMFETCH_CMD:-curio fetch-params 32GiB}"
PARAMFETCH_TIMEOUT="${PARAMFETCH_TIMEOUT:-5400}"
PARAMFETCH_PROGRESS_INTERVAL="${PARAMFETCH_PROGRESS_INTERVAL:-30}"
CUZK_READY_TIMEOUT="${CUZK_READY_TIMEOUT:-600}"
export CUZK_LISTEN="${CUZK_LISTEN:-127.0.0.1:9820}"
export CUZK_STATUS_ADDR="${CUZK_STATUS_ADDR:-127.0.0.1:9821}"
POLL=0.2

ERR_RE='ERROR|[Pp]anic|panicked|[Ee]rror:|FAILED|[Oo]ut of memory|CUDA error|[Ff]atal|FATAL|Segmentation fault|core dumped|Killed|Traceback'
PROGRESS_RE='^\[#[0-9a-fA-F]+ | DL:[0-9]|ETA:'

stage="init"
stage_started_at="$EPOCHREALTIME"
children=()
NOW_S=0

now_s() { NOW_S=${EPOCHREALTIME%.*}; }


slog() { # stage-log: slog STAGE MESSAGE...
  local st=$1
  shift
  printf '%s [entrypoint] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >>"$LOG_DIR/$st.log"
}


# JSON array of the last meaningful error lines of FILE after byte OFFSET.
# $3 = extra exclusion regex (ERE), may be empty.
error_tail_json() {
  local file=$1 offset=$2 exclude=${3:-} line out="" first=1
  local -a lines=()
  mapfile -t lines < <(
    tail -c +"$((offset + 1))" -- "$file" 2>/dev/null |
      sed -E $'s/\x1b\\[[0-9;?]*[A-Za-z]//g; s/\r$//; s/[[:space:]]+$//' |
      grep -E -- "$ERR_RE" | grep -Ev -- "${exclude:-$PROGRESS_RE}" | cut -c1-500 | uniq | tail -n 20
  )
  for line in "${lines[@]}"; do
    [[ -n $line ]] || continue
    if ((first)); then first=0; else out+=","; fi
    out+=$(json_str "$line")
  done
  printf '[%s]' "$out"
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

# Interruptible sleep (signals are handled at once).
nap() {
  sleep "$1" &
  wait $! 2>/dev/null
}

lotus_addr() {
  local addr="${LOTUS_API_ADDR:-127.0.0.1:1234}" f="$RUN_DIR/lotus-api-addr" content
  if [[ -s $f ]]; then
    content=$(tr -d '[:space:]' <"$f")
    [[ -n $content ]] && addr=$content
  fi
  printf '%s' "$addr"
}

write_cuzk_config() {
  mkdir -p -- "$PARAM_DIR"
  {
    printf '# generated by entrypoint.sh\n[daemon]\nlisten = %s\nstatus_listen = %s\n\n' \
      "$(json_str "$CUZK_LISTEN")" "$(json_str "$CUZK_STATUS_ADDR")"
    printf '[srs]\nparam_cache = %s\n\n' "$(json_str "$PARAM_DIR")"
    printf '[memory]\ntotal_budget = "auto"\nsafety_margin = "5GiB"\n\n[logging]\nlevel = "info"\n'
  } >"$CUZK_CONFIG"
}

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
  now_s
  started=$NOW_S
  last_emit=$NOW_S
  while kill -0 "$pid" 2>/dev/null; do
    nap "$POLL"
    now_s
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
  "$BIN_DIR/benchmark.sh" >>"$log" 2>&1 &
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

stage_prove() {
  start_stage prove
  local daemon_offset curio_offset daemon_pid curio_pid waited=0 rc
  write_cuzk_config
  printf '%s\n' "$CUZK_STATUS_ADDR" >"$RUN_DIR/cuzk-status-addr"
  daemon_offset=$(file_size "$CUZK_LOG")
  cuzk-daemon --config "$CUZK_CONFIG" --listen "$CUZK_LISTEN" >>"$CUZK_LOG" 2>&1 &
  daemon_pid=$!
  children+=("$daemon_pid")
  printf '%s\n' "$daemon_pid" >"$RUN_DIR/cuzk-daemon.pid"
  now_s
  waited=$NOW_S
  until grep -qF "cuzk-daemon ready" < <(tail -c +"$((daemon_offset + 1))" -- "$CUZK_LOG"); do
    if ! kill -0 "$daemon_pid" 2>/dev/null; then
      wait "$daemon_pid"
      rc=$?
      fail_plain "cuzk-daemon exited during startup (status $rc)" \
        "$(error_tail_json "$CUZK_LOG" "$daemon_offset")"
    fi
    now_s
    if ((NOW_S - waited >= CUZK_READY_TIMEOUT)); then
      fail_plain "cuzk-daemon not ready after ${CUZK_READY_TIMEOUT} s" \
        "$(error_tail_json "$CUZK_LOG" "$daemon_offset")"
    fi
    nap "$POLL"
  done
  emit_event prove progress "\"detail\":\"cuzk-daemon ready\""
  curio_offset=$(file_size "$CURIO_LOG")
  curio run >>"$CURIO_LOG" 2>&1 &
  curio_pid=$!
  children+=("$curio_pid")
  printf '%s\n' "$curio_pid" >"$RUN_DIR/curio.pid"
  emit_event prove progress "\"detail\":\"running\""
  slog prove "cuzk-daemon (pid $daemon_pid) and curio (pid $curio_pid) running"
  while :; do
    if ! kill -0 "$daemon_pid" 2>/dev/null; then
      wait "$daemon_pid"
      rc=$?
      fail_plain "cuzk-daemon exited (status $rc)" "$(error_tail_json "$CUZK_LOG" "$daemon_offset")"
    fi
    if ! kill -0 "$curio_pid" 2>/dev/null; then
      wait "$curio_pid"
      rc=$?
      fail_plain "curio exited (status $rc)" "$(error_tail_json "$CURIO_LOG" "$curio_offset")"
    fi
    nap 1
  done
}

# ------------------------------------------------------------------ main
# Whole seconds only (never let an env value reach bash arithmetic unchecked).
int_or() { if [[ $1 =~ ^[0-9]{1,9}$ ]]; then printf '%d' $((10#$1)); else printf '%d' "$2"; fi; }
SETUP_TUNNEL_WAIT=$(int_or "$SETUP_TUNNEL_WAIT" 300)
PARAMFETCH_TIMEOUT=$(int_or "$PARAMFETCH_TIMEOUT" 5400)
PARAMFETCH_PROGRESS_INTERVAL=$(int_or "$PARAMFETCH_PROGRESS_INTERVAL" 30)
CUZK_READY_TIMEOUT=$(int_or "$CUZK_READY_TIMEOUT" 600)
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
