#!/usr/bin/env bash
# Where ownerguard's time goes per review: the hot
# path of bench/load.sh (a 3.4 KB Pod CREATE that gets a patch, 150,000-pod
# inventory, decision log on, HTTP/1.1 keep-alive), profiled two ways:
#
#   callgrind  instruction counts (valgrind --tool=callgrind), collected only
#              while the timed reviews run (instrumentation off at start,
#              then callgrind_control -i on/off around them, the counts of
#              each regime dumped apart): they repeat from run to run on a
#              noisy machine. Instructions per review, ownerguard's and the
#              ceiling's (examples/ceiling.rs, the same way), in two
#              regimes: one keep-alive connection answering one review at a
#              time (an API server with little traffic) and 16 connections
#              (bench/load.sh's); the log in the chart's format (json). Then
#              the top functions of ownerguard at 16 connections by
#              inclusive and by self cost, and self cost grouped by what it
#              is (TLS, JSON, logging, allocation, patch, HTTP, runtime).
#   perf       cpu-clock samples (software event: this VM has no hardware
#              counters) at full speed, one core, 16 connections, of
#              ownerguard and then of the ceiling the same way: the CPU
#              time an answer takes on the server's core, the kernel's
#              and user space's, for both (what of the gap is the
#              kernel's); then ownerguard's top functions by self samples
#              and the same grouping, kernel included (no call graph: the
#              release build keeps no frame pointers; callgrind gives the
#              inclusive view).
#
#   bash bench/profile.sh [callgrind|perf|both] [SECONDS]   (both 15)
#
# With PROFILE_TRACING=sampled (or unsampled), ownerguard serves with
# --tracing, exporting to an OTLP sink on loopback (python3, answers 200),
# and every review carries a traceparent of a trace of its own, sampled
# (or not): the cost of traces, the export included. header-only: the
# unsampled traceparent without --tracing (what a tracing API server sends
# to a webhook that does not trace), the base to compare them with.
#
# The release binary as built (symbols, no debug info: inlined functions
# count in their caller). Reports and raw data go to
# ${PROFILE_OUT:-target/profile}/. Loopback only; bounded.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
what=${1:-both}
seconds=${2:-15}
out_dir="${PROFILE_OUT:-$TARGET/profile}"
mkdir -p "$out_dir"

bench_init
bench_build review_load ceiling
inventory="$(bench_inventory 150000 names json)"
body="$BENCH_DIR/review-create-3k.json"
og_expect=('"allowed":true' '"patch":')
ceiling_expect=('"allowed":true')
expects=(--expect '"allowed":true' --expect '"patch":')
tracing=()
load_tracing=()
if [[ "${PROFILE_TRACING:-}" == header-only ]]; then
  # What an API server that traces sends to a webhook that does not.
  load_tracing=(--traceparent unsampled)
  blog "tracing off, every review with an unsampled traceparent"
elif [[ -n "${PROFILE_TRACING:-}" ]]; then
  [[ "$PROFILE_TRACING" == sampled || "$PROFILE_TRACING" == unsampled ]] ||
    die "PROFILE_TRACING is sampled, unsampled or header-only, not $PROFILE_TRACING"
  # An OTLP/HTTP endpoint that takes every export and answers 200.
  sink_port_file="$BENCH_WORK/otlp-sink.port"
  python3 -c '
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
open(sys.argv[1], "w").write(str(server.server_address[1]))
server.serve_forever()
' "$sink_port_file" &
  BENCH_PIDS+=("$!")
  for _ in $(seq 1 100); do [[ -s "$sink_port_file" ]] && break; sleep 0.05; done
  export OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$(cat "$sink_port_file")"
  # Every review the client samples is traced: no budget a second.
  tracing=(--tracing --tracing-max-per-second 4294967295)
  load_tracing=(--traceparent "$PROFILE_TRACING")
  blog "tracing on, every review's trace $PROFILE_TRACING, exported to $OTEL_EXPORTER_OTLP_ENDPOINT"
