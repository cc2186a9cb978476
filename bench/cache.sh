#!/usr/bin/env bash
# Owner-cache figures for docs/performance.md: lookups per second from the index,
# bytes per cached pod, and, for the real `ownerguard serve` against the
# loopback test API server, time to first ready and RSS with N pods
# (default 150,000). Loopback only; bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin ownerguard --example cache_bench
./target/release/examples/cache_bench "${1:-150000}"
