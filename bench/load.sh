#!/usr/bin/env bash
# ownerguard's throughput as a share of its own stack's ceiling (goal:
# >= 0.75x with the decision log on).
#
# Two servers side by side in one run, each pinned to the same one core
# (taskset -c 1), driven in turn, round by round, by the same client pinned
# to the other core (taskset -c 0), with C HTTP/1.1 keep-alive connections
# (default 16) for D seconds (default 10) per turn:
#
#   ownerguard  serve --pods (150,000 pods, `names` inventory of
#               bench/inventory.py), decision log on (JSON, into a file),
#               every review a 3.4 KB Pod CREATE (bench/review-create-3k.json)
#               that gets a patch;
#   ceiling     examples/ceiling.rs: the same rustls + hyper + axum stack
#               and the same certificate, answering a fixed allowed review
#               after a byte scan for the uid (no JSON parse, no log).
#
# Per turn: answers per second, latency, errors, and the server's CPU time
# (from /proc): the ratio is given both as throughput and as answers per
# CPU-second of the server core; the second does not depend on the client
# keeping the core busy (on 2 cores the client has exactly one).
#
#   bash bench/load.sh [C] [D] [ROUNDS]     (16 10 5)
#
# Loopback only; about 2 x ROUNDS x D seconds plus start-up. The order
# of the two turns alternates from round to round. Exit 1 on its
# own errors (a server that does not start, a review answered wrongly, a
# decision not logged).
set -euo pipefail
# shellcheck source=bench/lib.sh disable=SC2153 # OG_* are set by og_start
source "$(dirname "$0")/lib.sh"
connections=${1:-16}
seconds=${2:-10}
rounds=${3:-5}
server_cpu=${LOAD_SERVER_CPU:-1}
client_cpu=${LOAD_CLIENT_CPU:-0}

bench_init
bench_build ceiling review_load
inventory="$(bench_inventory 150000 names json)"
body="$BENCH_DIR/review-create-3k.json"

og_start ownerguard "$server_cpu" --pods "$inventory" || die "ownerguard did not start"
og_pid=$OG_PID og_addr=$OG_ADDR og_log=$OG_LOG
wait_ready "$OG_METRICS" 120
certs="$OG_DIR/certs"

ceiling_start ceiling "$certs" taskset -c "$server_cpu"
ceiling_pid=$CEILING_PID ceiling_addr=$CEILING_ADDR

# drive NAME PID ADDR SECONDS EXPECT...: one turn; prints a JSON line with
# the client's figures and the server's CPU seconds.
drive() {
  local name=$1 pid=$2 addr=$3 secs=$4 before after out
  shift 4
  local expects=()
  for e in "$@"; do expects+=(--expect "$e"); done
  before=$(cpu_ticks "$pid")
  out="$(taskset -c "$client_cpu" "$RELEASE/examples/review_load" --addr "$addr" \
    --ca "$certs/ca.crt" --body "$body" --connections "$connections" --seconds "$secs" \
    "${expects[@]}" 2>>"$BENCH_WORK/client.log" | tail -n 1)" || die "client failed against $name"
  after=$(cpu_ticks "$pid")
  jq -c --arg name "$name" --argjson cpu "$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" 'BEGIN { print t / hz }')" \
    '. + {name: $name, server_cpu_s: $cpu}' <<<"$out"
}

og_expect=('"allowed":true' '"patch":' '"uid":"5f2c7a1e-9b3d-4c8e-a6f1-0d2e4b6c8a90"')
ceiling_expect=('"allowed":true' '"uid":"5f2c7a1e-9b3d-4c8e-a6f1-0d2e4b6c8a90"')

blog "warm-up: 2 s each"
drive ownerguard "$og_pid" "$og_addr" 2 "${og_expect[@]}" >/dev/null
drive ceiling "$ceiling_pid" "$ceiling_addr" 2 "${ceiling_expect[@]}" >/dev/null

results="$BENCH_WORK/results.jsonl"
decisions_before=$(grep -c '"message":"decision"' "$og_log" || true)
og_answers=0
turn_ownerguard() {
  local line
  line="$(drive ownerguard "$og_pid" "$og_addr" "$seconds" "${og_expect[@]}")"
  echo "$line" | jq -c --argjson r "$round" '. + {round: $r}' >>"$results"
  og_answers=$((og_answers + $(jq .answers <<<"$line")))
}
turn_ceiling() {
  drive ceiling "$ceiling_pid" "$ceiling_addr" "$seconds" "${ceiling_expect[@]}" |
    jq -c --argjson r "$round" '. + {round: $r}' >>"$results"
}
# The order alternates, so that a drift of the machine during a round
# does not always favour the same server.
for round in $(seq 1 "$rounds"); do
  if ((round % 2 == 1)); then
    blog "round $round of $rounds: ownerguard, then the ceiling, ${seconds}s each"
    turn_ownerguard
    turn_ceiling
  else
    blog "round $round of $rounds: the ceiling, then ownerguard, ${seconds}s each"
    turn_ceiling
    turn_ownerguard
  fi
done
sleep 0.5
decisions=$(($(grep -c '"message":"decision"' "$og_log" || true) - decisions_before))
errors=$(jq -s 'map(.errors) | add' "$results")

echo
echo "ownerguard against its ceiling: $connections HTTP/1.1 keep-alive connections, ${seconds}s turns, $rounds rounds;"
echo "servers on core $server_cpu, client on core $client_cpu; 3.4 KB Pod CREATE, 150,000-pod inventory;"
echo "$(nproc) cores, load average before the run $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| round | server | answers/s | p50 | p99 | errors | server CPU busy | answers per server CPU-second |"
echo "|---|---|---|---|---|---|---|---|"
jq -r '"| \(.round) | \(.name) | \(.per_second | round) | \(.p50_ms * 100 | round / 100) ms | \(.p99_ms * 100 | round / 100) ms | \(.errors) | \(.server_cpu_s / .seconds * 100 | round) % | \(.answers / .server_cpu_s | round) |"' "$results"
echo
jq -rs '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  group_by(.round) | map({
    t: ((map(select(.name == "ownerguard"))[0].per_second) / (map(select(.name == "ceiling"))[0].per_second)),
    c: ((map(select(.name == "ownerguard"))[0] | .answers / .server_cpu_s) / (map(select(.name == "ceiling"))[0] | .answers / .server_cpu_s))
  }) | "ratio ownerguard / ceiling, by round: throughput \(map(.t * 100 | round / 100) | join(", ")) (median \(map(.t) | median * 100 | round / 100)x); per server CPU-second \(map(.c * 100 | round / 100) | join(", ")) (median \(map(.c) | median * 100 | round / 100)x)"' "$results"
echo "decision log: $decisions lines for $og_answers ownerguard answers in the timed turns; ownerguard RSS $(mib "$(proc_kb "$og_pid" VmRSS)") MiB, ceiling RSS $(mib "$(proc_kb "$ceiling_pid" VmRSS)") MiB"
[[ "$errors" == 0 ]] || die "$errors errors (see above and $BENCH_WORK/client.log)"
[[ "$decisions" -ge "$og_answers" ]] || die "only $decisions decision lines logged for $og_answers answers"
