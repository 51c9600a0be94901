#!/usr/bin/env bash
# Instructions per packet on the endpoint's receive and transmit path, counted by callgrind
# (exact, so the figure repeats even on a noisy machine): an 8-byte RC WRITE turn through
# two endpoints (crates/softrdma-proto/examples/endpoint_turns.rs) run at two turn counts;
# the difference over the extra turns is one turn's cost, setup excluded. A turn is two
# packets (the WRITE and its ACK), each transmitted by one endpoint and received by the
# other. Installs valgrind from Debian's packages when it can (root).
# Usage: bench/instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v valgrind >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq valgrind >/dev/null
    else
        echo "valgrind is missing (apt-get install valgrind)" >&2
        exit 1
    fi
fi
cargo build --release --locked -p softrdma-proto --example endpoint_turns --example engine_turns >&2
count() {
    timeout 300 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "target/release/examples/$1" "$2" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
lo=2000
hi=4000
per() {
    local a b
    a=$(count "$1" $lo)
    b=$(count "$1" $hi)
    echo $(( (b - a) / (hi - lo) ))
}
engine=$(per engine_turns)
per_turn=$(per endpoint_turns)
echo "instructions per turn (WRITE 8 B + ACK) through the endpoint: $per_turn"
echo "instructions per packet (transmit + receive): $(( per_turn / 2 ))"
echo "of which the engine alone (bare QPs, examples/engine_turns.rs): $engine per turn"
# The figure recorded when the path was last changed on purpose: a rise of more than 2 %
# is a regression to explain (or a new baseline to record, with the reason, in the commit).
baseline=$(cat bench/instructions.baseline)
echo "baseline per turn: $baseline ($(awk -v a="$per_turn" -v b="$baseline" 'BEGIN { printf "%.3f", a / b }')x)"
if (( per_turn * 100 > baseline * 102 )); then
    echo "instructions per turn rose more than 2 % over bench/instructions.baseline" >&2
    exit 1
fi
