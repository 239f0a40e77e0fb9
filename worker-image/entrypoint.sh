#!/usr/bin/env bash
# shellcheck disable=SC2329  # on_signal and its helpers run from traps
# entrypoint.sh - vastui worker: setup -> paramfetch -> benchmark -> prove.
#
# Only the prove stage needs the controller (its tunnel: the Lotus API, curio's database): setup
# checks the machine, paramfetch and the benchmark use neither curio's cluster nor the chain, so
# a tunnel that is down costs no benchmark and is never the machine's fault.
#
# Vast runs the image in ssh mode; the onstart command backgrounds this script. Each stage logs
# to its own file under var/log/vastui/, every stage change appends one JSON event to
# var/lib/vastui/events.jsonl and rewrites var/lib/vastui/status.json. A failed stage emits a
# "fail" event (reason + error_tail) and the script exits non-zero; later stages never start.
# A container that Vast stopped and started again runs this from the top: it appends to the same
# events, skips a benchmark that passed on this same machine (benchmark-passed.json) and proves
# again as the same curio machine (README.md, Restarts).
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
signal_guard "$@"

EVENTS="$STATE_DIR/events.jsonl"
STATUS="$STATE_DIR/status.json"
RESULT_FILE="$STATE_DIR/bench-result.json"
# Written when the benchmark passes: its rate and what it was measured on (bench_marker_write). A
# container that Vast stopped and started again (an outbid interruptible instance: every process
# killed, the filesystem kept, the onstart command run again) skips the benchmark when it holds.
BENCH_MARKER="$STATE_DIR/benchmark-passed.json"
# Written when curio's fetch passed: the parameter files it checked, with their sizes
# (params_trusted: a restart need not hash them again).
PARAMS_CHECKED="$STATE_DIR/params-checked"
PARAM_DIR="$R/data/zk/params"
CUZK_CONFIG="$STATE_DIR/cuzk.toml"
CURIO_LOG="$LOG_DIR/curio.log"
export FIL_PROOFS_PARAMETER_CACHE="${FIL_PROOFS_PARAMETER_CACHE:-$R/var/tmp/filecoin-proof-parameters}"

VASTUI_IMAGE="${VASTUI_IMAGE:-unknown}"
VASTUI_IMAGE_DIGEST="${VASTUI_IMAGE_DIGEST:-unknown}"
# Seconds the prove stage waits for the controller's tunnel; 0 waits until the controller
# decides (it sees why: the worker reports the tunnel down, never a failure of the machine).
TUNNEL_WAIT="${TUNNEL_WAIT:-0}"
TUNNEL_REPORT_INTERVAL="${TUNNEL_REPORT_INTERVAL:-60}"
PARAMFETCH_CMD="${PARAMFETCH_CMD:-curio fetch-params 32GiB}"
PARAMFETCH_TIMEOUT="${PARAMFETCH_TIMEOUT:-5400}"
PARAMFETCH_PROGRESS_INTERVAL="${PARAMFETCH_PROGRESS_INTERVAL:-30}"
CUZK_READY_TIMEOUT="${CUZK_READY_TIMEOUT:-600}"
CURIO_READY_TIMEOUT="${CURIO_READY_TIMEOUT:-600}"
CURIO_MAX_RESTARTS="${CURIO_MAX_RESTARTS:-3}"
export CUZK_LISTEN="${CUZK_LISTEN:-127.0.0.1:9820}"
export CUZK_STATUS_ADDR="${CUZK_STATUS_ADDR:-127.0.0.1:9821}"
# The proofs production curio keeps in flight ([Cuzk] MaxPending, deps/config/types.go); the
# benchmark measures at the same concurrency.
export CUZK_MAX_PENDING="${CUZK_MAX_PENDING:-10}"
CUZK_PROVE_TIMEOUT="${CUZK_PROVE_TIMEOUT:-30m}"
CURIO_CUZK_LAYER="${CURIO_CUZK_LAYER:-vastui-cuzk}"
CURIO_EXTRA_LAYERS="${CURIO_EXTRA_LAYERS:-}"
CURIO_PROOFSHARE="${CURIO_PROOFSHARE:-1}"
CUZK_SAFETY_MARGIN_GIB="${CUZK_SAFETY_MARGIN_GIB:-5}"
# The worker's identity in curio's cluster (vastui/engine/identity.py): curio replaces an
# unspecified 0.0.0.0 with its database connection's address, 127.0.0.1 through the tunnel, and
# keys the machine by that host:port (deps/deps.go:291-305, harmony/resources/resources.go:81-99):
# every worker would be one machine. The controller gives each its own.
VASTUI_RUNNER_ID="${VASTUI_RUNNER_ID:-}"
CURIO_LISTEN_PORT_BASE="${CURIO_LISTEN_PORT_BASE:-12400}"
CURIO_LISTEN="${CURIO_LISTEN:-}"
CURIO_NODE_NAME="${CURIO_NODE_NAME:-}"
# CUDA 13's host driver (the image's CUDA_VERSION, worker-image/Dockerfile)
MIN_DRIVER_MAJOR="${MIN_DRIVER_MAJOR:-${VASTUI_REQUIRE_DRIVER:-580}}"
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
  stop_if_signalled
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
    kill -KILL "$pid" 2>/dev/null # not waited for: see kill_children in benchmark.sh
  done
  children=()
  # The prove stage's daemon is not our child (its supervisor is): stop it by its pid file.
  if [[ $stage == prove && -s $DAEMON_PID_FILE ]]; then
    DAEMON_PID=$(<"$DAEMON_PID_FILE")
    [[ $DAEMON_PID =~ ^[0-9]+$ ]] && daemon_stop
  fi
}

