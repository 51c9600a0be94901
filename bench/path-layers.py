#!/usr/bin/env python3
"""Instructions per unit, by layer, between two callgrind runs of one program at two
counts (the difference is what the extra units cost, setup excluded).

Usage: path-layers.py LOW.callgrind HIGH.callgrind UNITS

Each function's exclusive count goes to the layer of the source file its instructions
come from; code of std, core and other crates inlined into a function counts in the layer
of that function. The clock's calibration (quanta's, timed, so its
count differs from run to run) is left out.
"""
import collections
import re
import subprocess
import sys

# By the file the instructions come from, first match wins: the project's own sources and
# the libraries that are a layer by themselves.
BY_FILE = [
    ("crc", [r"icrc\.rs", r"crc32fast", r"endpoint/check\.rs"]),
    ("copy", [r"memmove|memcpy|memset"]),
    ("datapath", [r"softrdma/src/datapath/",
                  r"sendmsg|recvmsg|recvmmsg|sendmmsg|syscall|cancellation\.c"]),
    ("endpoint", [r"softrdma-proto/src/endpoint/"]),
    ("engine", [r"softrdma-proto/src/", r"softrdma-wire/src/"]),
    ("device", [r"softrdma/src/"]),
    ("program", [r"/examples/"]),
]
# Code of std, core, alloc and other crates inlined into a function counts where that
# function is: by the function's name, first match wins.
BY_NAME = [
    ("crc", [r"icrc", r"crc32fast", r"IcrcCheck", r"IdentPatches"]),
    ("copy", [r"memcpy|memmove|memset"]),
    ("datapath", [r"softrdma::datapath::"]),
    ("endpoint", [r"softrdma_proto::endpoint::"]),
    ("engine", [r"softrdma_proto::", r"softrdma_wire::"]),
    ("device", [r"softrdma::"]),
    ("program", [r"path_turns::", r"send_turns::"]),
]
ORDER = ["datapath", "device", "endpoint", "engine", "crc", "copy", "other"]


def counts(path):
    out = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--inclusive=no", "--auto=no", path],
        capture_output=True, text=True, check=True).stdout
    per = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+([^:]*):(.*)$", line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        n, file, func = int(m.group(1).replace(",", "")), m.group(2), m.group(3)
        if "OnceCell<T>::initialize" in func:
            continue  # lazy setup, and the clock's calibration (quanta's, inlined)
        layer = next((name for name, pats in BY_FILE if any(re.search(p, file) for p in pats)),
                     None) or next((name for name, pats in BY_NAME
                                    if any(re.search(p, func) for p in pats)), "other")
        per[layer] += n
    return per


def calibration_clock_reads(path):
    """clock_gettime's count under quanta's calibration (inclusive), to leave out."""
    out = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--inclusive=yes", "--auto=no",
         "--tree=calling", path], capture_output=True, text=True, check=True).stdout
    total, inside = 0, False
    for line in out.splitlines():
        if re.search(r"\*\s+.*OnceCell<T>::initialize", line):
            inside = True
            continue
        if inside and re.search(r">\s+.*clock_gettime", line):
            total += int(re.match(r"\s*([\d,]+)", line).group(1).replace(",", ""))
        if not line.strip():
            inside = False
    return total


def main():
    low, high, units = sys.argv[1], sys.argv[2], float(sys.argv[3])
    a, b = counts(low), counts(high)
    a["other"] -= calibration_clock_reads(low)
    b["other"] -= calibration_clock_reads(high)
    total = 0
    for layer in ORDER + ["program"]:
        v = (b[layer] - a[layer]) / units
        if layer != "program":
            total += v
        print(f"{layer:9s} {v:8.0f}")
    print(f"{'total':9s} {total:8.0f}  (the program's own loop apart)")


if __name__ == "__main__":
    main()
