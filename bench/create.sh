#!/usr/bin/env bash
# Latency ownerguard adds to a real pod create: creates per second and
# p50/p90/p99 of pod creates through the real API server (built and run
# as by e2e/run, in a network namespace of its own), with ownerguard's
# webhooks registered and without, interleaved in the same run.
# A benchmark: it measures and prints, it asserts nothing.
#
#   bash bench/create.sh [-n PODS_PER_ROUND] [-c CLIENTS] [-rounds R]
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
E2E_DIR="$REPO/e2e"
# shellcheck source=e2e/lib.sh
source "$E2E_DIR/lib.sh"

e2e_build
e2e_netns_up
e2e_plane_env
e2e_in_netns "$E2E_BIN/createbench" "$@"
