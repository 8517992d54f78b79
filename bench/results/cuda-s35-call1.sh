#!/bin/bash
# session 35: the SIMT kernel's 4-head tiles with their block sums' totals in shared memory (CUDA log row 83),
# reached at 1k positions by a build whose FDEC_CUDA_WIDE_TILE_MIN is 256 (W; the kernels are the shipped ones,
# only the host's choice of tile moves), under racecheck, which did not finish at 8k in session 34.
exec > >(tee $OUT/log) 2>&1
W=build-dev/W; S=build-dev/S; I=build-dev/in
nvidia-smi -L; date
echo "== W: run_tests --cuda --configs 100, default, then the SIMT kernel forced"
$W/run_tests --cuda --configs 100 2>&1 | tail -1
FDEC_CUDA_KERNEL=simt $W/run_tests --cuda --configs 100 2>&1 | tail -1
echo "== the d512 h16 g2 inputs against the CPU backend (worst error / tolerance), W and S, split and one chunk"
for b in W S; do for f in $I/*; do n=$(basename $f); L=${n##*-}; for mc in 0 $L; do
  k=; case $n in *f16*) k=simt;; esac
  echo "-- $b $n min_chunk=$mc kernel=${k:-default}: $(FDEC_CUDA_MIN_CHUNK=$mc FDEC_CUDA_KERNEL=$k timeout 60 build-dev/$b/fuzz_decode_cuda_driver -max-kv 300000000 -seconds 0 $f 2>&1 | tail -1)"
done; done; done
date
for f in f32-1024 f16-1024; do for mc in 1024 0; do
  k=; case $f in f16*) k=simt;; esac
  echo "== racecheck W d512-h16-g2-$f min_chunk=$mc kernel=${k:-default}"
  FDEC_CUDA_MIN_CHUNK=$mc FDEC_CUDA_KERNEL=$k timeout 110 compute-sanitizer --tool racecheck --racecheck-report all --print-limit 5 --error-exitcode 9 $W/fuzz_decode_cuda_driver -max-kv 300000000 -seconds 0 $I/d512-h16-g2-$f 2>&1 | tail -4
  echo "rc ${PIPESTATUS[0]}"; date
done; done
