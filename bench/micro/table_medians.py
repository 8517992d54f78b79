#!/usr/bin/env python3
"""table_medians.py — medians of the 2-thread cases over several runs of `flashdec bench` (bench/NOTES.md, CPU session 41).

Reads the printed tables of any number of runs (one file may hold several) and prints, for each preset and context,
the median % of the floor over the valid cases, their range, and the median over every case. A case is left out when
the read ceiling taken right before it read 43-60 GB/s (this host's half-speed state, NOTES "The machine's two
states": its floor is then not what the kernel can reach), for the Gemma 4 full layer (an FMA floor) also when its
run read the FMA peak under 200 GFLOP/s (the other core taken), and any case under 60% (a case run at half speed).

A second table splits every case by the read ceiling taken right before it (session 42): under 43 GB/s (this host's
usual ~31-37 GB/s minutes, the issue's "about 34 GB/s") and from 43 GB/s (the minutes in which the memory delivers
~50-64 GB/s), with the median % of the floor of each, and the median and lowest GB/s of every case with how many reach
29 GB/s (the issue's figure for the presets of 4 query heads a KV head).

    python3 bench/micro/table_medians.py RUN.txt [RUN.txt ...]
"""
import re
import statistics
import sys

PRESETS = ("llama3-8b", "lfm2", "gemma4-sliding-full", "gemma4-full")
FAST = 43  # GB/s: a read ceiling from here on is one of the host's fast minutes


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cases = {}  # (preset, context) -> [(ceiling GB/s, % of floor, GB/s, valid)]
    for path in sys.argv[1:]:
        peak = None
        with open(path) as f:
            for line in f:
                m = re.search(r"f32 FMA peak (\d+)", line)
                if m:
                    peak = int(m.group(1))
                    continue
                w = line.split()
                if len(w) < 11 or w[0] not in PRESETS or w[2] != "2":
                    continue
                ceil, pct = float(w[6]), float(w[8].rstrip("%"))
                valid = not (FAST <= ceil <= 60) and pct >= 60
                if w[0] == "gemma4-full" and (peak is None or peak < 200):
                    valid = False
                cases.setdefault((w[0], int(w[1])), []).append((ceil, pct, float(w[5]), valid))
    for (name, ctx), v in cases.items():
        ok = sorted(p for _, p, _, good in v if good)
        if not ok:
            print("%-20s %6d  no valid case of %d" % (name, ctx, len(v)))
            continue
        print("%-20s %6d  valid %2d of %2d  median %.1f  range %.1f-%.1f  all-median %.1f"
              % (name, ctx, len(ok), len(v), statistics.median(ok), ok[0], ok[-1],
                 statistics.median(p for _, p, _, _ in v)))
    print("\nby the read ceiling before the case: %% of the floor (median, range) under %d GB/s | from %d GB/s; GB/s"
          % (FAST, FAST))
    for (name, ctx), v in cases.items():
        def part(fast):
            x = sorted(p for c, p, _, _ in v if (c >= FAST) == fast)
            return "n %2d  %5.1f (%5.1f-%5.1f)" % (len(x), statistics.median(x), x[0], x[-1]) if x else "n  0" + " " * 20
        gbs = sorted(g for _, _, g, _ in v)
        print("%-20s %6d  %s | %s | GB/s median %.1f, lowest %.1f, %d of %d at 29 or more"
              % (name, ctx, part(False), part(True), statistics.median(gbs), gbs[0], sum(g >= 29 for g in gbs),
                 len(gbs)))

if __name__ == "__main__":
    main()
