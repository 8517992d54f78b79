#!/bin/bash
# session 35, second call: the shipped threshold (S) under racecheck at 8k as one chunk and at the split, one call
# each through the fuzz driver; and whether W took the 4-head tiles at 1k (row 83: 9.8 -> 12.6 us there)
exec > >(tee $OUT/log) 2>&1
W=build-dev/W; S=build-dev/S; I=build-dev/in
date
for b in S W; do echo "== $b f32 gemma4-full 1k-4k"; build-dev/$b/flashdec bench --backend cuda --kv f32 --preset gemma4-full --ctx 1024,4096 --reps 5 2>&1 | tail -2; done
for f in f32-8192 f16-8192; do for mc in 8192 0; do
  k=; case $f in f16*) k=simt;; esac
  echo "== racecheck S d512-h16-g2-$f min_chunk=$mc kernel=${k:-default}"
  FDEC_CUDA_MIN_CHUNK=$mc FDEC_CUDA_KERNEL=$k timeout 120 compute-sanitizer --tool racecheck --racecheck-report all --print-limit 5 --error-exitcode 9 $S/fuzz_decode_cuda_driver -max-kv 300000000 -seconds 0 $I/d512-h16-g2-$f 2>&1 | tail -3
  echo "rc ${PIPESTATUS[0]}"; date
done; done
