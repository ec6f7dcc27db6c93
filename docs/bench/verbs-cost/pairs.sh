#!/bin/bash
# Interleaved pairs of fero-bench builds: pairs.sh OUTDIR N SYSTEMS RECORDS name=binary...
out=$1; n=$2; systems=$3; recs=$4; shift 4
mkdir -p "$out"
for i in $(seq "$n"); do
  for nb in "$@"; do
    name=${nb%%=*}; bin=${nb#*=}
    "$bin" run --systems "$systems" -c 1 -s oneway,reqreply,roundtrip -m 100 -r "$recs" -n 10000 --runs 1 > "$out/$name-$i.txt" 2>&1
  done
done