on_signal() {
  trap '' TERM INT HUP USR1 # the guard repeats a signal until we exit (vastui-lib.sh)
  local sig=$1
  if [[ $stage != init ]]; then
    emit_event "$stage" fail "\"reason\":$(json_str "entrypoint stopped by SIG$sig"),\"error_tail\":[$(json_str "entrypoint.sh received SIG$sig")]"
    write_status failed "$(json_str "entrypoint stopped by SIG$sig")"
  fi
  stop_children
  rm -f -- "$RUN_DIR/entrypoint.pid"
  exit $((128 + $2))
}
# A signal whose trap bash lost (signal_guard, vastui-lib.sh) stops the worker all the same, at
# the next stage or at the end.
stop_if_signalled() {
  guard_signalled || return 0
  case $GUARD_SIG in
    INT) on_signal INT 2 ;;
    HUP) on_signal HUP 1 ;;
    *) on_signal TERM 15 ;;
  esac
}
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT USR1 # the guard relays SIGINT as SIGUSR1 (vastui-lib.sh)
trap 'on_signal HUP 1' HUP

lotus_addr() { forward_addr 1234 "${LOTUS_API_ADDR:-127.0.0.1:1234}" "$RUN_DIR/lotus-api-addr"; }

# ------------------------------------------------------------------ stages

