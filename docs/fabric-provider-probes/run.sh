#!/bin/sh
# Rebuild and rerun every probe used by ../fabric-provider.md (needs libfabric-dev 1.17, libfabric-bin).
set -e
cd "$(dirname "$0")"
python3 gen.py "$(cat structs.txt)" > abi.c
gcc -Wall -O0 -o abi abi.c && ./abi > abi-output.txt
gcc -Wall -o consts consts.c && ./consts > consts-output.txt
mkdir -p prov
gcc -Wall -shared -fPIC -o prov/libsoftrdma-fi.so mockprov.c -lfabric
gcc -Wall -o ppinfo ppinfo.c -lfabric
gcc -Wall -o ompiinfo ompiinfo.c -lfabric
gcc -Wall -o rxmfabric rxmfabric.c -lfabric
P=$PWD/prov
{
  echo "## nm -D --defined-only libfabric.so.1"; nm -D --defined-only /usr/lib/x86_64-linux-gnu/libfabric.so.1 | awk '{print $3}' | sort | tr '\n' ' '; echo
  echo "## fi_info -l (softrdma registered?)"; FI_PROVIDER_PATH=$P fi_info -l | grep -A1 '^softrdma'
  for e in rdm msg dgram; do echo "## pingpong hints -p softrdma -e $e"; FI_PROVIDER_PATH=$P ./ppinfo softrdma $e; done
  echo "## pingpong hints -p softrdma -e rdm, MOCK_NO_LAYER=1"; FI_PROVIDER_PATH=$P MOCK_NO_LAYER=1 ./ppinfo softrdma rdm
  echo "## pingpong hints -p 'softrdma;ofi_rxm' -e rdm, MOCK_NO_LAYER=1"; FI_PROVIDER_PATH=$P MOCK_NO_LAYER=1 ./ppinfo 'softrdma;ofi_rxm' rdm
  echo "## FI_PROVIDER=softrdma, no -p"; FI_PROVIDER_PATH=$P FI_PROVIDER=softrdma ./ppinfo - rdm
  echo "## FI_PROVIDER='^ofi_rxm,ofi_rxd' -p softrdma"; FI_PROVIDER_PATH=$P FI_PROVIDER='^ofi_rxm,ofi_rxd' ./ppinfo softrdma rdm
  echo "## provider sets fabric_attr->prov_name"; FI_PROVIDER_PATH=$P MOCK_SET_PROVNAME=1 ./ppinfo softrdma msg
  echo "## core does not filter (MOCK_NOFILTER, request msg)"; FI_PROVIDER_PATH=$P MOCK_NOFILTER=1 MOCK_NO_LAYER=1 ./ppinfo softrdma msg
  echo "## hints the core provider receives (MOCK_LOG), -p softrdma -e rdm"; FI_PROVIDER_PATH=$P MOCK_LOG=1 ./ppinfo softrdma rdm 2>&1 | grep 'mock getinfo'
  echo "## Open MPI 4.1.4 hints + include=softrdma"; FI_PROVIDER_PATH=$P ./ompiinfo softrdma | grep -n softrdma
  echo "## Open MPI, MOCK_NO_LAYER=1"; FI_PROVIDER_PATH=$P MOCK_NO_LAYER=1 ./ompiinfo softrdma | grep softrdma
  echo "## rxm fabric open over softrdma"; FI_PROVIDER_PATH=$P MOCK_LOG=1 ./rxmfabric 2>&1 | grep -v 'mock getinfo'
  echo "## file names"; mkdir -p names
  for n in libsoftrdma-fi.so softrdma-fi.so libsoftrdma_fi.so libsoftrdma-fi.so.1 libsoftrdma.so; do
    rm -f names/*; cp prov/libsoftrdma-fi.so names/$n
    printf '%-22s registered=%s\n' $n "$(FI_PROVIDER_PATH=$PWD/names fi_info -l | grep -c '^softrdma:' || true)"; done
  rm -rf names
  printf 'LD_LIBRARY_PATH only  registered=%s\n' "$(LD_LIBRARY_PATH=$P fi_info -l | grep -c '^softrdma:' || true)"
} > probe-output.txt 2>&1
echo done
# DT_NEEDED experiment: libfabric loaded with dlopen(RTLD_LOCAL)
gcc -Wall -o dlopen_local dlopen_local.c -ldl
mkdir -p provnolink && gcc -Wall -shared -fPIC -o provnolink/libsoftrdma-fi.so mockprov.c
{ echo "## dlopen(libfabric, RTLD_LOCAL): provider linked with -lfabric"; FI_PROVIDER_PATH=$PWD/prov ./dlopen_local
  echo "## dlopen(libfabric, RTLD_LOCAL): provider without DT_NEEDED libfabric"; FI_PROVIDER_PATH=$PWD/provnolink FI_LOG_LEVEL=debug ./dlopen_local 2>&1 | grep -E 'registered|undefined symbol'; } >> probe-output.txt 2>&1
# extra loader / ordering experiments quoted in the memo
mkdir -p names
{ echo "## two copies in one dir (libsoftrdma-fi.so + libsoftrdma_fi.so)"
  rm -f names/*; cp prov/libsoftrdma-fi.so names/libsoftrdma-fi.so; cp prov/libsoftrdma-fi.so names/libsoftrdma_fi.so
  FI_PROVIDER_PATH=$PWD/names MOCK_LOG=1 fi_info -l 2>&1 | grep -E '^softrdma|mock fi_prov_ini'
  rm -rf names
  printf '## multi-dir FI_PROVIDER_PATH=/nonexistent:prov registered=%s\n' "$(FI_PROVIDER_PATH=/nonexistent:$PWD/prov fi_info -l | grep -c '^softrdma:' || true)"
  echo "## pingpong hints -e rdm, no -p: provider order (uniq -c)"; FI_PROVIDER_PATH=$PWD/prov ./ppinfo - rdm | awk '{print $1}' | uniq -c
  echo "## hints from Open MPI 4.1.4 as seen by the provider (MOCK_LOG)"; FI_PROVIDER_PATH=$PWD/prov MOCK_LOG=1 ./ompiinfo softrdma 2>&1 | grep 'mock getinfo'
} >> probe-output.txt 2>&1
