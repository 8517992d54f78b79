#!/bin/bash
exec > >(tee $OUT/log) 2>&1
S=build-dev/S
echo "== racecheck S f32 gemma4-full 8k as one chunk (SIMT, 4-head tiles, totals in shared memory)"
date
FDEC_CUDA_MIN_CHUNK=8192 timeout 480 compute-sanitizer --tool racecheck --racecheck-report all --print-limit 5 $S/flashdec bench --backend cuda --kv f32 --preset gemma4-full --ctx 8192 --reps 1 --no-check 2>&1 | tail -6
echo "rc ${PIPESTATUS[0]}"; date