fi

# What a symbol is, by the crate or function it comes from: the first
# pattern that matches wins.
categorize() {
  awk -v total="$1" '
    BEGIN {
      n = split("kernel (system calls, TCP)|TLS (rustls, ring)|logging (tracing, its formatting and write)|JSON (serde_json, serde, the maps and strings it builds)|allocation (malloc, free, realloc)|copying (memcpy, memmove)|JSON patch, base64|HTTP (hyper, axum, http, tower, bytes)|metrics (prometheus-client)|runtime (tokio, futures, locks, clock)|ownerguard (decision, lookup)|other", names, "|")
      pat[1] = "\\[k\\]"
      pat[2] = "rustls|ring::|ring_core|aes_|gcm_|chacha|x25519|sha256|sha512|poly1305"
      pat[3] = "tracing|core::fmt|alloc::fmt|fmt::Write|write_all|zmij|nu_ansi|sharded_slab|std::io::stdio|__GI___libc_write|__GI___writev"
      pat[4] = "serde_json|serde::|serde_core|serde_derive|<serde|btree|from_utf8"
      pat[5] = "malloc|free|realloc|calloc|_int_|tcache|unlink_chunk|alloc::raw_vec|__rust_alloc|__rust_dealloc|__rust_realloc|arena_|sysmalloc"
      pat[6] = "memcpy|memmove|memset"
      pat[7] = "json_patch|jsonptr|base64"
      pat[8] = "hyper|axum|http::|http_body|tower|matchit|httparse|bytes::"
      pat[9] = "prometheus"
      pat[10] = "tokio|futures|mio::|parking_lot|std::sync|std::thread|core::sync|__lll_|pthread|futex|epoll|clock_gettime|__vdso"
      pat[11] = "ownerguard"
    }
    {
      cost = $1; $1 = ""; sym = $0
      for (i = 1; i <= n; i++) if (i == n || sym ~ pat[i]) { sum[i] += cost; break }
    }
    END {
      printf "| what (self cost, by symbol name) | share |\n|---|---|\n"
      for (i = 1; i <= n; i++) if (sum[i] > 0) printf "| %s | %.1f %% |\n", names[i], 100 * sum[i] / total
    }'
}

# callgrind_reviews NAME PID ADDR CA CONNECTIONS EXPECT...: warm PID's
# server, then open the client's CONNECTIONS connections (handshakes),
# switch instrumentation on, run the reviews, switch it off and dump the
# counts (a file of their own, callgrind's next part); prints how many were
# answered. The count is of reviews on open keep-alive connections, as the
# API server reuses them.
callgrind_reviews() {
  local name=$1 pid=$2 addr=$3 ca=$4 connections=$5
  shift 5
  local expect=() e traced=()
  for e in "$@"; do expect+=(--expect "$e"); done
  # Traces (PROFILE_TRACING): ownerguard's reviews only.
  [[ "$name" == ownerguard ]] && traced=("${load_tracing[@]}")
  "$RELEASE/examples/review_load" --addr "$addr" --ca "$ca" --body "$body" \
    --connections "$connections" --seconds 3 "${expect[@]}" "${traced[@]}" >/dev/null 2>>"$BENCH_WORK/client.log" || die "warm-up of $name failed"
  local out="$BENCH_WORK/callgrind-$name-$connections.out" log="$BENCH_WORK/callgrind-$name-$connections.log"
  "$RELEASE/examples/review_load" --addr "$addr" --ca "$ca" --body "$body" \
    --connections "$connections" --seconds "$seconds" --hold 3 "${expect[@]}" "${traced[@]}" >"$out" 2>"$log" &
  local client=$!
  BENCH_PIDS+=("$client")
  for _ in $(seq 1 200); do
    grep -q '^connected' "$log" 2>/dev/null && break
    sleep 0.05
  done
  grep -q '^connected' "$log" || die "the client of $name did not connect within 10 s"
  callgrind_control -z "$pid" >/dev/null 2>&1
  callgrind_control -i on "$pid" >/dev/null 2>&1
  wait "$client" || die "load on $name failed: $(tail -n 3 "$log")"
  callgrind_control -i off "$pid" >/dev/null 2>&1
  callgrind_control -d "$name-$connections" "$pid" >/dev/null 2>&1
  local result
  result="$(tail -n 1 "$out")"
  [[ "$(jq .errors <<<"$result")" == 0 ]] || die "errors on $name under callgrind: $(tail -n 3 "$log")"
  jq .answers <<<"$result"
}

