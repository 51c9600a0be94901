#!/usr/bin/env bash
# Goodput of softrdma's device against packet loss on loopback (SOFTRDMA_FAULTS: this
# kernel has no netem), and the loss-recovery goals, each as a ratio against the lossless
# run of the same work in the same invocation. Prints markdown; writes the plot to
# bench/loss.svg (or the file given with --svg).
# Usage: bench/loss.sh [--seconds N] [--rounds N] [--svg FILE]   (figures: medians of N runs, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p softrdma-cli -p softrdma-bench >&2
args=("$@")
[[ " ${args[*]} " == *" --svg "* ]] || args+=(--svg bench/loss.svg)
exec timeout 1200 target/release/softrdma-bench loss "${args[@]}"
