#!/usr/bin/env bash
# Webhook throughput and latency for docs/performance.md: C concurrent clients
# (default 16) for D seconds (default 10) against the release binary on
# 127.0.0.1, over HTTP/1.1 keep-alive and over one HTTP/2 connection.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin ownerguard --example load_bench
./target/release/examples/load_bench "${1:-16}" "${2:-10}"
