#!/usr/bin/env bash
# softrdma against raw UDP, iperf3, UCX and libfabric on loopback, in one run: prints a
# markdown table with each figure and its ratio to the raw-UDP baselines measured in the same
# run. Installs the peers from Debian's packages when it can (root), and skips those it cannot.
# Usage: bench/compare.sh [--seconds N]
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for p in iperf3:iperf3 ucx_perftest:ucx-utils fi_pingpong:libfabric-bin; do
    command -v "${p%%:*}" >/dev/null || missing+=("${p#*:}")
done
if ((${#missing[@]})); then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        echo "installing ${missing[*]}" >&2
        DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq "${missing[@]}" >/dev/null ||
            timeout 600 sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null' _ "${missing[@]}" ||
            echo "could not install ${missing[*]}: those rows will be skipped" >&2
    else
        echo "not root: ${missing[*]} missing, those rows will be skipped" >&2
    fi
fi

cargo build --release --locked -p softrdma-cli -p softrdma-bench >&2
exec timeout 900 target/release/softrdma-bench compare "$@"
