#!/usr/bin/env bash
# Instructions per packet on the endpoint's receive and transmit path, counted by callgrind
# (exact, so the figure repeats even on a noisy machine): an 8-byte RC WRITE turn through
# two endpoints (crates/softrdma-proto/examples/endpoint_turns.rs) run at two turn counts;
# the difference over the extra turns is one turn's cost, setup excluded. A turn is two
# packets (the WRITE and its ACK), each transmitted by one endpoint and received by the
# other.
#
# Then the device's whole path over a real datapath (crates/softrdma/examples/path_turns.rs):
# two devices in one process over UDP on loopback, a write-lat turn (two 8-byte WRITEs and
# their ACKs) and a burst of eight 1 MiB WRITEs, and the same host's write-lat (path_turns
# --one: two contexts of one device), each by layer (bench/path-layers.py):
# datapath, device, endpoint, engine, CRC, copy. Both ends run in the one process, so each
# figure is one packet's transmit and receive together. Held to
# bench/path-instructions.baseline as the endpoint's figure is to bench/instructions.baseline.
# Installs valgrind from Debian's packages when it can (root).
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
cargo build --release --locked -p softrdma --example path_turns >&2
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

# The whole path. Counts far apart, so that what setup costs (and malloc's state after it)
# is a small share of the difference.
echo
echo "the device's whole path over UDP on loopback (examples/path_turns.rs), per packet:"
path=$(mktemp -d)
trap 'rm -rf "$path"' EXIT
grind() {
    local out="$path/$1.$2${3:-}"
    timeout 300 valgrind --tool=callgrind --callgrind-out-file="$out" \
        target/release/examples/path_turns "$1" "$2" ${3:-} >/dev/null 2>&1
}
grind lat 4000
grind lat 20000
grind bw 4
grind bw 20
grind lat 4000 --one
grind lat 20000 --one
# A write-lat turn is 4 packets (two WRITEs, two ACKs); a burst 2,048 packets of 4 KiB
# (8 WRITEs of 256), whose ACKs the responder coalesces, counted with them.
echo "write-lat 8 B, per packet (16,000 turns, 64,000 packets):"
lat=$(python3 bench/path-layers.py "$path/lat.4000" "$path/lat.20000" 64000 | tee /dev/stderr | awk '$1 == "total" { print $2 }')
echo "write-bw 1 MiB, per 4 KiB data packet (16 bursts, 32,768 packets):"
bw=$(python3 bench/path-layers.py "$path/bw.4" "$path/bw.20" 32768 | tee /dev/stderr | awk '$1 == "total" { print $2 }')
# The same host: two contexts of one device in one process meet as two processes do, and
# a WRITE lands in the peer's memory as it is posted (no packet, no ring entry).
echo "same host (one device), write-lat 8 B, per WRITE (32,000):"
python3 bench/path-layers.py "$path/lat.4000--one" "$path/lat.20000--one" 32000 >&2
echo "(not held to a baseline: runs spread by about 10 %)"
read -r base_lat base_bw < <(awk '{ print $2 }' bench/path-instructions.baseline | paste -sd' ')
echo "baseline per packet: write-lat $base_lat ($(awk -v a="$lat" -v b="$base_lat" 'BEGIN { printf "%.3f", a / b }')x), write-bw $base_bw ($(awk -v a="$bw" -v b="$base_bw" 'BEGIN { printf "%.3f", a / b }')x)"
# 2 % for a turn; 3 % for a burst, whose count moves a little with how many ACKs the
# responder coalesces, which depends on timing (three runs of one build: 7,425 to 7,481).
if (( lat * 100 > base_lat * 102 || bw * 100 > base_bw * 103 )); then
    echo "the whole path's instructions per packet rose over bench/path-instructions.baseline (more than 2 % a turn, 3 % a burst)" >&2
    exit 1
fi
