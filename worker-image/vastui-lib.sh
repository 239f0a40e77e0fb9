# shellcheck shell=bash
# Helpers shared by the worker scripts (sourced, not run). Pure bash plus coreutils, sed, awk
# and grep: the image has no jq. The caller sets R (the worker root) and RUN_DIR first.

# A JSON string literal for $1 (quotes, backslashes and control characters escaped).
json_str() {
  local s=$1 bs=$'\\' q='"' re=$'[\x01-\x1f]' c hex
  s=${s//"$bs"/"$bs$bs"}
  s=${s//"$q"/"$bs$q"}
  s=${s//$'\n'/"${bs}n"}
  s=${s//$'\r'/"${bs}r"}
  s=${s//$'\t'/"${bs}t"}
  while [[ $s =~ $re ]]; do
    c=${BASH_REMATCH[0]}
    printf -v hex '%su%04x' "$bs" "'$c"
    s=${s//"$c"/"$hex"}
  done
  printf '"%s"' "$s"
}

# A JSON array of strings from the lines of stdin (empty lines skipped).
json_lines() {
  local line out="" first=1
  while IFS= read -r line || [[ -n $line ]]; do
    [[ -n $line ]] || continue
    if ((first)); then first=0; else out+=","; fi
    out+=$(json_str "$line")
  done
  printf '[%s]' "$out"
}

file_size() { stat -c %s -- "$1" 2>/dev/null || printf '0'; }

# "29.5" -> 29500 (thousandths); fails on anything that is not a plain decimal.
to_milli() {
  local v=$1 int frac
  [[ $v =~ ^([0-9]{0,12})(\.([0-9]*))?$ && -n "${BASH_REMATCH[1]}${BASH_REMATCH[3]}" ]] || return 1
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

# Whole seconds from an environment value, or the default (never unchecked arithmetic).
int_or() { if [[ $1 =~ ^[0-9]{1,9}$ ]]; then printf '%d' $((10#$1)); else printf '%d' "$2"; fi; }

# ------------------------------------------------------------------ the worker's clock
# Every duration the scripts measure or wait for is on this clock: real time on a real worker.
# The simulator's stand-ins run SIM_SPEED times faster than real time, and it sets
# WORKER_TIME_SCALE to the same factor so that measured rates and timeouts stay in the units the
# stand-ins simulate. Unset (or 1) on a real worker.
CLOCK_T0=${EPOCHREALTIME/./}
CLOCK_SCALE_M=1000
if [[ -n ${WORKER_TIME_SCALE:-} ]] && m=$(to_milli "$WORKER_TIME_SCALE") && ((m > 0)); then
  CLOCK_SCALE_M=$m
fi
unset m
# shellcheck disable=SC2034  # read by the scripts that source this file
CLOCK_MS=0

# Sets CLOCK_MS: milliseconds since the script started, on the worker's clock.
clock_ms() {
  local t=${EPOCHREALTIME/./}
  # shellcheck disable=SC2034
  CLOCK_MS=$(((10#$t - 10#$CLOCK_T0) * CLOCK_SCALE_M / 1000000))
}

# The time log lines carry, UTC, on the controller's clock: the wall clock on a real worker. In
# the simulator (WORKER_TIME_SCALE) the controller's clock runs faster: it read
# WORKER_CLOCK_SIM0 when the wall clock read WORKER_CLOCK_WALL0, and lines say that time, so
# every log and the engine agree.
now_iso() {
  local s=$EPOCHSECONDS wall0 sim0 now
  if ((CLOCK_SCALE_M != 1000)) && wall0=$(to_milli "${WORKER_CLOCK_WALL0:-}") &&
    sim0=$(to_milli "${WORKER_CLOCK_SIM0:-}"); then
    now=${EPOCHREALTIME/./}
    s=$(((sim0 + (10#$now / 1000 - wall0) * CLOCK_SCALE_M / 1000) / 1000))
  fi
  date -u -d "@$s" +%Y-%m-%dT%H:%M:%SZ
}

# Real seconds (with 3 decimals) that last $1 milliseconds on the worker's clock.
real_seconds() {
  local ms=$(($1 * 1000 / CLOCK_SCALE_M))
  ((ms < 1)) && ms=1
  printf '%d.%03d' $((ms / 1000)) $((ms % 1000))
}

# An interruptible real-time sleep (traps run at once).
nap() {
  sleep "$1" &
  wait $! 2>/dev/null
}

# ------------------------------------------------------------------ tunnels
# host:port of a controller service forwarded into the worker. A real worker reaches it on
# 127.0.0.1:PORT (the controller's remote forward); a non-empty $RUN_DIR/forwards/PORT (or,
# for the Lotus API, $RUN_DIR/lotus-api-addr) names another address and wins: the simulator,
# whose workers share one loopback, writes them.
forward_addr() { # $1 = port on the worker, $2 = default address
  local f content
  for f in "$RUN_DIR/forwards/$1" ${3:+"$3"}; do
    if [[ -s $f ]]; then
      content=$(tr -d '[:space:]' <"$f")
      if [[ -n $content ]]; then
        printf '%s' "$content"
        return 0
      fi
    fi
  done
  printf '%s' "$2"
}

# ------------------------------------------------------------------ error lines
# The lines of a log that say what went wrong, from stdin: ANSI codes and CRs stripped.
#  - tracing lines at ERROR level (cuzk; a WARN such as "failed to save PCE to disk
#    (non-fatal)" is not an error), go-log ERROR lines (curio), curio's fatal "ERROR: ...";
#  - a Rust panic: "thread '...' panicked at FILE:" and its message line after it;
#  - the C++ terminate handler: "terminate called after throwing ..." and "  what():  ...";
#  - an anyhow error from main, "Error: ..." and its "Caused by:" chain;
#  - cuzk-bench's "error:     ..." of a FAILED proof;
#  - kernel and shell messages (Killed, Segmentation fault, out of memory, CUDA error).
# Never TIMELINE/CUZK_TIMING lines, progress bars or INFO lines.
error_lines() {
  sed -E $'s/\x1b\\[[0-9;?]*[A-Za-z]//g; s/\r$//; s/[[:space:]]+$//' | awk '
    chain && /^    / { sub(/^ +/, ""); print "  " $0; next }
    chain && /^Caused by:$/ { next }
    chain && /^$/ { next }
    { chain = 0 }
    panic { print; panic = 0; next }
    /^thread .* panicked at / { print; panic = 1; next }
    /^terminate called after throwing/ { print; next }
    /^ +what\(\): / { print; next }
    /^Error: / { print; chain = 1; next }
    /^error: +/ { print; next }
    /^ERROR: / { print; next }
    /^TIMELINE,|^CUZK_TIMING|^CUZK_NTT_H/ { next }
    /^[0-9][0-9T:.+-]*Z +ERROR / { print; next }
    /\tERROR\t/ { print; next }
    / (INFO|WARN|DEBUG|TRACE) |\t(INFO|WARN|DEBUG)\t/ { next }
    /Killed|Segmentation fault|core dumped|[Oo]ut of memory|CUDA error|Aborted/ { print; next }
  ' | cut -c1-500
}

# ------------------------------------------------------------------ cuzk-daemon
CUZK_LOG=${CUZK_LOG:-"$R/var/log/vastui/cuzk.log"}
DAEMON_PID_FILE="$RUN_DIR/cuzk-daemon.pid"
DAEMON_EXIT_FILE="$RUN_DIR/cuzk-daemon.exit"

# Starts cuzk-daemon with config $1, output appended to the cuzk log, under RUST_LOG=info (an
# inherited RUST_LOG=warn would hide every line the scripts wait for: RUST_LOG overrides the
# configured level, cuzk-daemon/src/main.rs:54-56). A supervising subshell waits for it and
# writes its exit status to $DAEMON_EXIT_FILE, so that a later stage, which is not its parent,
# can still tell how it died. Sets DAEMON_PID.
daemon_launch() {
  rm -f -- "$DAEMON_PID_FILE" "$DAEMON_EXIT_FILE"
  (
    RUST_LOG=info cuzk-daemon --config "$1" >>"$CUZK_LOG" 2>&1 </dev/null &
    pid=$!
    printf '%s\n' "$pid" >"$DAEMON_PID_FILE.tmp" && mv -f -- "$DAEMON_PID_FILE.tmp" "$DAEMON_PID_FILE"
    wait "$pid"
    printf '%s\n' "$?" >"$DAEMON_EXIT_FILE.tmp" && mv -f -- "$DAEMON_EXIT_FILE.tmp" "$DAEMON_EXIT_FILE"
  ) &
  local i
  for ((i = 0; i < 500; i++)); do
    [[ -s $DAEMON_PID_FILE ]] && break
    sleep 0.01
  done
  DAEMON_PID=$(<"$DAEMON_PID_FILE")
}

# Waits until the daemon whose output starts at byte $1 of the cuzk log is ready: its
# "cuzk-daemon ready" line, then its port answering `cuzk-bench status` (the line is logged before
# tonic binds the port, cuzk-daemon/src/main.rs:257-258). $2 = timeout (seconds on the worker's
# clock), $3 = poll interval (real seconds). Returns 0 ready, 1 the daemon died, 2 no ready line
# in time, 3 ready but its port did not answer in time.
daemon_wait_ready() {
  local offset=$1 deadline poll=${3:-0.2}
  clock_ms
  deadline=$((CLOCK_MS + $2 * 1000))
  until grep -qF "cuzk-daemon ready, serving on" < <(tail -c +"$((offset + 1))" -- "$CUZK_LOG"); do
    daemon_alive || return 1
    clock_ms
    ((CLOCK_MS < deadline)) || return 2
    nap "$poll"
  done
  until cuzk-bench --addr "http://$CUZK_LISTEN" status >/dev/null 2>&1; do
    daemon_alive || return 1
    clock_ms
    ((CLOCK_MS < deadline)) || return 3
    nap "$poll"
  done
}

daemon_alive() { [[ -n ${DAEMON_PID:-} && ! -e $DAEMON_EXIT_FILE ]] && kill -0 "$DAEMON_PID" 2>/dev/null; }

# The daemon's exit status, waiting up to $1 real seconds for it to be known; empty if alive.
daemon_exit_status() {
  local i tries=$((${1:-2} * 20))
  for ((i = 0; i <= tries; i++)); do
    if [[ -s $DAEMON_EXIT_FILE ]]; then
      cat -- "$DAEMON_EXIT_FILE"
      return 0
    fi
    ((i < tries)) && sleep 0.05
  done
  return 1
}

# "134" -> "SIGABRT"; empty for a plain exit status.
signal_name() {
  local s=$1 name
  ((s > 128 && s < 160)) || return 0
  name=$(kill -l $((s - 128)) 2>/dev/null) || return 0
  printf 'SIG%s' "$name"
}

# One line on how the daemon ended, e.g. "cuzk-daemon was killed by SIGABRT (exit status 134)".
daemon_death_line() {
  local status=$1 sig
  sig=$(signal_name "$status")
  if [[ -z $sig ]]; then
    printf 'cuzk-daemon exited with status %s' "$status"
  elif [[ $sig == SIGKILL ]]; then
    printf 'cuzk-daemon was killed by SIGKILL (exit status %s) without an error line: the kernel'"'"'s out-of-memory killer, most likely' "$status"
  else
    printf 'cuzk-daemon was killed by %s (exit status %s)' "$sig" "$status"
  fi
}

# "cuzk-daemon exited (SIGABRT, status 134)": the prove stage's failure reason, also what
# workerctl cuzk-counters reports (vastui/engine/production.py builds the same words).
daemon_exit_reason() {
  local sig
  sig=$(signal_name "$1")
  printf 'cuzk-daemon exited (%sstatus %s)' "${sig:+$sig, }" "$1"
}

# The daemon's error lines since byte $1 of its log, plus how it died ($2), as a JSON array.
daemon_failure_tail() {
  local offset=$1 status=$2
  {
    tail -c +"$((offset + 1))" -- "$CUZK_LOG" 2>/dev/null | error_lines | awk '!seen[$0]++' | tail -n 19
    [[ -n $status ]] && daemon_death_line "$status"
  } | json_lines
}

# SIGTERM kills the daemon at once (it has no handler for it); KILL after 10 real seconds.
daemon_stop() {
  [[ -n ${DAEMON_PID:-} ]] || return 0
  if kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID" 2>/dev/null
    local i
    for ((i = 0; i < 100; i++)); do
      kill -0 "$DAEMON_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$DAEMON_PID" 2>/dev/null
  fi
  daemon_exit_status 5 >/dev/null
  rm -f -- "$DAEMON_PID_FILE"
  DAEMON_PID=""
}

# ------------------------------------------------------------------ memory
# The memory budget for cuzk, in whole GiB: the container's memory limit (cgroup v2 memory.max,
# else v1 memory.limit_in_bytes), capped by MemTotal, minus the safety margin. cuzk's own
# `total_budget = "auto"` reads only /proc/meminfo MemTotal (cuzk-core/src/memory.rs:83-100),
# which in a container is the whole host's RAM: a rented slice of a big machine would plan for
# memory it does not have and be killed by the OOM killer. An explicit budget is used as is,
# the margin is not subtracted from it (config.rs:96-108), so it is subtracted here. Sets
# MEM_BUDGET_GIB (empty when neither number can be read: the caller then keeps "auto"),
# MEM_LIMIT_BYTES and MEM_TOTAL_BYTES.
# shellcheck disable=SC2034  # read by the scripts that source this file
MEM_BUDGET_GIB=""
# shellcheck disable=SC2034
MEM_LIMIT_BYTES=""
# shellcheck disable=SC2034
MEM_TOTAL_BYTES=""
memory_budget() { # $1 = safety margin in GiB
  local f v limit="" total=""
  for f in "$R/sys/fs/cgroup/memory.max" "$R/sys/fs/cgroup/memory/memory.limit_in_bytes"; do
    [[ -r $f ]] || continue
    v=$(tr -d '[:space:]' <"$f")
    if [[ $v =~ ^[0-9]{1,19}$ && ${#v} -lt 19 ]]; then
      limit=$v
    fi
    break
  done
  if [[ -r $R/proc/meminfo ]]; then
    v=$(sed -nE 's/^MemTotal:[[:space:]]+([0-9]{1,15})[[:space:]]*kB$/\1/p' "$R/proc/meminfo")
    [[ -n $v ]] && total=$((v * 1024))
  fi
  # shellcheck disable=SC2034
  MEM_LIMIT_BYTES=$limit
  # shellcheck disable=SC2034
  MEM_TOTAL_BYTES=$total
  local eff=${limit:-$total}
  MEM_BUDGET_GIB=""
  [[ -n $eff ]] || return 0
  if [[ -n $limit && -n $total ]] && ((total < limit)); then eff=$total; fi
  local gib=$((eff / 1073741824 - $1))
  ((gib < 1)) && gib=1
  # shellcheck disable=SC2034
  MEM_BUDGET_GIB=$gib
}