# The callgrind part whose dump is named DUMP (callgrind_control -d DUMP).
callgrind_part() {
  grep -l "^desc: Trigger: .*dump $2\$" "$1".* 2>/dev/null | sed -n 1p
}

# Instructions counted in a callgrind output file.
callgrind_total() {
  callgrind_annotate --threshold=100 "$1" 2>/dev/null |
    awk '/PROGRAM TOTALS/ && !done { gsub(",", "", $1); print $1; done = 1 }'
}

# The connection counts of the two regimes.
REGIMES=(1 16)

run_callgrind() {
  command -v valgrind >/dev/null || die "valgrind is not installed (apt-get install valgrind)"
  local cg="$out_dir/callgrind.out" cg_ceiling="$out_dir/callgrind-ceiling.out"
  rm -f "$cg"* "$cg_ceiling"*
  blog "callgrind: ownerguard under valgrind (the inventory loads slowly there)"
  OG_WRAPPER="valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$cg" \
    OG_START_TIMEOUT=900 og_start callgrind "" --pods "$inventory" "${tracing[@]}" || die "ownerguard did not start under valgrind"
  wait_ready "$OG_METRICS" 900
  local certs="$OG_DIR/certs" c
  declare -A answers ceiling_answers
  for c in "${REGIMES[@]}"; do
    answers[$c]=$(callgrind_reviews ownerguard "$OG_PID" "$OG_ADDR" "$certs/ca.crt" "$c" "${og_expect[@]}")
  done
  stop_pid "$OG_PID"

  # The ceiling the same way, with the same certificate: its instructions
  # per review are the floor of this stack in user space.
  blog "callgrind: the ceiling under valgrind"
  ceiling_start ceiling "$certs" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$cg_ceiling"
  local ceiling=$CEILING_PID ceiling_addr=$CEILING_ADDR
  for c in "${REGIMES[@]}"; do
    ceiling_answers[$c]=$(callgrind_reviews ceiling "$ceiling" "$ceiling_addr" "$certs/ca.crt" "$c" "${ceiling_expect[@]}")
  done
  stop_pid "$ceiling"
  echo
  echo "callgrind: instructions per review in user space (all threads, handshakes excluded, log json):"
  echo
  echo "| connections | ownerguard | the ceiling | ratio | reviews counted (ownerguard / ceiling) |"
  echo "|---|---|---|---|---|"
  local og_part ceiling_part og_per ceiling_per
  for c in "${REGIMES[@]}"; do
    og_part="$(callgrind_part "$cg" "ownerguard-$c")"
    ceiling_part="$(callgrind_part "$cg_ceiling" "ceiling-$c")"
    [[ -n "$og_part" && -n "$ceiling_part" ]] || die "callgrind wrote no dump for $c connections"
    og_per=$(awk -v t="$(callgrind_total "$og_part")" -v a="${answers[$c]}" 'BEGIN { printf "%.0f", t / a }')
    ceiling_per=$(awk -v t="$(callgrind_total "$ceiling_part")" -v a="${ceiling_answers[$c]}" 'BEGIN { printf "%.0f", t / a }')
    printf '| %s | %s | %s | %sx |  %s / %s |\n' "$c" "$og_per" "$ceiling_per" \
      "$(awk -v a="$og_per" -v b="$ceiling_per" 'BEGIN { printf "%.2f", a / b }')" "${answers[$c]}" "${ceiling_answers[$c]}"
  done
  echo
  echo "(the kernel's share, TCP and system calls, is not counted: see perf)"
  local file
  file="$(callgrind_part "$cg" "ownerguard-16")"
  callgrind_annotate --inclusive=yes "$file" >"$out_dir/callgrind-inclusive.txt" 2>/dev/null
  callgrind_annotate --threshold=100 "$file" >"$out_dir/callgrind-self.txt" 2>/dev/null
  local total
  total=$(awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }' "$out_dir/callgrind-self.txt")
  echo
  echo "ownerguard at 16 connections, top 45 by inclusive cost (share of all instructions while collecting; the first are the runtime's and hyper's frames around everything):"
  echo
  echo "| share | function |"
  echo "|---|---|"
  awk -v total="$total" -v limit=45 '/^ *[0-9,]+ +\([ 0-9.]+%\) +[^ ]+:/ && n < limit {
      cost = $1; gsub(",", "", cost); $1 = ""; $2 = ""; sub(/^ +/, "")
      sub(/ \[[^]]*\]$/, ""); sub(/^[^:]*:/, "")
      if (length($0) > 140) $0 = substr($0, 1, 140) "..."
      printf "| %.1f %% | `%s` |\n", 100 * cost / total, $0; n++ }' "$out_dir/callgrind-inclusive.txt"
  echo
  echo "top 25 by self cost:"
  echo
  echo "| share | function |"
  echo "|---|---|"
  awk -v total="$total" -v limit=25 '/^ *[0-9,]+ +\([ 0-9.]+%\) +[^ ]+:/ && n < limit {
      cost = $1; gsub(",", "", cost); $1 = ""; $2 = ""; sub(/^ +/, "")
      sub(/ \[[^]]*\]$/, ""); sub(/^[^:]*:/, "")
      if (length($0) > 140) $0 = substr($0, 1, 140) "..."
      printf "| %.1f %% | `%s` |\n", 100 * cost / total, $0; n++ }' "$out_dir/callgrind-self.txt"
  echo
  echo "self cost by kind:"
  echo
  awk '/^ *[0-9,]+ +\([ 0-9.]+%\) +[^ ]+:/ { cost = $1; gsub(",", "", cost); $1 = ""; $2 = ""
      sub(/^ +/, ""); sub(/ \[[^]]*\]$/, ""); sub(/^[^:]*:/, ""); print cost, $0 }' \
    "$out_dir/callgrind-self.txt" | categorize "$total"
}

