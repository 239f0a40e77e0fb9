# shellcheck shell=bash
# Helpers shared by the worker scripts (sourced, not run). Pure bash plus coreutils, sed, awk
# and grep: the image has no jq. The caller sets R (the worker root) and RUN_DIR first.

# ------------------------------------------------------------------ signals
# bash 5.2 can lose a trapped signal. One that lands while the shell expands a command
# substitution runs its trap inside the parser: the trap's text fails to parse ("trap: line 2:
# unexpected EOF while looking for matching `)'"), the substitution fails the same way, and the
# shell abandons the rest of its current top-level command and goes on with the next (bash
# 5.2.15: 5 of 40 SIGTERMs sent to a loop of `f "$(g "$x")"`; in CI a SIGTERMed benchmark.sh
# went on to a below_min verdict). So each worker script runs as two processes:
# - this guard, which only waits (its traps never land in a substitution), writes down the
#   signal it got in $GUARD_FILE, relays it to the script and sends it again every second until
#   the script exits (SIGINT is relayed as SIGUSR1: a background process starts with SIGINT
#   ignored, and bash cannot trap a signal ignored at entry);
# - the script, whose traps are the fast path and whose handlers ignore repeats, and which asks
#   guard_signalled at the points where a lost signal would do harm (its EXIT trap, a stage's
#   start): the written signal is the guarantee.
# Call it first, with the script's arguments, once RUN_DIR is set.
GUARD_FILE=""
GUARD_SIG=""
signal_guard() {
  if [[ ${VASTUI_SIGNAL_GUARD:-} == "$PPID" ]]; then
    unset VASTUI_SIGNAL_GUARD
    GUARD_FILE="${RUN_DIR:-${TMPDIR:-/tmp}}/signal-guard.$PPID"
    return 0
  fi
  local child="" rc name="" sig="" resender=""
  GUARD_FILE="${RUN_DIR:-${TMPDIR:-/tmp}}/signal-guard.$$"
  mkdir -p -- "${GUARD_FILE%/*}"
  rm -f -- "$GUARD_FILE"
  # The relay starts from the trap itself: a signal that lands after the loop's check but
  # before its wait begins runs its trap there, and the wait that follows would block until
  # the script ended on its own (test_signal_guard hung so under load). The loop checks too,
  # for a signal that came before the child's pid was known.
  trap 'name=TERM sig=TERM; guard_relay' TERM
  trap 'name=INT sig=USR1; guard_relay' INT
  trap 'name=HUP sig=HUP; guard_relay' HUP
  VASTUI_SIGNAL_GUARD=$$ "$BASH" "$0" "$@" <&0 &
  child=$!
  while :; do
    guard_relay
    # Plain wait on the one pid: a first version with wait -n on the script and a ticker once
    # missed the script's end and waited on (not understood; not worth a clever loop), and bash
    # keeps a waited-for child's status for the next wait on its pid.
    wait "$child"
    if kill -0 "$child" 2>/dev/null; then # still there (or not yet reaped): a trap woke us
      continue
    fi
    wait "$child"
    rc=$?
    [[ -n $resender ]] && kill "$resender" 2>/dev/null
    rm -f -- "$GUARD_FILE"
    exit "$rc"
  done
}

# The guard's relay (signal_guard's locals, by bash's dynamic scope): once a signal is in and
# the script's pid known, say which in the guard file and send it to the script every second
# until it is gone (a trap bash lost in a $(…) is sent again). Once only.
guard_relay() {
  [[ -n $sig && -n $child && -z $resender ]] || return 0
  printf '%s\n' "$name" >"$GUARD_FILE"
  (while kill -s "$sig" "$child" 2>/dev/null; do sleep 1; done) &
  resender=$!
}

# True when the guard got a signal (TERM, INT or HUP: set in GUARD_SIG) whatever the traps saw.
guard_signalled() {
  [[ -n $GUARD_FILE && -s $GUARD_FILE ]] || return 1
  local line=""
  read -r line <"$GUARD_FILE" || true
  [[ $line == TERM || $line == INT || $line == HUP ]] || return 1
  # shellcheck disable=SC2034  # read by the scripts that source this file
  GUARD_SIG=$line
}

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

