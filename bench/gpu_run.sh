#!/usr/bin/env bash
# Build, test and benchmark the CUDA backend on a GPU machine in one go (the device tool runs it there).
#   bench/gpu_run.sh [build] [test] [sanitize] [bench] [variants] [batch] [fp8] [peer] [py] [hf] [gpus] [ncu]
#                    [flashinfer]   (no argument: all but ncu and flashinfer)
# Logs and JSON go to $OUT (the device tool's output folder) or bench/results.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
stages=${*:-build test sanitize bench variants batch fp8 peer py hf gpus}
has() { [[ " $stages " == *" $1 "* ]]; }
rc=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv \
  | tee "$OUT/gpu.txt"
if has build; then
  # sm_90 only here: the H200 is all this machine has (the default build also has sm_80)
  make -j16 CUDA=1 CUDA_GENCODE="-gencode arch=compute_90,code=sm_90" all build/tests/run_tests \
    > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  echo "build: ok"
fi
if has test; then
  timeout 180 ./build/tests/run_tests --cuda --configs "${CONFIGS:-1000}" 2>&1 | tee "$OUT/test-cuda.log" | tail -12 || rc=1
fi
if has sanitize; then
  for tool in memcheck racecheck initcheck synccheck; do
    timeout ${SAN_TIMEOUT:-100} compute-sanitizer --tool $tool --error-exitcode 9 ./build/tests/run_tests --cuda --configs ${SAN_CONFIGS:-12} \
      > "$OUT/sanitize-$tool.log" 2>&1
    echo "compute-sanitizer $tool: exit $?"
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed, ' "$OUT/sanitize-$tool.log" | tail -2
    grep -m3 -E 'Invalid|Race|Uninitialized|Barrier|Error' "$OUT/sanitize-$tool.log"
  done
fi
if has bench; then
  timeout 150 ./build/flashdec bench --backend cuda --ctx 1024,4096,32768,131072 --reps 10 --json "$OUT/cuda-bench.json" \
    2>&1 | tee "$OUT/bench-cuda.log" || rc=1
fi
if has variants; then # the logit variants side by side with the plain call (#54's table)
  timeout 150 ./build/flashdec bench --backend cuda --preset llama3-8b,lfm2,gemma4-sliding-full,gemma4-full \
    --ctx 4096,32768,131072 --variants plain,softcap,sinks,alibi,plain --softcap 50 --reps 10 --no-check \
    --json "$OUT/cuda-variants.json" 2>&1 | tee "$OUT/bench-variants.log" || rc=1
fi
if has batch; then # batches (fdec_decode_batch): one and four query tokens a sequence over pages of 16 (#52's 1.3x
  # goal), then contiguous caches against pages of 16 (B=32, 4k-12k positions)
  for q in 1 4; do
    timeout 120 ./build/flashdec bench --backend cuda --batch 32 --lens 512-8192 --page-size 16 --q-len $q \
      --preset llama3-8b,lfm2,gemma4-sliding,gemma4-full --reps 5 2>&1 | tee "$OUT/bench-batch-q$q.log" || rc=1
  done
  timeout 120 ./build/flashdec bench --backend cuda --batch 32 --lens 4096-12288 --page-size 0,16 \
    --preset llama3-8b,lfm2,gemma4-sliding,gemma4-full --reps 5 2>&1 | tee "$OUT/bench-batch-pages.log" || rc=1
fi
if has fp8; then # fp8 caches against f16 at 32k and 131k (#53's 0.6x and 3.5 TB/s goal), the types alternated twice
  for round in 1 2; do for kv in f16 f8_e4m3 f8_e5m2; do
    timeout 60 ./build/flashdec bench --backend cuda --kv $kv --ctx 32768,131072 --reps 7 --no-check \
      --preset llama3-8b,lfm2,gemma4-sliding-full,gemma4-full 2>&1 | tee -a "$OUT/bench-fp8.log" || rc=1
  done; done
fi
if has peer; then
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_peer.py --json "$OUT/torch-peer.json" 2>&1 | tee "$OUT/torch-peer.log" || rc=1
  # batches over pages of 16 against SDPA on the padded batch (#52's second peer)
  PYTHONUNBUFFERED=1 timeout 300 python3 bench/torch_batch_peer.py 2>&1 | tee "$OUT/torch-batch-peer.log" || rc=1
fi
if has py; then # the Python package's tests, torch CUDA tensors included, against this build's library
  FLASHDEC_LIBRARY=$PWD/build/libflashdec.so PYTHONPATH=$PWD/python timeout 150 python3 -m pytest -q -rs tests/python \
    -p no:cacheprovider 2>&1 | tee "$OUT/pytest-cuda.log" | tail -8 || rc=1
fi
if has hf; then # transformers: a Llama-3-8B-shaped stack through SDPA and flashdec, time a token and the profile
  for c in 4096 32768; do
    FLASHDEC_LIBRARY=$PWD/build/libflashdec.so PYTHONPATH=$PWD/python timeout 150 python3 examples/hf_generate.py \
      --preset llama3-8b --layers 4 --context $c --random-cache --new-tokens 32 --device cuda --dtype bfloat16 \
      --profile 2>&1 | tee "$OUT/hf-$c.log" | grep -E "ms a token|profile,|greedy" || rc=1
  done
fi
if has flashinfer; then # FlashInfer's batch decode beside flashdec (make bench-peer-gpu): its headers must be in
  # build/peer/flashinfer already (`make build/peer/flashinfer/.extracted` where PyPI is reachable, then carry the folder)
  timeout 400 make CUDA=1 CUDA_GENCODE="-gencode arch=compute_90,code=sm_90" bench-peer-gpu 2>&1 \
    | tee "$OUT/bench-peer-gpu.log" | grep -vE "^(nvcc|cc|ar) " || rc=1
fi
if has ncu; then # Nsight Compute sections of each kernel of one call per case (NCU_CASES="preset:ctx ...")
  for c in ${NCU_CASES:-gemma4-sliding:32768 gemma4-full:32768 lfm2:131072 llama3-8b:1024}; do
    timeout 120 ncu ${NCU_FLAGS:-} -k regex:fdec --launch-skip ${NCU_SKIP:-40} --launch-count ${NCU_COUNT:-2} \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section SchedulerStats \
      ./build/flashdec bench --backend cuda --preset "${c%%:*}" --ctx "${c##*:}" --reps 3 --no-check \
      > "$OUT/ncu-${c%%:*}-${c##*:}.txt" 2>&1
    echo "ncu $c: exit $?"; grep -E '^  [a-z].*fdec|Duration|DRAM Throughput|Warp Cycles Per Issued|Registers Per' "$OUT/ncu-${c%%:*}-${c##*:}.txt"
  done
fi
if has gpus; then # sequence-parallel decode over every GPU here (make sure NVLink multicast stays off)
  n=$(nvidia-smi -L | wc -l)
  if [ "$n" -ge 2 ]; then
    NCCL_NVLS_ENABLE=0 timeout 200 ./build/flashdec bench --gpus "$n" --preset llama3-8b,gemma4-sliding \
      --ctx 100000,4194304 --reps 5 2>&1 | tee "$OUT/bench-gpus-$n.log" || rc=1
  else echo "gpus: one GPU here, skipped"; fi
fi
exit $rc
