#!/usr/bin/env python3
"""Summarise the SASS page of an Nsight Compute report: per kernel, the warp-stall samples by reason and the
instructions with the most samples (bench/gpu_run.sh's `sass` stage writes the page with
`ncu -i REPORT --page source --csv --print-source sass`).

    python3 bench/ncu_sass.py sass.csv [--top 25]
"""
import argparse
import collections
import csv


def kernels(path):
    """[(kernel name, header, rows)] in the order of the file."""
    out, cur = [], None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                cur = [row[1], None, []]
                out.append(cur)
            elif row[0] == "Address" and cur is not None:
                cur[1] = row
            elif cur is not None and cur[1] is not None and len(row) == len(cur[1]):
                cur[2].append(row)
    return out


def num(x):
    try:
        return int(x)
    except ValueError:
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    seen = set()
    for name, hdr, rows in kernels(a.csv):
        if name in seen:  # the page lists a kernel once per profiled launch of it
            continue
        seen.add(name)
        ix = {h: i for i, h in enumerate(hdr)}
        reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
        samples = sum(num(r[ix["# Samples"]]) for r in rows) or 1
        executed = collections.Counter()
        for r in rows:
            if num(r[ix["Instructions Executed"]]):
                executed[num(r[ix["Instructions Executed"]])] += 1
        warps = executed.most_common(1)[0][0] if executed else 0  # straight-line code: once a warp, the most common
        total = sum(num(r[ix["Instructions Executed"]]) for r in rows)
        print(f"== {name}: {samples} samples, {total} warp instructions"
              + (f" (~{total / warps:.0f} per warp)" if warps else ""))
        by = collections.Counter()
        for r in rows:
            for h in reasons:
                by[h] += num(r[ix[h]])
        print("   stalls: " + ", ".join(f"{h[6:]} {100 * v / samples:.0f}%" for h, v in by.most_common(8)))
        for r in sorted(rows, key=lambda r: -num(r[ix["# Samples"]]))[: a.top]:
            s = num(r[ix["# Samples"]])
            top2 = sorted(((num(r[ix[h]]), h[6:]) for h in reasons), reverse=True)[:2]
            why = ", ".join(f"{h} {v}" for v, h in top2 if v)
            print(f"   {s:5d} {100 * s / samples:4.1f}%  x{r[ix['Instructions Executed']]:>6}  "
                  f"{r[ix['Source']].strip()[:64]:<64}  {why}")


if __name__ == "__main__":
    main()