# The worker's curio identity: CURIO_LISTEN as given, else derived from VASTUI_RUNNER_ID as the
# controller derives it (vastui/engine/identity.py: 127.0.0.1:<base + id>). It must be an IP
# literal other than 0.0.0.0: curio keys the machine by it (deps/deps.go:291-305).
curio_identity() {
  if [[ -z $CURIO_LISTEN && $VASTUI_RUNNER_ID =~ ^[0-9]{1,9}$ ]] && ((10#$VASTUI_RUNNER_ID > 0)); then
    local base
    base=$(int_or "$CURIO_LISTEN_PORT_BASE" 12400)
    ((base >= 1024 && base <= 65000)) || base=12400
    CURIO_LISTEN=$(runner_listen $((10#$VASTUI_RUNNER_ID)) "$base")
  fi
  [[ -n $CURIO_NODE_NAME || -z $VASTUI_RUNNER_ID ]] || CURIO_NODE_NAME="vastui-r$VASTUI_RUNNER_ID"
  local re='^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3}):([0-9]{1,5})$'
  if [[ -z $CURIO_LISTEN ]]; then
    printf 'no curio identity: neither CURIO_LISTEN nor VASTUI_RUNNER_ID is set (curio would listen on 0.0.0.0:12300 and register as 127.0.0.1:12300 through the tunnel, the same machine as every other worker)'
    return 1
  fi
  if ! [[ $CURIO_LISTEN =~ $re ]] || ((BASH_REMATCH[1] > 255 || BASH_REMATCH[2] > 255 ||
    BASH_REMATCH[3] > 255 || BASH_REMATCH[4] > 255 || BASH_REMATCH[5] == 0 || BASH_REMATCH[5] > 65535)); then
    printf 'CURIO_LISTEN=%s is not an IPv4 address and port: curio keys its machine by it and leaves a host name empty (deps/deps.go:291-305)' "${CURIO_LISTEN:0:80}"
    return 1
  fi
  if [[ ${CURIO_LISTEN%:*} == 0.0.0.0 ]]; then
    printf 'CURIO_LISTEN=%s: curio replaces 0.0.0.0 with its database connection'"'"'s address, 127.0.0.1 through the tunnel, the same machine as every other worker' "$CURIO_LISTEN"
    return 1
  fi
}

# The host's driver, from nvidia-smi (the real tool's --query-gpu field); empty when unknown.
driver_version() {
  command -v nvidia-smi >/dev/null || return 0
  timeout 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null |
    head -n 1 | tr -d '[:space:]'
}

stage_setup() {
  start_stage setup
  [[ -z $RESTART_NOTE ]] || slog setup "$RESTART_NOTE"
  slog setup "image ${VASTUI_IMAGE} digest ${VASTUI_IMAGE_DIGEST}"
  if command -v nvidia-smi >/dev/null; then
    timeout 30 nvidia-smi -L >>"$LOG_DIR/setup.log" 2>&1
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
  local why
  if ! why=$(curio_identity); then
    slog setup "error: $why"
    fail_plain "curio identity: $why" "[$(json_str "error: $why")]"
  fi
  curio_identity
  slog setup "curio identity: listen $CURIO_LISTEN, name ${CURIO_NODE_NAME:-none}, runner ${VASTUI_RUNNER_ID:-none}"
  # curio is built with GOAMD64=v3 (curio's scripts/makefiles/30-build.mk:11): without these the
  # binary dies of SIGILL at start
  local missing
  missing=$(missing_cpu_flags)
  if [[ -n $missing ]]; then
    why="CPU lacks x86-64-v3 (curio is built with GOAMD64=v3): missing $missing"
    slog setup "error: $why"
    fail_plain "$why" "[$(json_str "error: $why")]"
  fi
  local driver major
  driver=$(driver_version)
  if [[ $driver =~ ^([0-9]{1,4})\. ]]; then
    major=$((10#${BASH_REMATCH[1]}))
    if ((major < MIN_DRIVER_MAJOR)); then
      why="host driver $driver is older than $MIN_DRIVER_MAJOR, the minimum for the image's CUDA 13"
      slog setup "error: $why"
      fail_plain "$why" "[$(json_str "error: $why")]"
    fi
    slog setup "host driver $driver"
  else
    slog setup "host driver version unknown (nvidia-smi gave ${driver:-nothing})"
  fi
  # The memory plan, before anything is fetched: PoRep and Snap resident, a PCE being built,
  # two partitions (vastui-lib.sh cuzk_plan)
  write_cuzk_config "$CUZK_CONFIG" "$CUZK_SAFETY_MARGIN_GIB"
  if [[ -n $PLAN_SHORT ]]; then
    slog setup "error: $PLAN_SHORT"
    fail_plain "$PLAN_SHORT" "[$(json_str "error: $PLAN_SHORT")]"
  fi
  # The PCE files an earlier run's daemon saved (a container stopped and started again): no
  # daemon reads them back (PceCache::load_from_disk has no caller), and this run's daemon writes
  # them again, each to a temporary file renamed over the old one (cuzk-pce/src/disk.rs): kept,
  # they would take the disk plan's room for the PCE files.
  local pce old_pce=()
  for pce in "$PARAM_DIR"/pce-*.bin "$PARAM_DIR"/pce-*.tmp; do
    [[ -f $pce ]] && rm -f -- "$pce" && old_pce+=("${pce##*/}")
  done
  ((${#old_pce[@]} == 0)) ||
    slog setup "removed the PCE files of an earlier run (no daemon reads them back; this run's daemon saves them again): ${old_pce[*]}"
  # The disk plan: every parameter file curio fetches with EnableProofShare, and the PCE files
  local free have need
  mkdir -p -- "$FIL_PROOFS_PARAMETER_CACHE"
  have=$(du -skL -- "$FIL_PROOFS_PARAMETER_CACHE" 2>/dev/null | awk '{ print int($1 / 1048576) }')
  need=$((PLAN_PARAMS_DISK_GIB + PLAN_PCE_DISK_GIB - ${have:-0}))
  ((need < PLAN_PCE_DISK_GIB)) && need=$PLAN_PCE_DISK_GIB
  if free=$(disk_free_gib "$FIL_PROOFS_PARAMETER_CACHE") && ((free < need)); then
    why="disk plan needs $need GiB free (parameters ${PLAN_PARAMS_DISK_GIB} GiB, PCE files ${PLAN_PCE_DISK_GIB} GiB, ${have:-0} GiB present); $free GiB free"
    slog setup "error: $why"
    fail_plain "$why" "[$(json_str "error: $why")]"
  fi
  slog setup "plan: ${CPUS} CPUs, memory budget ${MEM_BUDGET_GIB:-auto} GiB for a plan of ${PLAN_NEED_GIB} GiB, ${free:-?} GiB of disk free; cuzk max_parallel_synthesis ${MAX_PARALLEL_SYNTH}, gpu_threads ${GPU_THREADS}"
  ok_stage "\"curio_listen\":$(json_str "$CURIO_LISTEN"),\"cpus\":$CPUS,\"memory_budget_gib\":${MEM_BUDGET_GIB:-null},\"plan_gib\":$PLAN_NEED_GIB,\"driver\":$(json_str "${driver:-}")"
}

# The parameter files and their sizes, one "name size" line each, sorted: what a fetch that
# passed left on this container's disk (params_checked_write), compared on a restart.
params_listing() {
  local f
  for f in "$FIL_PROOFS_PARAMETER_CACHE"/*.params "$FIL_PROOFS_PARAMETER_CACHE"/*.vk \
    "$FIL_PROOFS_PARAMETER_CACHE"/*.srs; do
    [[ -f $f ]] && printf '%s %s\n' "${f##*/}" "$(file_size "$f")"
  done | sort
}

# True on a restart of this container whose earlier fetch passed (each file blake2b-checked by
# curio, lib/fastparamfetch/paramfetch.go:133-183) and left the same files, of the same sizes.
# Then curio need not hash the ~100 GiB of .params again (a minute or more of disk reads on
# every warm-pool start): TRUST_PARAMS=1 skips the check of .params files other than the
# SnapDeals ones (paramfetch.go:185-199); the .vk, .srs and SnapDeals files are checked as ever.
# A file spoilt since would fail proofs, which production judges.
params_trusted() {
  [[ -s $PARAMS_CHECKED ]] || return 1
  local now
  now=$(params_listing)
  if [[ -z $now || $now != "$(<"$PARAMS_CHECKED")" ]]; then
    slog paramfetch "the parameter files differ from those an earlier fetch checked: curio checks them all again"
    rm -f -- "$PARAMS_CHECKED"
    return 1
  fi
  slog paramfetch "the parameter files are those an earlier fetch of this container checked (names and sizes): curio trusts the .params files (TRUST_PARAMS=1) and checks the rest"
}

stage_paramfetch() {
  start_stage paramfetch
  local log="$LOG_DIR/paramfetch.log" offset pid rc=0 last_emit pct="" last_pct="" started
  local trust=0
  local -a cmd=()
  read -r -a cmd <<<"$PARAMFETCH_CMD"
  ((${#cmd[@]} > 0)) || fail_plain "paramfetch: PARAMFETCH_CMD is empty"
  offset=$(file_size "$log")
  mkdir -p -- "$FIL_PROOFS_PARAMETER_CACHE"
  params_trusted && trust=1
  rm -f -- "$PARAMS_CHECKED"
  if ((trust)); then
    TRUST_PARAMS=1 "${cmd[@]}" >>"$log" 2>&1 &
  else
    "${cmd[@]}" >>"$log" 2>&1 &
  fi
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
  params_listing >"$PARAMS_CHECKED.tmp.$$" && mv -f -- "$PARAMS_CHECKED.tmp.$$" "$PARAMS_CHECKED"
  ok_stage "\"trusted\":$( ((trust)) && echo true || echo false)"
}

# ------------------------------------------------------------------ resuming
# What the benchmark's verdict was measured on, as this script sees it, one JSON value per key
# (FP): the GPUs (`nvidia-smi -L`: index, name and UUID of each), the host driver, the
# container's CPUs and memory (the cgroup's and MemTotal, whole GiB: what cuzk's plan and tuning
# come from), the CPU model, the image, MIN_RATE and curio's deadline (what the verdict and the
# MaxPending production runs with depend on). The last of FP_KEYS are the machine's.
declare -A FP=()
FP_KEYS=(image image_digest min_rate deadline gpus driver cpus cpu_model memory_total_gib memory_limit_gib)
FP_MACHINE_FROM=4
machine_fingerprint() {
  local gpus="" model="" m
  if command -v nvidia-smi >/dev/null; then
    gpus=$(timeout 30 nvidia-smi -L 2>/dev/null | tr -d '\r' | sed -E 's/[[:space:]]+$//')
  fi
  FP[gpus]=$(json_lines <<<"$gpus")
  FP[driver]=$(json_str "$(driver_version)")
  cuzk_plan "$CUZK_SAFETY_MARGIN_GIB" # CPUS, MEM_TOTAL_BYTES, MEM_LIMIT_BYTES
  FP[cpus]=$CPUS
  if [[ -r $R/proc/cpuinfo ]]; then
    model=$(sed -nE 's/^model name[[:space:]]*:[[:space:]]*(.*)$/\1/p' "$R/proc/cpuinfo" | head -n 1)
  fi
  FP[cpu_model]=$(json_str "$model")
  FP[memory_total_gib]=null
  [[ -n $MEM_TOTAL_BYTES ]] && FP[memory_total_gib]=$((MEM_TOTAL_BYTES / 1073741824))
  FP[memory_limit_gib]=null
  [[ -n $MEM_LIMIT_BYTES ]] && FP[memory_limit_gib]=$((MEM_LIMIT_BYTES / 1073741824))
  FP[image]=$(json_str "$VASTUI_IMAGE")
  FP[image_digest]=$(json_str "$VASTUI_IMAGE_DIGEST")
  if m=$(to_milli "${MIN_RATE:-0}"); then
    FP[min_rate]=$(fmt_milli "$m")
  else
    FP[min_rate]=$(json_str "${MIN_RATE:-}")
  fi
  FP[deadline]=$(json_str "MaxPending $CUZK_MAX_PENDING, ProveTimeout $CUZK_PROVE_TIMEOUT, margin ${PROVE_DEADLINE_MARGIN:-0.2}")
}

# The raw JSON value of member $1 in the one-line JSON text $2 (a string, an array of strings, a
# number, true, false or null: what the marker and bench-result.json hold), or status 1.
json_member() {
  local s='"([^"\\]|\\.)*"'
  local re='[{,]"'"$1"'":(\[('"$s"'(,'"$s"')*)?\]|'"$s"'|[-+.0-9eE]+|true|false|null)'
  [[ $2 =~ $re ]] || return 1
  printf '%s' "${BASH_REMATCH[1]}"
}

# The marker of a passed benchmark ($1: bench-result.json's text), written whole (tmp + mv).
bench_marker_write() {
  local rate key members="" machine="" tmp="$BENCH_MARKER.tmp.$$" i=0
  rate=$(json_member rate_per_hour "$1")
  if ! [[ $rate =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
    slog benchmark "no benchmark marker: the passing result has no rate"
    return 0
  fi
  for key in "${FP_KEYS[@]}"; do
    if ((i++ < FP_MACHINE_FROM)); then
      members+=",\"$key\":${FP[$key]}"
    else
      machine+="${machine:+,}\"$key\":${FP[$key]}"
    fi
  done
  printf '{"rate_per_hour":%s,"passed_at":%s%s,"machine":{%s}}\n' "$rate" "$EPOCHREALTIME" \
    "$members" "$machine" >"$tmp" && mv -f -- "$tmp" "$BENCH_MARKER"
  slog benchmark "benchmark marker written: $rate proofs/hour on this machine (a restart of this container skips the benchmark)"
}

# True when an earlier run of this container passed the benchmark on this same machine, with
# this image and MIN_RATE, and its result (production's MaxPending) is still there: sets
# RESUME_RATE. Else the marker is removed, and the stage log says what differed.
RESUME_RATE=""
bench_resume() {
  [[ -e $BENCH_MARKER ]] || return 1
  local marker="" result="" key old rate passed diffs=() list
  marker=$(tr -d '\n' <"$BENCH_MARKER" 2>/dev/null)
  rate=$(json_member rate_per_hour "$marker") || rate=""
  if [[ $marker != "{"*"}" || ! $rate =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
    diffs+=("the marker is unreadable")
  else
    for key in "${FP_KEYS[@]}"; do
      old=$(json_member "$key" "$marker") || old="nothing"
      [[ $old == "${FP[$key]}" ]] || diffs+=("$key (was ${old:0:300}, now ${FP[$key]:0:300})")
    done
    [[ -s $RESULT_FILE ]] && result=$(tr -d '\n' <"$RESULT_FILE")
    if [[ $(json_member outcome "$result") != '"pass"' || $(json_member rate_per_hour "$result") != "$rate" ]]; then
      diffs+=("bench-result.json is not the passing result")
    fi
  fi
  if ((${#diffs[@]} > 0)); then
    printf -v list '%s; ' "${diffs[@]}"
    slog benchmark "an earlier run passed the benchmark, but not on this: ${list%; }; benchmarking again"
    rm -f -- "$BENCH_MARKER"
    return 1
  fi
  passed=$(json_member passed_at "$marker") || passed=""
  [[ $passed =~ ^[0-9]+ ]] && passed=$(date -u -d "@${BASH_REMATCH[0]}" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
  slog benchmark "resumed: this container passed the benchmark ${passed:+at $passed }with $rate proofs/hour on the same machine (GPUs, driver, CPUs, memory), image and MIN_RATE ${FP[min_rate]}: not benchmarked again"
  RESUME_RATE=$rate
}

stage_benchmark() {
  start_stage benchmark
  machine_fingerprint
  if bench_resume; then
    ok_stage "\"resumed\":true,\"rate\":$RESUME_RATE"
    return 0
  fi
  local log="$LOG_DIR/benchmark.log" offset pid rc result reason tail_json outcome=""
  offset=$(file_size "$log")
  rm -f -- "$RESULT_FILE" "$BENCH_MARKER"
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
    bench_marker_write "$result"
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
  # the benchmark's budget, margin and tuning (vastui-lib.sh write_cuzk_config)
  write_cuzk_config "$CUZK_CONFIG" "$CUZK_SAFETY_MARGIN_GIB"
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
  local lotus base token
  # The tunnel's ends on the worker's own loopback, where curio dials every time it connects:
  # pgx's pool and gocql reconnect to the same address after the controller's SSH connection
  # drops and comes back (an engine restart). Never a resolved address: a simulated sandbox's
  # forward (run/forwards/) moves at each reconnect, and stands for the worker's own port,
  # which the stand-ins map; where it is written it wins over the environment, as in
  # forward_addr.
  local db="${CURIO_DB_HOST:-127.0.0.1}:${CURIO_DB_PORT:-5433}"
  local cql="${CURIO_DB_HOST_CQL:-${CURIO_DB_HOST:-127.0.0.1}}:${CURIO_DB_CASSANDRA_PORT:-9042}"
  [[ -s $RUN_DIR/forwards/5433 ]] && db=127.0.0.1:5433
  [[ -s $RUN_DIR/forwards/9042 ]] && cql=127.0.0.1:9042
  export CURIO_DB_HOST="${db%:*}" CURIO_DB_PORT="${db##*:}"
  # YCQL pinned to the tunnel: the controller's end rewrites the cluster's advertised peers to
  # this address, since gocql would connect to them (vastui/ssh/cqlpin.py)
  export CURIO_DB_HOST_CQL="${cql%:*}" CURIO_DB_CASSANDRA_PORT="${cql##*:}"
  # No load balancing: the YugabyteDB smart driver would connect to the addresses yb_servers()
  # advertises (cmd/curio/main.go:166-170, default true; yugabyte/pgx load_balance.go), which a
  # Vast box cannot reach; the tunnel is the only way to the cluster.
  export CURIO_DB_LOAD_BALANCE=false
  # curio sets INFO only when GOLOG_LOG_LEVEL is unset (cmd/curio/main.go:36-41): an inherited
  # value would hide "cuzk proving daemon enabled", which this stage waits for.
  export GOLOG_LOG_LEVEL=info
  export CURIO_LISTEN CURIO_NODE_NAME
  if [[ -z ${FULLNODE_API_INFO:-} ]]; then
    # The chain node's token from the cluster's base layer, pointed at the tunnel's end on the
    # worker's loopback (as the database's, above).
    lotus=${LOTUS_API_ADDR:-127.0.0.1:1234}
    [[ -s $RUN_DIR/lotus-api-addr || -s $RUN_DIR/forwards/1234 ]] && lotus=127.0.0.1:1234
    base=$(curio config get base 2>/dev/null) || base=""
    token=$(sed -nE 's/.*ChainApiInfo[[:space:]]*=[[:space:]]*\[[[:space:]]*"([A-Za-z0-9_.-]+):.*/\1/p' <<<"$base" | head -n 1)
    if [[ -n $token ]]; then
      export FULLNODE_API_INFO="$token:/ip4/${lotus%:*}/tcp/${lotus##*:}/http"
    fi
  fi
}

# What of the controller's tunnel is down, one line each; empty when all answers: the Lotus API
# (Filecoin.Version), curio's database (YSQL 5433, YCQL 9042). The tunnel is the controller's SSH
# connection: an engine that restarts, or reconnects to the direct port Vast reports after the
# proxy, leaves it down for a moment; a controller whose Lotus or database is down, for longer.
tunnel_down() {
  local addr out rc port name
  addr=$(lotus_addr)
  out=$(curl -sS --max-time 5 -H 'Content-Type: application/json' \
    --data '{"jsonrpc":"2.0","method":"Filecoin.Version","params":[],"id":1}' \
    "http://$addr/rpc/v1" 2>&1)
  rc=$?
  if ((rc != 0)) || [[ $out != *'"result"'* ]]; then
    printf 'lotus api %s: %s\n' "$addr" "$(tr -d '\r' <<<"$out" | tail -n 1 | cut -c1-160)"
  fi
  for port in 5433 9042; do
    name="curio database (YSQL)"
    [[ $port == 9042 ]] && name="curio database (YCQL)"
    addr=$(forward_addr "$port" "127.0.0.1:$port")
    # shellcheck disable=SC2016 # $1 and $2 are the inner shell's arguments
    if ! timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "${addr%:*}" "${addr##*:}" 2>/dev/null; then
      printf '%s %s: connection refused\n' "$name" "$addr"
    fi
  done
}

# Waits until the whole tunnel answers. While it is down the worker says so (a progress event
# with "tunnel":"down" and what is down, again when that changes or every
# TUNNEL_REPORT_INTERVAL s) and proves nothing; the controller decides how long to wait
# (TUNNEL_WAIT 0) and never counts it against the machine.
wait_tunnel() {
  local down last="" started last_report=0 detail
  now_s
  started=$NOW_S
  while down=$(tunnel_down) && [[ -n $down ]]; do
    now_s
    detail=$(tr '\n' ';' <<<"$down" | sed -E 's/;$//; s/;/; /g')
    if [[ $detail != "$last" ]] || ((NOW_S - last_report >= TUNNEL_REPORT_INTERVAL)); then
      [[ $detail != "$last" ]] && slog prove "tunnel down: $detail"
      emit_event prove progress "\"detail\":$(json_str "waiting for the controller's tunnel: $detail"),\"tunnel\":\"down\",\"down\":$(json_lines <<<"$down")"
      last=$detail last_report=$NOW_S
    fi
    if ((TUNNEL_WAIT > 0 && NOW_S - started >= TUNNEL_WAIT)); then
      fail_plain "tunnel down for ${TUNNEL_WAIT} s: $detail" "$(json_lines <<<"$down")"
    fi
    daemon_alive || fail_daemon_exited "$(file_size "$CUZK_LOG")"
    nap 1
  done
  if [[ -n $last ]]; then
    slog prove "tunnel up"
    emit_event prove progress "\"detail\":\"the controller's tunnel is up\",\"tunnel\":\"up\""
  fi
}

# MaxPending for production: what the benchmark sized to curio's ProveTimeout (its result's
# max_pending: vastui-lib.sh deadline_size), else the configured one. Sets PROD_MAX_PENDING.
PROD_MAX_PENDING=""
production_max_pending() {
  local result="" re='"max_pending":([0-9]{1,4})[,}]'
  [[ -s $RESULT_FILE ]] && result=$(tr -d '\n' <"$RESULT_FILE")
  PROD_MAX_PENDING=$CUZK_MAX_PENDING
  if [[ $result =~ $re ]] && ((10#${BASH_REMATCH[1]} > 0 && 10#${BASH_REMATCH[1]} <= CUZK_MAX_PENDING)); then
    PROD_MAX_PENDING=$((10#${BASH_REMATCH[1]}))
  fi
}

# The layer that points curio at this worker's daemon, stored in the cluster database the way
# curio users do it: `curio config set --title NAME FILE` (cmd/curio/config.go:60-122). Workers
# with the same MaxPending share one layer (the configured one keeps the plain name), so the
# layers stay few whatever the fleet's size. Sets CUZK_LAYER.
CUZK_LAYER=""
curio_layer() {
  CUZK_LAYER=$CURIO_CUZK_LAYER
  ((PROD_MAX_PENDING == CUZK_MAX_PENDING)) || CUZK_LAYER="$CURIO_CUZK_LAYER-mp$PROD_MAX_PENDING"
  local file="$STATE_DIR/$CUZK_LAYER.toml" out="$RUN_DIR/curio-config-set.out" rc
  {
    printf '# written by vastui entrypoint.sh (the same for every worker with this MaxPending)\n'
    if [[ $CURIO_PROOFSHARE == 1 ]]; then
      printf '[Subsystems]\n  EnableProofShare = true\n\n'
    fi
    printf '[Cuzk]\n  Address = %s\n  MaxPending = %d\n  ProveTimeout = %s\n' \
      "$(json_str "$CUZK_LISTEN")" "$PROD_MAX_PENDING" "$(json_str "$CUZK_PROVE_TIMEOUT")"
  } >"$file"
  curio config set --title "$CUZK_LAYER" "$file" >"$out" 2>&1
  rc=$?
  cat -- "$out" >>"$CURIO_LOG"
  if ((rc != 0)); then
    if [[ -n $(tunnel_down) ]]; then
      return 2 # the tunnel went down meanwhile: wait for it again
    fi
    fail_plain "curio config set failed (exit $rc)" "$(error_lines <"$out" | tail -n 20 | json_lines)"
  fi
  slog prove "curio layer $CUZK_LAYER: [Cuzk] Address = $CUZK_LISTEN, MaxPending = $PROD_MAX_PENDING"
}

# The node as the cluster knows it, from `curio cli --machine <listen> info` (cmd/curio/cli.go,
# info.go): written to run/curio-info.json and reported in a progress event.
curio_info() {
  local out id name hostport tasks json
  out=$(timeout 60 curio cli --machine "$CURIO_LISTEN" info 2>>"$CURIO_LOG") || return 0
  id=$(sed -nE 's/^ID: ([0-9]{1,12})$/\1/p' <<<"$out" | head -n 1)
  name=$(sed -nE 's/^Name: (.*)$/\1/p' <<<"$out" | head -n 1)
  hostport=$(sed -nE 's/^HostPort: (.*)$/\1/p' <<<"$out" | head -n 1)
  tasks=$(sed -nE 's/^Tasks: (.*)$/\1/p' <<<"$out" | head -n 1)
  [[ -n $id ]] || return 0
  json=$(printf '{"machine_id":%d,"host_and_port":%s,"name":%s,"tasks":%s,"listen":%s,"max_pending":%d,"layer":%s}' \
    "$id" "$(json_str "${hostport:0:100}")" "$(json_str "${name:0:100}")" \
    "$(json_str "${tasks:0:400}")" "$(json_str "$CURIO_LISTEN")" "$PROD_MAX_PENDING" \
    "$(json_str "$CUZK_LAYER")")
  printf '%s\n' "$json" >"$RUN_DIR/curio-info.json"
  emit_event prove progress "\"detail\":$(json_str "curio machine $id ($hostport)"),\"curio\":$json"
  slog prove "curio machine $id: $hostport ${name:+($name)}"
}

# curio ended (status $2). The tunnel down: it restarts once the tunnel is back, as often as
# that takes. Else it restarts with the same identity, taking back its own tasks
# (harmony/harmonytask/harmonytask.go:351-389), up to CURIO_MAX_RESTARTS times: a worker that
# passed its benchmark is not thrown away for one crash, nor kept for a curio that cannot run.
CURIO_RESTARTS=0
curio_ended() { # $1 = log offset, $2 = exit status
  local down
  down=$(tunnel_down)
  if [[ -n $down ]]; then
    emit_event prove progress "\"detail\":$(json_str "curio exited (status $2) while the controller's tunnel was down; it restarts when the tunnel is back"),\"tunnel\":\"down\",\"down\":$(json_lines <<<"$down")"
    slog prove "curio exited (status $2) with the tunnel down: restarting it when the tunnel is back"
    return 0
  fi
  if ((CURIO_RESTARTS >= CURIO_MAX_RESTARTS)); then
    local after=""
    ((CURIO_RESTARTS > 0)) && after=" after $CURIO_RESTARTS restarts"
    fail_plain "curio exited (status $2)$after" "$(error_tail_json "$CURIO_LOG" "$1")"
  fi
  CURIO_RESTARTS=$((CURIO_RESTARTS + 1))
  emit_event prove progress "\"detail\":$(json_str "curio exited (status $2); restarting it as the same machine ($CURIO_RESTARTS of $CURIO_MAX_RESTARTS)")"
  slog prove "curio exited (status $2): restart $CURIO_RESTARTS of $CURIO_MAX_RESTARTS"
}

FULLNODE_FROM_ENV=${FULLNODE_API_INFO:+1}

stage_prove() {
  start_stage prove
  local daemon_offset curio_offset curio_pid rc deadline layers enabled
  daemon_offset=$(file_size "$CUZK_LOG")
  # workerctl cuzk-counters reports the daemon's error lines from here on, as this stage does
  printf '%s\n' "$daemon_offset" >"$RUN_DIR/cuzk-prove-offset"
  prove_daemon
  printf '%s\n' "$CUZK_STATUS_ADDR" >"$RUN_DIR/cuzk-status-addr"
  printf '%s\n' "$CUZK_LISTEN" >"$RUN_DIR/cuzk-listen-addr"
  production_max_pending
  curio_identity || fail_plain "curio identity: lost"
  # workerctl cuzk-counters counts curio's timed-out proofs from here on
  file_size "$CURIO_LOG" >"$RUN_DIR/curio-prove-start"
  while :; do
    wait_tunnel
    [[ -n $FULLNODE_FROM_ENV ]] || unset FULLNODE_API_INFO # re-derived from the tunnel's end
    curio_env
    curio_layer || continue
    layers="${CURIO_EXTRA_LAYERS:+$CURIO_EXTRA_LAYERS,}$CUZK_LAYER"
    curio_offset=$(file_size "$CURIO_LOG")
    printf '%s\n' "$curio_offset" >"$RUN_DIR/curio-prove-offset"
    curio run --listen "$CURIO_LISTEN" ${CURIO_NODE_NAME:+--name "$CURIO_NODE_NAME"} \
      --layers "$layers" >>"$CURIO_LOG" 2>&1 </dev/null &
    curio_pid=$!
    children=("$curio_pid")
    printf '%s\n' "$curio_pid" >"$RUN_DIR/curio.pid"
    slog prove "curio run --listen $CURIO_LISTEN --name ${CURIO_NODE_NAME:-} --layers $layers (pid $curio_pid)"
    # curio logs "cuzk proving daemon enabled" once its layers set [Cuzk] Address
    # (cmd/curio/tasks/tasks.go:180-185); without it, curio does not use cuzk at all.
    clock_ms
    deadline=$((CLOCK_MS + CURIO_READY_TIMEOUT * 1000))
    enabled=1
    until grep -qF "cuzk proving daemon enabled" < <(tail -c +"$((curio_offset + 1))" -- "$CURIO_LOG"); do
      if ! kill -0 "$curio_pid" 2>/dev/null; then
        wait "$curio_pid"
        rc=$?
        children=()
        curio_ended "$curio_offset" "$rc"
        enabled=0
        break
      fi
      daemon_alive || fail_daemon_exited "$daemon_offset"
      clock_ms
      if ((CLOCK_MS >= deadline)); then
        fail_plain "curio did not enable cuzk within ${CURIO_READY_TIMEOUT} s (no \"cuzk proving daemon enabled\" in its log)" \
          "$(error_tail_json "$CURIO_LOG" "$curio_offset")"
      fi
      nap "$POLL"
    done
    ((enabled)) || continue
    emit_event prove progress "\"detail\":\"running\""
    slog prove "cuzk-daemon (pid $DAEMON_PID) and curio (pid $curio_pid) running; curio uses cuzk"
    curio_info
    while :; do
      daemon_alive || fail_daemon_exited "$daemon_offset"
      if ! kill -0 "$curio_pid" 2>/dev/null; then
        wait "$curio_pid"
        rc=$?
        children=()
        curio_ended "$curio_offset" "$rc"
        break
      fi
      nap "$POLL"
    done
  done
}

# ------------------------------------------------------------------ restarts
# The start time of process $1 (clock ticks since boot: /proc/PID/stat field 22), or status 1.
proc_start_time() {
  local stat="" rest
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null
  [[ -n $stat ]] || return 1
  rest=${stat##*) }
  local -a fields
  read -r -a fields <<<"$rest"
  [[ ${fields[19]:-} =~ ^[0-9]+$ ]] || return 1
  printf '%s' "${fields[19]}"
}

# The pid of another entrypoint.sh that runs now (run/entrypoint.pid: "PID START_TIME"), or
# status 1. A container that was stopped and started again numbers its processes afresh: the pid
# of the killed run can be anyone now, this script's own guard (vastui-lib.sh signal_guard) or a
# process that merely names entrypoint.sh. The start time tells them apart.
entrypoint_running() {
  local pid="" start="" now
  { read -r pid start <"$RUN_DIR/entrypoint.pid"; } 2>/dev/null
  [[ $pid =~ ^[0-9]{1,9}$ && $pid != "$$" && $pid != "$PPID" ]] || return 1
  now=$(proc_start_time "$pid") || return 1
  [[ -z $start || $now == "$start" ]] || return 1
  grep -qa entrypoint.sh "/proc/$pid/cmdline" 2>/dev/null || return 1
  printf '%s' "$pid"
}

# Vast stops an interruptible instance that was outbid: every process is killed, the filesystem
# is kept, and the next start runs the onstart command, this script, from the top. What the
# killed run left must not mislead this one: its pid files name processes that are gone (their
# numbers may be anyone's now), the signal guards' files and half-written temporary files are
# its own. events.jsonl is appended to, never truncated (the controller follows it by line); a
# line the kill cut short is ended, so that the next event is a line of its own.
RESTART_NOTE=""
entrypoint_restart() {
  local f removed=()
  if [[ -s $EVENTS ]]; then
    [[ -n $(tail -c 1 -- "$EVENTS") ]] && printf '\n' >>"$EVENTS"
    RESTART_NOTE="restarted: an earlier run left $(wc -l <"$EVENTS") event lines (kept)"
  fi
  for f in "$DAEMON_PID_FILE" "$DAEMON_EXIT_FILE" "$DAEMON_PID_FILE.tmp" "$DAEMON_EXIT_FILE.tmp" \
    "$RUN_DIR/curio.pid" "$RUN_DIR/curio-info.json" "$RUN_DIR/curio-config-set.out" \
    "$RUN_DIR/cuzk-prove-offset" "$RUN_DIR/curio-prove-offset" "$RUN_DIR/curio-prove-start" \
    "$RUN_DIR"/signal-guard.* "$STATE_DIR"/*.tmp.*; do
    [[ -e $f && $f != "$GUARD_FILE" ]] || continue
    rm -f -- "$f" && removed+=("${f##*/}")
  done
  if ((${#removed[@]} > 0)); then
    RESTART_NOTE+="${RESTART_NOTE:+; }removed what a killed run left: ${removed[*]}"
  fi
}

# ------------------------------------------------------------------ main
# Whole seconds only (never let an env value reach bash arithmetic unchecked).
TUNNEL_WAIT=$(int_or "$TUNNEL_WAIT" 0)
TUNNEL_REPORT_INTERVAL=$(int_or "$TUNNEL_REPORT_INTERVAL" 60)
CUZK_SAFETY_MARGIN_GIB=$(int_or "$CUZK_SAFETY_MARGIN_GIB" 5)
# the benchmark sizes MaxPending to the same ProveTimeout and margin (benchmark.sh)
export CUZK_SAFETY_MARGIN_GIB CUZK_PROVE_TIMEOUT
PARAMFETCH_TIMEOUT=$(int_or "$PARAMFETCH_TIMEOUT" 5400)
PARAMFETCH_PROGRESS_INTERVAL=$(int_or "$PARAMFETCH_PROGRESS_INTERVAL" 30)
CUZK_READY_TIMEOUT=$(int_or "$CUZK_READY_TIMEOUT" 600)
CURIO_READY_TIMEOUT=$(int_or "$CURIO_READY_TIMEOUT" 600)
CURIO_MAX_RESTARTS=$(int_or "$CURIO_MAX_RESTARTS" 3)
CUZK_MAX_PENDING=$(int_or "$CUZK_MAX_PENDING" 10)
mkdir -p -- "$LOG_DIR" "$STATE_DIR" "$RUN_DIR" "$PARAM_DIR"
if other=$(entrypoint_running); then
  printf 'entrypoint.sh already running (pid %s)\n' "$other" >&2
  exit 0
fi
entrypoint_restart
start_time=$(proc_start_time "$$") || start_time=""
printf '%s%s\n' "$$" "${start_time:+ $start_time}" >"$RUN_DIR/entrypoint.pid"
write_status running

stage_setup
stage_paramfetch
stage_benchmark
stage_prove
stop_if_signalled
