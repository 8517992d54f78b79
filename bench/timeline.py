#!/usr/bin/env python3
"""Where a CUDA call's time goes, from a timeline build (bench/NOTES.md, CUDA log row 45).

A build made with -DFDEC_CUDA_TIMELINE=1 in CUDA_GENCODE records, for every decode and merge block, the global
timer at its entry, after its grid wait, before its tail and at its end, its SM and clock64 deltas; the context's
destruction appends them to the file named by FDEC_TL_OUT. This script splits the records into calls (a decode
launch and the merge launch after it) and prints medians over the calls, in microseconds:

  bench/timeline.py FILE [FILE ...]
"""
import collections
import statistics as st
import sys

def load(path):
    dumps, cur = [], None
    for line in open(path):
        if line.startswith("#"):
            cur = []
            dumps.append(cur)
            continue
        f = line.split()
        if len(f) < 11 or cur is None:
            continue
        k, b, nb, sm = map(int, f[:4])
        t = list(map(int, f[4:8]))
        c = list(map(int, f[8:11]))
        cur.append(dict(kind=k, block=b, nb=nb, sm=sm, t=t, c=c))
    return [d for d in dumps if d]


def calls_of(recs):
    recs = sorted(recs, key=lambda r: r["t"][0])
    calls, cur, merge_end = [], None, None
    for r in recs:
        if r["kind"] == 1 and (cur is None or (merge_end is not None and r["t"][0] >= merge_end)):
            cur = {"dec": [], "mrg": []}
            calls.append(cur)
            merge_end = None
        if cur is None:
            continue
        if r["kind"] == 1:
            cur["dec"].append(r)
        else:
            cur["mrg"].append(r)
            merge_end = max(merge_end or 0, r["t"][3])
    # whole calls only: every block of both launches present
    return [c for c in calls if c["dec"] and c["mrg"] and len(c["dec"]) == c["dec"][0]["nb"]
            and len(c["mrg"]) == c["mrg"][0]["nb"]]


def med(xs):
    return st.median(xs) if xs else float("nan")


def report(name, recs):
    calls = calls_of(recs)
    if len(calls) < 3:
        print(f"{name}: {len(calls)} whole calls, too few")
        return
    rows = []
    for i in range(len(calls) - 1):
        c, n = calls[i], calls[i + 1]
        d, m = c["dec"], c["mrg"]
        t0 = min(r["t"][0] for r in d)
        rows.append(dict(
            period=min(r["t"][0] for r in n["dec"]) - t0,
            dec_entry_spread=max(r["t"][0] for r in d) - t0,
            dec_go_first=min(r["t"][1] for r in d) - t0,
            dec_tail_first=min(r["t"][2] for r in d) - t0,
            dec_tail_med=med([r["t"][2] for r in d]) - t0,
            dec_tail_mean=st.mean([r["t"][2] for r in d]) - t0,
            dec_tail_last=max(r["t"][2] for r in d) - t0,
            dec_end_last=max(r["t"][3] for r in d) - t0,
            mrg_entry_first=min(r["t"][0] for r in m) - t0,
            mrg_go_first=min(r["t"][1] for r in m) - t0,
            mrg_go_last=max(r["t"][1] for r in m) - t0,
            mrg_end_last=max(r["t"][3] for r in m) - t0,
            next_dec_entry=min(r["t"][0] for r in n["dec"]) - t0,
        ))
    d0 = calls[0]["dec"]
    print(f"{name}: {len(rows)} calls, decode {d0[0]['nb']} blocks on {len({r['sm'] for r in d0})} SMs, "
          f"merge {calls[0]['mrg'][0]['nb']} blocks; times from the call's first decode entry, us (median over calls)")
    for k in rows[0]:
        print(f"  {k:18s} {med([r[k] for r in rows]) / 1e3:8.2f}")
    dc = [r["c"] for c in calls for r in c["dec"]]
    mc = [r["c"] for c in calls for r in c["mrg"]]
    print("  decode block, clock64 cycles from its entry (median): go %.0f, tail %.0f, end %.0f; tail->end %.0f" % (
        med([c[0] for c in dc]), med([c[1] for c in dc]), med([c[2] for c in dc]), med([c[2] - c[1] for c in dc])))
    print("  merge block, cycles: entry->go %.0f, go->mark 2 (the sums done) %.0f, mark 2->end %.0f" % (
        med([c[0] for c in mc]), med([c[1] - c[0] for c in mc]), med([c[2] - c[1] for c in mc])))
    # the same SMs late every call? per-SM medians of the compute-done time against the spread within a call
    per_sm = collections.defaultdict(list)
    for c in calls:
        t0 = min(r["t"][0] for r in c["dec"])
        for r in c["dec"]:
            per_sm[r["sm"]].append(r["t"][2] - t0)
    sm_med = {k: med(v) / 1e3 for k, v in per_sm.items()}
    groups = collections.defaultdict(list)
    for k, v in sm_med.items():
        groups[k // 16].append(v)
    print("  compute done: spread within a call %.1f us (median); spread of the per-SM medians %.1f us" % (
        med([max(r["t"][2] for r in c["dec"]) - min(r["t"][2] for r in c["dec"]) for c in calls]) / 1e3,
        max(sm_med.values()) - min(sm_med.values())))
    print("  per-SM median by SMs 0-15, 16-31, ...: " + " ".join("%.1f" % med(v) for _, v in sorted(groups.items())))



if __name__ == "__main__":
    for path in sys.argv[1:]:
        for i, d in enumerate(load(path)):
            report(f"{path} [dump {i}]", d)
