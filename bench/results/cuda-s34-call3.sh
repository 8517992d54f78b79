#!/bin/bash
exec > >(tee $OUT/log) 2>&1
B=build-dev/B; S=build-dev/S
echo "== run_tests --cuda --configs 100 (S), default and simt forced"; $S/tests/run_tests --cuda --configs 100 2>&1 | tail -1; FDEC_CUDA_KERNEL=simt $S/tests/run_tests --cuda --configs 100 2>&1 | tail -1
D="fuzz/corpus/cuda-drift-d*-f16-131072 fuzz/corpus/cuda-drift-d*-bf16-131072 fuzz/corpus/cuda-drift-d*-f32-131072"
echo "== drift S: simt one chunk, split; corpus replay"
FDEC_CUDA_KERNEL=simt FDEC_CUDA_MIN_CHUNK=131072 $S/fuzz_decode_cuda_driver -max-kv 300000000 -seconds 0 $D 2>&1 | tail -1
FDEC_CUDA_KERNEL=simt $S/fuzz_decode_cuda_driver -max-kv 300000000 -seconds 0 $D 2>&1 | tail -1
$S/fuzz_decode_cuda_driver -seconds 5 fuzz/corpus/* 2>&1 | tail -1
for r in 1 2; do for kv in f32 f16; do for v in B S; do
  echo "== $kv $v round $r"; FDEC_CUDA_KERNEL=simt build-dev/$v/flashdec bench --backend cuda --kv $kv --preset gemma4-full,gemma4-sliding-full --ctx 1024,4096,8192,32768,131072 --reps 10 --no-check 2>&1 | grep -E "^gemma"
done; done; done
