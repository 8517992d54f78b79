#!/bin/bash
exec > >(tee $OUT/log) 2>&1
B=build-dev/B; S=build-dev/S
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
echo "== run_tests --cuda --configs 100 (S)"; time $S/tests/run_tests --cuda --configs 100 2>&1 | tail -2
echo "== corpus replay (S)"; $S/fuzz_decode_cuda_driver -seconds 5 fuzz/corpus/* 2>&1 | tail -1
D="fuzz/corpus/cuda-drift-d*-f16-131072 fuzz/corpus/cuda-drift-d*-bf16-131072 fuzz/corpus/cuda-drift-d*-f32-131072"
echo "== drift 131k S: split / one chunk / simt split / simt one chunk"
$S/fuzz_decode_cuda_driver -max-kv 300000000 -seconds 0 $D 2>&1 | tail -1
FDEC_CUDA_MIN_CHUNK=131072 $S/fuzz_decode_cuda_driver -max-kv 300000000 -seconds 0 $D 2>&1 | tail -1
FDEC_CUDA_KERNEL=simt $S/fuzz_decode_cuda_driver -max-kv 300000000 -seconds 0 $D 2>&1 | tail -1
FDEC_CUDA_KERNEL=simt FDEC_CUDA_MIN_CHUNK=131072 $S/fuzz_decode_cuda_driver -max-kv 300000000 -seconds 0 $D 2>&1 | tail -1
echo "== d512 drift input alone, simt one chunk, B then S"
for v in B S; do FDEC_CUDA_KERNEL=simt FDEC_CUDA_MIN_CHUNK=131072 build-dev/$v/fuzz_decode_cuda_driver -max-kv 300000000 -seconds 0 fuzz/corpus/cuda-drift-d512-h16-g2-f16-131072 2>&1 | tail -1; done
echo "== checked bench S: f32 and simt f16 gemma4-full"
$S/flashdec bench --backend cuda --kv f32 --preset gemma4-full --ctx 1024,32768,131072 --reps 3 2>&1 | grep -E "^gemma"
FDEC_CUDA_KERNEL=simt $S/flashdec bench --backend cuda --kv f16 --preset gemma4-full --ctx 1024,32768,131072 --reps 3 2>&1 | grep -E "^gemma"
echo "== memcheck S f32 gemma4-full 4k, 131k"
timeout 120 compute-sanitizer --tool memcheck --print-limit 5 $S/flashdec bench --backend cuda --kv f32 --preset gemma4-full --ctx 4096,131072 --reps 1 --no-check 2>&1 | grep -E "ERROR SUMMARY|^gemma|rror" | head -5
echo "== racecheck S simt f16 gemma4-full 32k"
FDEC_CUDA_KERNEL=simt timeout 120 compute-sanitizer --tool racecheck --print-limit 5 $S/flashdec bench --backend cuda --kv f16 --preset gemma4-full --ctx 32768 --reps 1 --no-check 2>&1 | grep -E "ERROR SUMMARY|^gemma|rror|hazard" | head -5
for r in 1 2; do for v in B S; do
  echo "== f32 $v round $r"; build-dev/$v/flashdec bench --backend cuda --kv f32 --preset all --ctx 4096,32768,131072 --reps 10 --no-check 2>&1 | grep -E "^(gemma|llama|lfm2)"
  for kv in f16 bf16; do echo "== simt $kv gemma4-full $v round $r"; FDEC_CUDA_KERNEL=simt build-dev/$v/flashdec bench --backend cuda --kv $kv --preset gemma4-full --ctx 4096,32768,131072 --reps 10 --no-check 2>&1 | grep -E "^gemma"; done
done; done
echo "== default f16 S"; $S/flashdec bench --backend cuda --preset all --ctx 32768,131072 --reps 10 --no-check 2>&1 | grep -E "^(gemma|llama|lfm2)"