# perf_samples NAME PID ADDR CA EXPECT...: sample PID's server (cpu-clock,
# every thread, kernel included) while the client drives it on core 0 over
# 16 connections; writes $out_dir/perf-NAME.data and prints the client's
# JSON result line.
perf_samples() {
  local name=$1 pid=$2 addr=$3 ca=$4
  shift 4
  local expect=() e traced=()
  for e in "$@"; do expect+=(--expect "$e"); done
  [[ "$name" == ownerguard ]] && traced=("${load_tracing[@]}")
  taskset -c 0 "$RELEASE/examples/review_load" --addr "$addr" --ca "$ca" --body "$body" \
    --connections 16 --seconds 3 "${expect[@]}" "${traced[@]}" >/dev/null 2>>"$BENCH_WORK/client.log" || die "warm-up of $name failed"
  perf record -e cpu-clock -F 1999 -p "$pid" -o "$out_dir/perf-$name.data" -- sleep "$seconds" \
    >"$BENCH_WORK/perf-record-$name.log" 2>&1 &
  local perf_pid=$!
  BENCH_PIDS+=("$perf_pid")
  local result
  result="$(taskset -c 0 "$RELEASE/examples/review_load" --addr "$addr" --ca "$ca" --body "$body" \
    --connections 16 --seconds "$seconds" "${expect[@]}" "${traced[@]}" 2>>"$BENCH_WORK/client.log" | tail -n 1)" || die "load on $name failed"
  wait "$perf_pid" || die "perf record of $name failed: $(tail -n 3 "$BENCH_WORK/perf-record-$name.log")"
  echo "$result"
}

