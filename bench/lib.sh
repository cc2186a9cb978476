# shellcheck shell=bash
# Shared by the bench scripts: build, start `ownerguard serve` and read what
# the kernel says of a process. Sourced; talks to the binary only through
# its command line, its log and its ports, never through its modules.
#
# Every script runs on loopback and ends what it started (by pid) on exit.

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$BENCH_DIR/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
[[ "$TARGET" = /* ]] || TARGET="$REPO/$TARGET"
RELEASE="$TARGET/release"
# Generated inventories are kept here between runs (they take a minute).
BENCH_DATA="${BENCH_DATA:-${TMPDIR:-/tmp}/og-bench}"
BENCH_PIDS=()
BENCH_WORK=""

blog() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { blog "error: $*"; exit 1; }

# A work directory removed on exit, and every started process ended.
bench_init() {
  BENCH_WORK="$(mktemp -d "${TMPDIR:-/tmp}/og-bench-run.XXXXXX")"
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

bench_cleanup() {
  local rc=$? pid
  set +e
  for pid in "${BENCH_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null
  done
  for pid in "${BENCH_PIDS[@]}"; do
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
  done
  if [[ -n "$BENCH_WORK" && -d "$BENCH_WORK" ]]; then
    if [[ $rc -eq 1 ]]; then
      local f
      for f in "$BENCH_WORK"/*.log; do
        [[ -f "$f" ]] || continue
        printf '\n----- last lines of %s\n' "$(basename "$f")" >&2
        tail -n 15 "$f" >&2
      done
    fi
    if [[ -n "${BENCH_KEEP:-}" ]]; then
      blog "kept $BENCH_WORK"
    else
      rm -rf "$BENCH_WORK"
    fi
  fi
  exit $rc
}

# cargo build --release of the named examples, then of the binary alone:
# built together, the binary would get the dev-dependencies' features
# (tokio's test-util...) and not be the binary that ships.
bench_build() {
  # With the release build's flags (release/lib.sh): the binary measured
  # is the one that ships, and e2e and the image share its build.
  # shellcheck source=release/lib.sh
  source "$REPO/release/lib.sh"
  local args=(--quiet) example
  if [[ $# -gt 0 ]]; then
    for example in "$@"; do args+=(--example "$example"); done
    blog "cargo build --release --locked ${args[*]}"
    release_build "$REPO" "${args[@]}" || die "build failed"
  fi
  blog "cargo build --release --locked --bin ownerguard"
  release_build "$REPO" --quiet --bin ownerguard || die "build failed"
}

# The inventory of N pods of SHAPE (real, names) in FORMAT (json, yaml),
# generated once into BENCH_DATA; its path on stdout. The file name carries
# the generator's hash, so a changed generator makes new files.
bench_inventory() {
  local pods=$1 shape=$2 format=$3 hash file
  hash="$(sha256sum "$BENCH_DIR/inventory.py" | cut -c1-8)"
  file="$BENCH_DATA/pods-$shape-$pods-$hash.$format"
  if [[ ! -s "$file" ]]; then
    mkdir -p "$BENCH_DATA"
    blog "generating $file"
    python3 "$BENCH_DIR/inventory.py" --pods "$pods" --shape "$shape" --format "$format" \
      --out "$file.tmp" || die "inventory generation failed"
    mv "$file.tmp" "$file"
  fi
  echo "$file"
}

# og_start NAME [taskset CPU list or ""] ARGS...: start `ownerguard serve
# --dev` (a CA and a localhost certificate in $BENCH_WORK/NAME/certs) on
# loopback ports it picks, logging JSON into $BENCH_WORK/NAME.log; wait for
# its `serving` line. Sets OG_PID, OG_ADDR (host:port), OG_METRICS, OG_DIR (its working directory, holding certs/), OG_LOG.
# Returns 1 when it exits before serving (its last error in OG_ERROR).
og_start() {
  local name=$1 cpus=$2
  shift 2
  OG_DIR="$BENCH_WORK/$name"
  mkdir -p "$OG_DIR"
  OG_LOG="$BENCH_WORK/$name.log"
  OG_ERROR=""
  local log="$OG_LOG" pin=()
  [[ -n "$cpus" ]] && pin=(taskset -c "$cpus")
  # OG_WRAPPER: a command to run it under (valgrind ...), word-split.
  # shellcheck disable=SC2086
  (cd "$OG_DIR" && exec "${pin[@]}" ${OG_WRAPPER:-} "$RELEASE/ownerguard" serve --dev --addr 127.0.0.1:0 \
    --metrics-addr 127.0.0.1:0 --log-format json "$@" 2>"$log" >/dev/null) &
  OG_PID=$!
  BENCH_PIDS+=("$OG_PID")
  local line="" deadline=$((SECONDS + ${OG_START_TIMEOUT:-600}))
  while [[ -z "$line" ]]; do
    if ! kill -0 "$OG_PID" 2>/dev/null; then
      OG_ERROR="$(grep -m1 '^ownerguard: ' "$log" || tail -n 1 "$log")"
      blog "ownerguard ($name) exited before serving: $OG_ERROR"
      return 1
    fi
    ((SECONDS < deadline)) || die "ownerguard ($name) not serving after ${OG_START_TIMEOUT:-600}s"
    line="$(grep -m1 '"message":"serving"' "$log" || true)"
    [[ -n "$line" ]] || sleep 0.05
  done
  # shellcheck disable=SC2034 # read by the scripts that source this
  OG_ADDR="$(jq -r .addr <<<"$line")"
  # shellcheck disable=SC2034
  OG_METRICS="$(jq -r .metrics_addr <<<"$line")"
}

# ceiling_start NAME CERTS [PREFIX...]: start examples/ceiling with the
# certificate and key in CERTS (tls.crt, tls.key), run under PREFIX
# (taskset, valgrind ...), writing $BENCH_WORK/NAME.out and NAME.log;
# wait for its address (30 s at most, less when it exits). Sets
# CEILING_PID and CEILING_ADDR.
ceiling_start() {
  local name=$1 certs=$2
  shift 2
  local out="$BENCH_WORK/$name.out"
  "$@" "$RELEASE/examples/ceiling" --tls-cert "$certs/tls.crt" --tls-key "$certs/tls.key" \
    >"$out" 2>"$BENCH_WORK/$name.log" &
  CEILING_PID=$!
  BENCH_PIDS+=("$CEILING_PID")
  for _ in $(seq 1 600); do
    [[ -s "$out" ]] && break
    kill -0 "$CEILING_PID" 2>/dev/null || break
    sleep 0.05
  done
  # shellcheck disable=SC2034 # read by the scripts that source this
  CEILING_ADDR="$(jq -r .addr "$out" 2>/dev/null)" && [[ -n "$CEILING_ADDR" && "$CEILING_ADDR" != null ]] ||
    die "the ceiling ($name) did not start: $(tail -n 3 "$BENCH_WORK/$name.log")"
}

# Wait until http://$1/readyz answers 200 (at most $2 seconds).
wait_ready() {
  local metrics=$1 limit=${2:-600} deadline
  deadline=$((SECONDS + limit))
  until curl -fsS -o /dev/null "http://$metrics/readyz" 2>/dev/null; do
    ((SECONDS < deadline)) || die "not ready after ${limit}s"
    sleep 0.02
  done
}

# A field of /proc/PID/status in KiB (VmRSS, VmHWM...).
proc_kb() {
  awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null
}

# Reset the peak RSS (VmHWM) of PID to its current RSS (Linux >= 4.0).
reset_hwm() {
  echo 5 >"/proc/$1/clear_refs"
}

# Open file descriptors of PID.
fd_count() {
  find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l
}

# CPU time (user + system) of PID, in clock ticks.
cpu_ticks() {
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}

mib() { awk -v kb="$1" 'BEGIN { printf "%.1f", kb / 1024 }'; }

# Stop PID with SIGTERM and wait (at most 30 s).
stop_pid() {
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
}

# The soft limit of open files raised to the hard limit; fails when the
# hard limit is under $1.
raise_nofile() {
  local need=$1 hard
  hard="$(ulimit -Hn)"
  [[ "$hard" == unlimited ]] && hard=1048576
  ulimit -n "$hard" || die "cannot raise ulimit -n to $hard"
  ((hard >= need)) || die "ulimit -n is at most $hard here, $need are needed"
}
