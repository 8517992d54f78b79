#!/usr/bin/env python3
"""ab_summary.py — medians of paired ab_dram runs taken in both orders (bench/NOTES.md, CPU log row 79).

A log holds ab_dram's result lines, each case run twice in a row: `ab_dram A X case` then `ab_dram X A case`, so that
the bias of a pair's second build (row 74) falls once on each side. A line "B=NAME" before such a pair names the
variant X; without one the variant is called "B". For every (variant, case) this prints X's time over A's from each
line (the first line's B/A, the second line's A/B, i.e. 1 / its B/A), their median and their range. A "B=" line or a
change of case starts a new pair; a log whose pairs are not in that order gives wrong ratios.

    python3 bench/micro/ab_summary.py LOG [LOG ...]
"""
import re
import sys

LINE = re.compile(r"D(\d+) H(\d+) G(\d+) L(\d+) threads (\d+).*B/A ([\d.]+)")


def summarise(paths):
    ratios = {}
    for path in paths:
        name, nth, last = "B", 0, None
        with open(path) as f:
            for line in f:
                if line.startswith("B="):
                    name, nth = line.strip()[2:], 0
                    continue
                m = LINE.search(line)
                if not m:
                    continue
                key = (name, "D%s H%s G%s L%s t%s" % m.groups()[:5])
                if key != last:
                    nth, last = 0, key
                r = float(m.group(6))
                ratios.setdefault(key, []).append(r if nth % 2 == 0 else 1.0 / r)
                nth += 1
    return ratios


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for (name, case), v in sorted(summarise(sys.argv[1:]).items()):
        s = sorted(v)
        print("%-4s %-26s n %2d  median %.3f  range %.3f-%.3f" % (name, case, len(s), s[len(s) // 2], s[0], s[-1]))


if __name__ == "__main__":
    main()