# Samples of a perf data file: all, and the kernel's ([k]).
perf_counts() {
  perf report -i "$1" --no-children --sort symbol --stdio -n --percent-limit 0 2>/dev/null |
    awk '/^ +[0-9.]+%/ { all += $2; if ($3 == "[k]") kernel += $2 } END { print all + 0, kernel + 0 }'
}

run_perf() {
  command -v perf >/dev/null || die "perf is not installed"
  blog "perf: ownerguard on core 1, client on core 0, ${seconds}s"
  og_start perf 1 --pods "$inventory" "${tracing[@]}" || die "ownerguard did not start"
  wait_ready "$OG_METRICS" 120
  local certs="$OG_DIR/certs" result ceiling_result
  result="$(perf_samples ownerguard "$OG_PID" "$OG_ADDR" "$certs/ca.crt" "${og_expect[@]}")"
  stop_pid "$OG_PID"

  # The ceiling the same way, on the same core: what an answer costs the
  # kernel (TCP, system calls, wake-ups) when the server does least.
  blog "perf: the ceiling on core 1, client on core 0, ${seconds}s"
  ceiling_start ceiling-perf "$certs" taskset -c 1
  local ceiling=$CEILING_PID ceiling_addr=$CEILING_ADDR
  ceiling_result="$(perf_samples ceiling "$ceiling" "$ceiling_addr" "$certs/ca.crt" "${ceiling_expect[@]}")"
  stop_pid "$ceiling"

  cp "$out_dir/perf-ownerguard.data" "$out_dir/perf.data"
  perf report -i "$out_dir/perf.data" --no-children --sort symbol --stdio --percent-limit 0.01 \
    2>/dev/null | grep -E '^ +[0-9.]+%' | sed -E 's/ +- +- *$//; s/ +/ /g; s/^ //' >"$out_dir/perf-self.txt"
  echo
  echo "perf: ownerguard answered $(jq .answers <<<"$result") reviews at $(jq .per_second <<<"$result")/s while sampled, the ceiling $(jq .answers <<<"$ceiling_result") at $(jq .per_second <<<"$ceiling_result")/s (each alone on core 1)"
  echo
  echo "CPU time per answer on the server's core (samples at 1999 Hz, every thread):"
  echo
  echo "| server | µs an answer | of it the kernel's | user space | kernel share |"
  echo "|---|---|---|---|---|"
  local name counts answers
  for name in ownerguard ceiling; do
    counts="$(perf_counts "$out_dir/perf-$name.data")"
    if [[ "$name" == ownerguard ]]; then answers=$(jq .answers <<<"$result"); else answers=$(jq .answers <<<"$ceiling_result"); fi
    awk -v name="$name" -v all="${counts% *}" -v kernel="${counts#* }" -v answers="$answers" 'BEGIN {
        us = all / 1999 / answers * 1e6; k = kernel / 1999 / answers * 1e6
        printf "| %s | %.2f | %.2f | %.2f | %.0f %% |\n", name, us, k, us - k, 100 * kernel / all }'
  done
  echo
  echo "top 30 of ownerguard by self samples ([k]: kernel):"
  echo
  echo "| share | function |"
  echo "|---|---|"
  awk 'n < 30 { share = $1; $1 = ""; sub(/^ +/, ""); if (length($0) > 140) $0 = substr($0, 1, 140) "..."
      printf "| %s | `%s` |\n", share, $0; n++ }' "$out_dir/perf-self.txt"
  echo
  echo "ownerguard's self samples by kind:"
  echo
  awk '{ share = $1; sub("%", "", share); $1 = ""; print share * 1000, $0 }' "$out_dir/perf-self.txt" |
    categorize 100000
}

case "$what" in
  callgrind) run_callgrind ;;
  perf) run_perf ;;
  both) run_callgrind; run_perf ;;
  *) die "unknown profile $what (callgrind, perf or both)" ;;
esac
echo
echo "raw data and full reports: $out_dir"
