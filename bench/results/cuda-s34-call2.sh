#!/bin/bash
exec > >(tee $OUT/log) 2>&1
B=build-dev/B; S=build-dev/S
echo "== run_tests --cuda --configs 100, simt forced (S)"; FDEC_CUDA_KERNEL=simt $S/tests/run_tests --cuda --configs 100 2>&1 | tail -1
for tool in racecheck synccheck initcheck; do
  for kv in f32 f16; do
    echo "== $tool S $kv (simt) gemma4-full 8k as one chunk"
    FDEC_CUDA_KERNEL=simt FDEC_CUDA_MIN_CHUNK=8192 timeout 100 compute-sanitizer --tool $tool --print-limit 5 $S/flashdec bench --backend cuda --kv $kv --preset gemma4-full --ctx 8192 --reps 1 --no-check 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^gemma|Error|hazard" | head -4
  done
done
for r in 1 2; do
  for kv in f32 f16; do
    echo "== $kv B round $r"; FDEC_CUDA_KERNEL=simt $B/flashdec bench --backend cuda --kv $kv --preset gemma4-full --ctx 1024,2048,4096,8192,16384 --reps 20 --no-check 2>&1 | grep -E "^gemma"
    echo "== $kv S round $r"; FDEC_CUDA_KERNEL=simt $S/flashdec bench --backend cuda --kv $kv --preset gemma4-full --ctx 1024,2048,4096,8192,16384 --reps 20 --no-check 2>&1 | grep -E "^gemma"
    echo "== $kv S min chunk 128 round $r"; FDEC_CUDA_MIN_CHUNK=128 FDEC_CUDA_KERNEL=simt $S/flashdec bench --backend cuda --kv $kv --preset gemma4-full --ctx 1024,2048,4096,8192,16384 --reps 20 --no-check 2>&1 | grep -E "^gemma"
  done
done
