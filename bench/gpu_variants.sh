#!/usr/bin/env bash
# Compile-time variants of the CUDA backend side by side on the GPU machine, for bench/NOTES.md's log:
#   bench/gpu_variants.sh "name:-DFLAG=1 -DOTHER=2" "name2:+ENVVAR=value ..."   (no flags: the baseline)
# Words starting with + are environment settings for the variant's runs, the rest compiler flags.
# "name@src.tar:flags" builds the tree in a tarball instead (made beforehand with `git archive <rev> -o src.tar`, an
# untracked file the device tool carries), so an older revision runs beside this one.
# Each variant is built in build-<name> (sm_90), checked with a short CUDA sweep, then benchmarked; the benchmarks
# run in ROUNDS rounds (default 2) alternating the variants, so that drift of the machine shows. Everything goes to
# $OUT/variants.log. PEER_PRESETS adds the PyTorch comparison of each variant (below). PREBUILT=1 takes each
# build-<name> as it is where it holds a flashdec already (built on another machine with the same flags and carried
# over, which saves the GPU machine's time).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
LOG="$OUT/variants.log"
CTX=${CTX:-1024,32768,131072}
PRESETS=${PRESETS:-all}
cflags() { local w out=; for w in $1; do [[ $w == +* ]] || out+=" $w"; done; echo "$out"; }
envs() { local w out=; for w in $1; do [[ $w == +* ]] && out+=" ${w#+}"; done; echo "$out"; }
vname() { local n=${1%%:*}; echo "${n%%@*}"; }
for v in "$@"; do
  name=$(vname "$v") flags=$(cflags "${v#*:}") src=.
  [ "${PREBUILT:-0}" = 1 ] && [ -x build-$name/flashdec ] && continue
  n=${v%%:*}
  if [[ $n == *@* ]]; then # another revision's tree, from a tarball
    src=${TMPDIR:-/tmp}/fdec-src-$name
    rm -rf "$src" build-$name && mkdir -p "$src" && tar -xf "${n#*@}" -C "$src" && ln -s "$src/build-$name" build-$name
  fi
  ( make -C "$src" -j4 BUILD=build-$name CUDA=1 CUDA_GENCODE="-gencode arch=compute_90,code=sm_90 $flags" \
      build-$name/flashdec build-$name/tests/run_tests build-$name/libflashdec.so > build-$name.log 2>&1 || echo "BUILD FAILED $name" ) &
done
wait
for v in "$@"; do
  name=$(vname "$v") flags=${v#*:}
  [ -x build-$name/flashdec ] || { tail -20 build-$name.log >> "$LOG"; continue; }
  echo "== test $name [$flags]" >> "$LOG"
  env $(envs "$flags") timeout 120 ./build-$name/tests/run_tests --cuda --configs ${TEST_CONFIGS:-150} 2>&1 | tail -2 >> "$LOG"
done
for round in $(seq 1 ${ROUNDS:-2}); do
  for v in "$@"; do
    name=$(vname "$v") flags=${v#*:}
    [ -x build-$name/flashdec ] || continue
    echo "== bench $name round $round [$flags]" >> "$LOG"
    env $(envs "$flags") timeout 120 ./build-$name/flashdec bench --backend cuda --preset "$PRESETS" --ctx "$CTX" --reps ${REPS:-10} \
      --no-check 2>&1 | tail -n +2 >> "$LOG"
  done
done
# PEER_PRESETS="lfm2,llama3-8b": also bench/torch_peer.py (the head-major layout against SDPA) on each variant's
# library, ROUNDS rounds alternating the variants, at PEER_CTX (default 32768,131072)
if [ -n "${PEER_PRESETS:-}" ]; then
  for round in $(seq 1 ${ROUNDS:-2}); do
    for v in "$@"; do
      name=$(vname "$v") flags=${v#*:}
      [ -f build-$name/libflashdec.so ] || continue
      echo "== torch_peer $name round $round [$flags]" >> "$LOG"
      env $(envs "$flags") timeout 120 python3 bench/torch_peer.py --lib build-$name/libflashdec.so --preset "$PEER_PRESETS" \
        --ctx "${PEER_CTX:-32768,131072}" 2>&1 | tail -n +3 >> "$LOG"
    done
  done
fi
cat "$LOG"
