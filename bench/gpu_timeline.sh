#!/usr/bin/env bash
# Where a CUDA call's time goes (bench/NOTES.md, CUDA log rows 45 and 53): builds the timeline build
# (-DFDEC_CUDA_TIMELINE=1, sm_90) in build-tl, runs `flashdec bench` on each case of TL_CASES ("preset:ctx ...")
# with the records going to $OUT/tl-<preset>-<ctx>.txt, and splits them into calls with bench/timeline.py.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
[ "${PREBUILT:-0}" = 1 ] && [ -x build-tl/flashdec ] || make -j16 BUILD=build-tl CUDA=1 CUDA_GENCODE="-gencode arch=compute_90,code=sm_90 -DFDEC_CUDA_TIMELINE=1" \
  build-tl/flashdec > "$OUT/build-tl.log" 2>&1 || { tail -20 "$OUT/build-tl.log"; exit 1; }
for c in ${TL_CASES:-llama3-8b:32768 llama3-8b:131072 lfm2:32768 lfm2:131072 gemma4-full:32768}; do
  f="$OUT/tl-${c%%:*}-${c##*:}.txt"
  rm -f "$f"
  FDEC_TL_OUT="$f" timeout 100 ./build-tl/flashdec bench --backend cuda --preset "${c%%:*}" --ctx "${c##*:}" \
    --reps ${TL_REPS:-5} --no-check 2>&1 | tail -1
  python3 bench/timeline.py "$f"
  rm -f "$f" # the raw records are large; the split is what is kept
done