# The last modification of file $1 on the worker's clock (CLOCK_MS's scale), or status 1.
file_mtime_ms() {
  local t
  t=$(stat -c %.6Y -- "$1" 2>/dev/null) || return 1
  [[ $t =~ ^[0-9]+\.[0-9]{6}$ ]] || return 1
  t=${t/./}
  printf '%d' $(((10#$t - 10#$CLOCK_T0) * CLOCK_SCALE_M / 1000000))
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

# ------------------------------------------------------------------ the machine's plan
# What a worker must hold to prove what the marketplace sends it. A proofshare provider cannot
# refuse SnapDeals requests (lib/proofsvc/provictl.go:78-90, tasks/proofshare/task_prove.go:
# 271-289), so the plan is PoRep's and Snap's together, in GiB (extern/cuzk/cuzk-core/src):
#   SRS: the .params file the budget reserves (srs_manager.rs:181-190): PoRep 32G ~44.7 GiB,
#        SnapDeals 32G "33 GiB file" (srs_manager.rs:88-91)
#   PCE: PoRep 25.7 GiB (cuzk-project.md), SnapDeals ~17 GiB
#   the PCE being built: PCE_EXTRACTION_TRANSIENT_BYTES 14 GiB (memory.rs:57)
#   synthesis: 14 GiB per PoRep partition (memory.rs:39), at least two in flight
# vastui/engine/plan.py holds the same numbers (tests/test_worker_plan.py keeps them equal).
PLAN_POREP_SRS_GIB=45
PLAN_POREP_PCE_GIB=26
PLAN_SNAP_SRS_GIB=33
PLAN_SNAP_PCE_GIB=17
PLAN_PCE_BUILD_GIB=14
PLAN_PARTITION_GIB=14
PLAN_MIN_PARTITIONS=2
# Disk: every file `curio fetch-params 32GiB` writes with EnableProofShare (lib/fastparamfetch/
# paramfetch.go:82-98: each 32 GiB .params, every .vk, the .srs; ~135 GiB: PoRep 44.7, WindowPoSt
# 57, SnapDeals 33, WinningPoSt 0.2) and the PCE files the daemon saves (cuzk-pce/src/disk.rs)
# shellcheck disable=SC2034  # read by the scripts that source this file
PLAN_PARAMS_DISK_GIB=135
# shellcheck disable=SC2034
PLAN_PCE_DISK_GIB=43
# cuzk's default max_parallel_synthesis, 18, is its "sweet spot for DDR5 systems with 64 cores"
# (cuzk-core/src/config.rs:288-302, 358): the same share of a smaller container's cores.
CUZK_SYNTH_PER_64_CORES=18

# CPUs the container may use: the cgroup's CPU quota (v2 cpu.max, v1 cfs quota/period) and its
# cpuset (cpuset.cpus.effective, else nproc), whichever is less. Sets CPUS.
CPUS=1
container_cpus() {
  local f v quota period n=""
  f="$R/sys/fs/cgroup/cpuset.cpus.effective"
  if [[ -r $f ]]; then
    v=$(tr -d '[:space:]' <"$f")
    n=0
    local part lo hi
    IFS=, read -r -a parts <<<"$v"
    for part in "${parts[@]}"; do
      if [[ $part =~ ^([0-9]{1,5})-([0-9]{1,5})$ ]]; then
        lo=${BASH_REMATCH[1]} hi=${BASH_REMATCH[2]}
        ((hi >= lo)) && n=$((n + hi - lo + 1))
      elif [[ $part =~ ^[0-9]{1,5}$ ]]; then
        n=$((n + 1))
      fi
    done
    ((n > 0)) || n=""
  fi
  if [[ -z $n && -z $R ]]; then
    n=$(nproc 2>/dev/null) || n=""
  fi
  quota="" period=""
  if [[ -r $R/sys/fs/cgroup/cpu.max ]]; then
    read -r quota period <"$R/sys/fs/cgroup/cpu.max"
  elif [[ -r $R/sys/fs/cgroup/cpu/cpu.cfs_quota_us ]]; then
    quota=$(tr -d '[:space:]' <"$R/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
    period=$(tr -d '[:space:]' <"$R/sys/fs/cgroup/cpu/cpu.cfs_period_us" 2>/dev/null)
  fi
  if [[ $quota =~ ^[0-9]{1,12}$ && $period =~ ^[0-9]{1,9}$ ]] && ((period > 0)); then
    local q=$(((quota + period - 1) / period))
    if [[ -z $n ]] || ((q < n)); then n=$q; fi
  fi
  [[ $n =~ ^[0-9]+$ ]] && ((n > 0)) || n=1
  CPUS=$n
}

# The plan for this container: memory budget (the margin is CUZK_SAFETY_MARGIN_GIB, shared by
# the benchmark and production), what it must hold, and cuzk's tuning from its CPUs. Sets
# PLAN_NEED_GIB, PLAN_SHORT (a one-line reason when the budget cannot hold the plan, else empty),
# MAX_PARALLEL_SYNTH, GPU_THREADS, SYNTH_THREADS (and MEM_BUDGET_GIB via memory_budget).
PLAN_NEED_GIB=0
PLAN_SHORT=""
MAX_PARALLEL_SYNTH=1
GPU_THREADS=1
SYNTH_THREADS=1
cuzk_plan() { # $1 = safety margin in GiB
  local margin=$1 resident
  memory_budget "$margin"
  container_cpus
  resident=$((PLAN_POREP_SRS_GIB + PLAN_POREP_PCE_GIB + PLAN_SNAP_SRS_GIB + PLAN_SNAP_PCE_GIB))
  PLAN_NEED_GIB=$((resident + PLAN_PCE_BUILD_GIB + PLAN_MIN_PARTITIONS * PLAN_PARTITION_GIB))
  PLAN_SHORT=""
  if [[ -n $MEM_BUDGET_GIB ]] && ((MEM_BUDGET_GIB < PLAN_NEED_GIB)); then
    local have="container limit $((${MEM_LIMIT_BYTES:-0} / 1073741824)) GiB"
    [[ -n $MEM_LIMIT_BYTES ]] || have="MemTotal $((${MEM_TOTAL_BYTES:-0} / 1073741824)) GiB"
    if [[ -n $MEM_LIMIT_BYTES && -n $MEM_TOTAL_BYTES ]] && ((MEM_TOTAL_BYTES < MEM_LIMIT_BYTES)); then
      have="MemTotal $((MEM_TOTAL_BYTES / 1073741824)) GiB"
    fi
    # shellcheck disable=SC2034  # read by the scripts that source this file
    PLAN_SHORT="memory plan needs ${PLAN_NEED_GIB} GiB (PoRep SRS ${PLAN_POREP_SRS_GIB} + PCE ${PLAN_POREP_PCE_GIB}, Snap SRS ${PLAN_SNAP_SRS_GIB} + PCE ${PLAN_SNAP_PCE_GIB}, PCE build ${PLAN_PCE_BUILD_GIB}, ${PLAN_MIN_PARTITIONS} partitions x ${PLAN_PARTITION_GIB}); the budget is ${MEM_BUDGET_GIB} GiB (${have} - margin ${margin} GiB)"
  fi
  MAX_PARALLEL_SYNTH=$((CPUS * CUZK_SYNTH_PER_64_CORES / 64))
  ((MAX_PARALLEL_SYNTH < 1)) && MAX_PARALLEL_SYNTH=1
  ((MAX_PARALLEL_SYNTH > CUZK_SYNTH_PER_64_CORES)) && MAX_PARALLEL_SYNTH=$CUZK_SYNTH_PER_64_CORES
  # "~1/3 of available cores" for the GPU-side pool while synthesis runs (config.rs:146-155)
  GPU_THREADS=$((CPUS / 3))
  ((GPU_THREADS < 1)) && GPU_THREADS=1
  # rayon's "auto" counts the host's cores, not the container's quota: say it
  SYNTH_THREADS=$CPUS
  return 0
}

# cuzk-daemon's config, one writer for the benchmark and production (same budget, same margin,
# same tuning): $1 = path, $2 = safety margin in GiB. Keys: cuzk-core/src/config.rs.
write_cuzk_config() {
  local file=$1 margin=$2 budget='"auto"' param_dir="$R/data/zk/params"
  cuzk_plan "$margin"
  [[ -n $MEM_BUDGET_GIB ]] && budget="\"${MEM_BUDGET_GIB}GiB\""
  mkdir -p -- "$param_dir" "$(dirname -- "$file")"
  {
    printf '# generated by vastui-lib.sh write_cuzk_config (cuzk-core/src/config.rs keys)\n'
    printf '[daemon]\nlisten = %s\nstatus_listen = %s\n\n' \
      "$(json_str "$CUZK_LISTEN")" "$(json_str "$CUZK_STATUS_ADDR")"
    printf '[srs]\nparam_cache = %s\n\n' "$(json_str "$param_dir")"
    # The plan holds both SRS and both PCEs resident: none is evicted for being idle. cuzk's
    # default eviction_min_idle (5m, config.rs:70-74) lets any synthesis short of memory evict a
    # PCE no proof has dispatched for 5 min (no synthesis uses it at e0294b0f, so it is always
    # idle): the benchmark's own timed run evicts the PCEs its warmup cached, and production
    # starts cold; every proof curio then sends before the PCE is cached again starts its own
    # extraction (engine.rs:2268-2290), each holding 14 GiB while insert_blocking polls for the
    # PCE's room (pipeline.rs:432-492): a burst leaves room for neither, and the daemon proves
    # nothing again (RELIABILITY.md). config.rs:471-480 reads minutes: ~2 years.
    printf '[memory]\ntotal_budget = %s\nsafety_margin = "%dGiB"\neviction_min_idle = "1000000m"\n\n' \
      "$budget" "$margin"
    printf '[gpus]\ngpu_threads = %d\n\n' "$GPU_THREADS"
    printf '[synthesis]\nthreads = %d\n\n' "$SYNTH_THREADS"
    printf '[pipeline]\nmax_parallel_synthesis = %d\n\n' "$MAX_PARALLEL_SYNTH"
    printf '[logging]\nlevel = "info"\n'
  } >"$file"
}

# x86-64-v3, which curio's GOAMD64=v3 build needs (scripts/makefiles/30-build.mk:11; Go's
# definition of the levels): the flags /proc/cpuinfo names for v2 (SSE3 shows as pni) and v3
# (LZCNT shows as abm; OSXSAVE is not listed). Prints the missing ones.
CPU_V3_FLAGS="cx16 lahf_lm popcnt pni ssse3 sse4_1 sse4_2 avx avx2 bmi1 bmi2 f16c fma abm movbe xsave"
missing_cpu_flags() {
  local info="$R/proc/cpuinfo" flags flag out=""
  [[ -r $info ]] || return 0
  flags=" $(sed -nE 's/^flags[[:space:]]*:[[:space:]]*(.*)$/\1/p' "$info" | head -n 1) "
  for flag in $CPU_V3_FLAGS; do
    [[ $flags == *" $flag "* ]] || out+="${out:+ }$flag"
  done
  printf '%s' "$out"
}

# Free disk (GiB) where the parameters go; WORKER_DISK_FREE_GIB stands in for df in the
# simulator, whose sandboxes share this machine's disk.
disk_free_gib() {
  if [[ ${WORKER_DISK_FREE_GIB:-} =~ ^[0-9]{1,7}$ ]]; then
    printf '%d' "$WORKER_DISK_FREE_GIB"
    return 0
  fi
  local kb
  kb=$(df -Pk -- "$1" 2>/dev/null | awk 'NR == 2 { print $4 }')
  [[ $kb =~ ^[0-9]+$ ]] || return 1
  printf '%d' $((kb / 1048576))
}

# ------------------------------------------------------------------ curio's deadline
# curio's [Cuzk] ProveTimeout runs from the Prove call, the daemon's queue included
# (lib/cuzk/client.go:116-122), and curio keeps up to MaxPending calls in flight
# (client.go:46-62): at the measured rate R a proof waits MaxPending / R in steady state
# (Little's law) and up to (MaxPending - 1) / R + S when the calls arrive together (a curio that
# starts, a burst of tasks; S is a proof's own service time: the last completes S after it was
# sent plus MaxPending - 1 completions ahead of it). A call past the deadline is retried while
# the daemon goes on with the old job (no CancelProof, cuzk-server/src/service.rs:173-183): the
# GPU proves work nobody waits for. So production runs with the largest MaxPending (up to the
# configured one) whose worst wait fits ProveTimeout / (1 + margin); fewer proofs in flight than
# R x S would starve the pipeline, and the rate it can then keep, at most M / S, is what the
# benchmark's verdict holds against MIN_RATE.
# In: $1 rate (milli-proofs/h), $2 service time (ms), $3 configured MaxPending, $4 ProveTimeout
# (ms), $5 margin (thousandths). Sets SIZED_MAX_PENDING (0: no MaxPending fits), SIZED_RATE_M
# (milli-proofs/h it can keep at that MaxPending), SIZED_LATENCY_MS, SIZED_LIMIT_MS.
# vastui/engine/plan.py deadline_sizing computes the same (tests/test_worker_plan.py).
SIZED_MAX_PENDING=0
SIZED_RATE_M=0
SIZED_LATENCY_MS=0
SIZED_LIMIT_MS=0
deadline_size() {
  local rate_m=$1 service_ms=$2 maxp=$3 timeout_ms=$4 margin_m=$5 fit
  SIZED_LIMIT_MS=$((timeout_ms * 1000 / (1000 + margin_m)))
  SIZED_MAX_PENDING=0 SIZED_RATE_M=0 SIZED_LATENCY_MS=0
  ((rate_m > 0 && service_ms > 0 && maxp > 0)) || return 0
  if ((service_ms > SIZED_LIMIT_MS)); then
    # shellcheck disable=SC2034  # read by the scripts that source this file
    SIZED_LATENCY_MS=$service_ms # a proof alone outlasts the deadline
    return 0
  fi
  fit=$(((SIZED_LIMIT_MS - service_ms) * rate_m / 3600000000 + 1))
  ((fit > maxp)) && fit=$maxp
  # shellcheck disable=SC2034
  SIZED_LATENCY_MS=$(((fit - 1) * 3600000000 / rate_m + service_ms))
  # shellcheck disable=SC2034
  SIZED_MAX_PENDING=$fit
  SIZED_RATE_M=$((fit * 3600000000 / service_ms))
  ((SIZED_RATE_M > rate_m)) && SIZED_RATE_M=$rate_m
  return 0
}

# A Go duration ("30m", "1h30m", "90s", "1800s") in milliseconds; 30 min when unreadable.
duration_ms() {
  local text=$1 total=0 re='^([0-9]{1,7})(h|m|s)(.*)$' n unit
  while [[ $text =~ $re ]]; do
    n=$((10#${BASH_REMATCH[1]})) unit=${BASH_REMATCH[2]} text=${BASH_REMATCH[3]}
    case $unit in
      h) total=$((total + n * 3600000)) ;;
      m) total=$((total + n * 60000)) ;;
      s) total=$((total + n * 1000)) ;;
    esac
  done
  [[ -z $text && $total -gt 0 ]] || total=1800000
  printf '%d' "$total"
}

# The curio listen address of runner $1 with port base $2, as the controller derives it
# (vastui/engine/identity.py: 127.0.0.1:<base + id>, wrapping past 65535).
runner_listen() {
  printf '127.0.0.1:%d' $(($2 + 1 + ($1 - 1) % (65535 - $2)))
}
