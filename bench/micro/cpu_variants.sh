#!/usr/bin/env bash
# CPU kernel variants side by side in L3, for bench/NOTES.md's CPU log (rows 19-22 and the ablation table):
#   bench/micro/cpu_variants.sh "name:-DFLAG ..." "name@<git revision>" ...
# "name:flags" builds this tree's libflashdec.so with the flags added to CFLAGS; "name@rev" builds the library of
# a git revision (e.g. a commit and its parent); all outside build/, CUDA off. Each is run by decode_loop
# (bench/micro/decode_loop.c) with ARGS (default "64 32 8 4096 1 300": LFM2 geometry, 4k positions, 1 thread, 300
# calls), ROUNDS times (default 3), alternating the variants; the end prints each variant's times sorted.
set -eu -o pipefail
cd "$(dirname "$0")/../.."
ARGS=${ARGS:-64 32 8 4096 1 300}
ROUNDS=${ROUNDS:-3}
W=${TMPDIR:-/tmp}/fdec-cpu-variants
mkdir -p "$W"
names=()
for v in "$@"; do
  if [[ $v == *@* ]]; then
    name=${v%%@*} rev=${v#*@}
    rm -rf "$W/src-$name" && mkdir -p "$W/src-$name"
    git archive "$rev" | tar -x -C "$W/src-$name"
    make -s -C "$W/src-$name" CUDA=0 build/libflashdec.so >/dev/null
    lib=$W/src-$name/build/libflashdec.so
  else
    name=${v%%:*} flags=${v#*:}
    make -s BUILD="$W/build-$name" CUDA=0 CFLAGS="-O3 $flags" "$W/build-$name/libflashdec.so" >/dev/null
    lib=$W/build-$name/libflashdec.so
  fi
  mkdir -p "$W/lib-$name"
  cp "$lib" "$W/lib-$name/libflashdec.so.0" && ln -sf libflashdec.so.0 "$W/lib-$name/libflashdec.so"
  names+=("$name")
done
cc -O2 -Iinclude bench/micro/decode_loop.c -L"$W/lib-${names[0]}" -lflashdec -lpthread -lm -o "$W/decode_loop"
: > "$W/times"
for r in $(seq 1 "$ROUNDS"); do
  for name in "${names[@]}"; do
    t=$(LD_LIBRARY_PATH="$W/lib-$name" "$W/decode_loop" $ARGS | sed 's/.*: \([0-9.]*\) us.*/\1/')
    echo "$name $t" >> "$W/times"
  done
done
echo "decode_loop $ARGS, $ROUNDS alternated rounds, us per call:"
for name in "${names[@]}"; do
  echo "  $name: $(awk -v n="$name" '$1 == n {print $2}' "$W/times" | sort -n | tr '\n' ' ')"
done
