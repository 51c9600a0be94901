#!/usr/bin/env python3
"""Generate abi.c: sizeof/offsetof for every member of the listed libfabric 1.17 structs.
Parses /usr/include/rdma/*.h (simple brace matching; handles function pointers,
arrays, and one level of anonymous union/struct)."""
import re, sys
HDRS = ["fabric.h","fi_domain.h","fi_endpoint.h","fi_eq.h","fi_cm.h","fi_tagged.h",
        "fi_rma.h","fi_atomic.h","fi_collective.h","fi_trigger.h","providers/fi_prov.h"]
WANT = sys.argv[1].split(",")
src = {}
for h in HDRS:
    t = open("/usr/include/rdma/"+h).read()
    t = re.sub(r"/\*.*?\*/", "", t, flags=re.S)
    for m in re.finditer(r"^struct (\w+) \{", t, flags=re.M):
        name = m.group(1)
        i = m.end(); depth = 1
        while depth:
            if t[i] == "{": depth += 1
            elif t[i] == "}": depth -= 1
            i += 1
        src.setdefault(name, (h, t[m.end():i-1]))
def members(body):
    out = []; depth = 0; cur = ""
    for ch in body:
        if ch == "{": depth += 1
        if ch == "}": depth -= 1
        cur += ch
        if ch == ";" and depth == 0:
            out.append(cur.strip()); cur = ""
    names = []
    for decl in out:
        d = " ".join(decl.split())
        m = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", d)
        if m: names.append(m.group(1)); continue
        if d.startswith(("union","struct")) and "{" in d:
            m = re.search(r"\}\s*(\w+)\s*;$", d)
            if m: names.append(m.group(1))
            continue
        m = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*;$", d)
        if m: names.append(m.group(1))
    return names
print('#include <stdio.h>\n#include <stddef.h>\n#include <rdma/fabric.h>\n#include <rdma/fi_domain.h>\n'
      '#include <rdma/fi_endpoint.h>\n#include <rdma/fi_eq.h>\n#include <rdma/fi_cm.h>\n#include <rdma/fi_tagged.h>\n'
      '#include <rdma/fi_rma.h>\n#include <rdma/fi_atomic.h>\n#include <rdma/fi_collective.h>\n#include <rdma/fi_trigger.h>\n'
      '#include <rdma/fi_errno.h>\n#include <rdma/providers/fi_prov.h>\n')
print("int main(void) {")
for s in WANT:
    h, body = src[s]
    print(f'  printf("{s} [{h}] size=%zu align=%zu:", sizeof(struct {s}), _Alignof(struct {s}));')
    for n in members(body):
        print(f'  printf(" %zu {n}", offsetof(struct {s}, {n}));')
    print('  printf("\\n");')
print("  return 0;\n}")
