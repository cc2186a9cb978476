#!/usr/bin/env bash
# Latency ownerguard adds to a real pod create:
# creates per second and p50/p90/p99 of pod creates through the real API
# server (built and run as by e2e/run, in a network namespace of its own),
# four variants interleaved round by round in the same run:
#
#   - ownerguard's webhooks registered, pods labelled (mutate + validate);
#   - registered, pods not labelled (the objectSelector spares them);
#   - the same two registrations pointing at a no-op webhook instead: the
#     ceiling of examples/ceiling.rs (ownerguard's own TLS and HTTP stack,
#     the chart's certificate, allowed, no patch), beside ownerguard on the
#     Service's ClusterIP (the Service gets a port for it);
#   - the same, the no-op webhook answering what ownerguard answers (its
#     patch and audit annotations, taken from `ownerguard review`): what
#     the API server pays for the content of the answers;
#   - no webhooks, pods labelled.
#
# A round of WARMUP pods per variant first, not counted. Then ownerguard's
# added latency over no webhook as a multiple of the no-op webhook's, at
# p50 and p99; the API server's own histograms per variant (webhook calls,
# etcd writes, whole requests); and each create over 100 ms, with its place
# in its round. A benchmark: it measures and prints.
#
#   bash bench/create.sh [-n PODS_PER_ROUND] [-c CLIENTS] [-rounds R] [-warmup PODS]
#
# With -burst, the cost a cluster feels in a burst instead (e2e/cmd/
# createbench/burst.go): a Deployment scaled from 0 to D pods and a Job of
# parallelism J, made by the real controllers, scheduled by kube-scheduler
# and run by a hollow node, with ownerguard, with the no-op webhook
# answering ownerguard's answers, and with no webhooks, interleaved round
# by round; ownerguard as a process (its CPU time is read from /proc):
#
#   E2E_OWNERGUARD=process bash bench/create.sh -burst [-deployment D] [-job J] [-rounds R]
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
E2E_DIR="$REPO/e2e"
# shellcheck source=e2e/lib.sh
source "$E2E_DIR/lib.sh"

# The ceiling first: built with the examples' (dev-dependency) features;
# e2e_build then builds and copies the binary as it ships.
log "building the ceiling (cargo build --release --example ceiling)"
# With the release build's flags (release/lib.sh), as e2e_build uses:
# other flags would make each rebuild everything the other built.
(source "$REPO/release/lib.sh" && release_build "$REPO" --quiet --example ceiling)
target="${CARGO_TARGET_DIR:-$REPO/target}"
[[ "$target" = /* ]] || target="$REPO/$target"
e2e_build
CEILING_BIN="$E2E_BIN/ceiling"
cp "$target/release/examples/ceiling" "$CEILING_BIN"
export CEILING_BIN
e2e_netns_up
e2e_plane_env
e2e_in_netns "$E2E_BIN/createbench" "$@"
