#!/usr/bin/env bash
# The tool's flag checks: each bad flag gives exit code 2 and one line on stderr naming it; --version works.
#   tests/tool_flags.sh build/flashdec
set -u
tool=${1:-build/flashdec}
fail=0 n=0
bad() { # expected word in the message, then the arguments
  local want=$1; shift
  local err rc
  err=$("$tool" "$@" 2>&1 >/dev/null); rc=$?
  n=$((n + 1))
  if [ "$rc" != 2 ] || [ "$(printf '%s\n' "$err" | wc -l)" != 1 ] || [[ "$err" != *"$want"* ]]; then
    echo "FAIL: flashdec $* -> exit $rc, stderr: $err"; fail=$((fail + 1))
  fi
}
bad "--configs" verify --configs abc
bad "--configs" verify --configs -5
bad "--seed" verify --seed xyz
bad "--window" bench --window abc
bad "--ctx" bench --ctx 0
bad "--ctx" bench --ctx 5000000000
bad "--json" bench --json /nonexistent/x.json
bad "unknown preset" bench --preset nosuch
bad "--reps" bench --reps 0
bad "--gpus" bench --gpus 65
bad "unknown option" bench --nosuch 1
bad "--softcap" bench --softcap -3
bad "--softcap" bench --softcap abc
bad "unknown variant" bench --variants plain,nosuch
bad "--variants" bench --variants plain,sinks --alibi
bad "K/V dtype" bench --kv-dtype q5_1
bad "unknown command" nosuch
v=$("$tool" --version); n=$((n + 1))
[[ "$v" =~ ^flashdec\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "FAIL: flashdec --version printed '$v'"; fail=$((fail + 1)); }
echo "tool flags: $n cases, $fail failed"
exit $((fail != 0))
