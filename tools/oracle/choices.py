#!/usr/bin/env python3
"""Reads and compares the discrete choices the CPU forward records with TURBOSPARK_CPU_CHOICES=FILE
(src/cpu/forward.h, ts_cpu_set_choice_hook): the router's k experts per layer and token, and the
indexer's kept blocks per QSA layer and query past the budget.

    python3 choices.py A.bin                      # a summary of one file (counts, margins)
    python3 choices.py A.bin B.bin                # where B's choices differ from A's
    python3 choices.py A.bin B.bin --logits LA.npy LB.npy [--gate 2e-3] [--json OUT.json]

With --logits (float32 [T, V], `turbospark logits` of the same run as each file), it also gives the
per-position deviation max|LB − LA| / max|LA| (the scale: max|LA| over all positions, as
tests/cuda/realwidth.sh measures), its percentiles, the positions above --gate, and for each of
those the nearest earlier position where a choice changed. Records come from one sequence (seq 0 or
-1); a file of several sequences is refused.

Record layout (machine byte order, 32-bit words): kind (0 router, 1 indexer), layer, seq, pos,
margin (float32), n, then n ids.
"""
import argparse
import json
import sys

import numpy as np


def read(path):
    """{(kind, layer, pos): (frozenset(ids), ids tuple, margin)}"""
    raw = np.fromfile(path, dtype=np.int32)
    out, i = {}, 0
    while i < len(raw):
        if i + 6 > len(raw):
            sys.exit(f"{path}: a truncated record at word {i}")
        kind, layer, seq, pos = (int(v) for v in raw[i:i + 4])
        margin = float(raw[i + 4:i + 5].view(np.float32)[0])
        n = int(raw[i + 5])
        if n < 0 or i + 6 + n > len(raw):
            sys.exit(f"{path}: a truncated record at word {i}")
        if seq > 0:
            sys.exit(f"{path}: records of several sequences (seq {seq}); run one sequence")
        ids = tuple(int(v) for v in raw[i + 6:i + 6 + n])
        key = (kind, layer, pos)
        if key in out:
            sys.exit(f"{path}: two records for kind {kind}, layer {layer}, position {pos}")
        out[key] = (frozenset(ids), ids, margin)
        i += 6 + n
    return out


KIND = {0: "router", 1: "indexer"}


def summary(name, rec):
    for kind in (0, 1):
        layers = sorted({k[1] for k in rec if k[0] == kind})
        for l in layers:
            keys = [k for k in rec if k[0] == kind and k[1] == l]
            m = np.array([rec[k][2] for k in keys], np.float64)
            pos = sorted(k[2] for k in keys)
            print(f"{name}: {KIND[kind]} layer {l}: {len(keys)} positions ({pos[0]}..{pos[-1]}), "
                  f"{len(rec[keys[0]][1])} ids each; margin median {np.median(m):.3g}, "
                  f"1st percentile {np.percentile(m, 1):.3g}, min {m.min():.3g}, "
                  f"ties (margin 0) {int((m == 0).sum())}")


def compare(a, b):
    """Per (kind, layer): the positions whose choice differs and how many ids changed."""
    if set(a) != set(b):
        only = sorted(set(a) ^ set(b))[:5]
        sys.exit(f"the two files record different (kind, layer, position) sets, e.g. {only}")
    diffs = {}
    for key in sorted(a):
        sa, sb = a[key][0], b[key][0]
        if sa != sb:
            diffs[key] = len(sa - sb)
    return diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--logits", nargs=2, metavar=("LA", "LB"))
    ap.add_argument("--gate", type=float, default=2e-3)
    ap.add_argument("--json")
    args = ap.parse_args()
    a = read(args.a)
    summary("A", a)
    if not args.b:
        return
    b = read(args.b)
    diffs = compare(a, b)
    report = {"changed": [], "deviation": None}
    for kind in (0, 1):
        for l in sorted({k[1] for k in a if k[0] == kind}):
            n_all = sum(1 for k in a if k[0] == kind and k[1] == l)
            ch = sorted((k[2], c) for k, c in diffs.items() if k[0] == kind and k[1] == l)
            ids = sum(c for _, c in ch)
            print(f"{KIND[kind]} layer {l}: the choice differs at {len(ch)} of {n_all} positions "
                  f"({ids} ids swapped){': ' + ', '.join(str(p) for p, _ in ch[:40]) if ch else ''}"
                  f"{' ...' if len(ch) > 40 else ''}")
            for p, c in ch:
                report["changed"].append({"kind": KIND[kind], "layer": l, "pos": p, "swapped": c,
                                          "margin_a": a[(kind, l, p)][2], "margin_b": b[(kind, l, p)][2]})
    for kind in (0, 1):
        ms = np.array([a[k][2] for k in diffs if k[0] == kind], np.float64)
        if len(ms):
            allm = np.array([v[2] for k, v in a.items() if k[0] == kind], np.float64)
            print(f"{KIND[kind]} margins in A where the choice changed: median {np.median(ms):.3g}, max "
                  f"{ms.max():.3g} (over all its choices: median {np.median(allm):.3g})")
    changed_pos = sorted({k[2] for k in diffs})
    if args.logits:
        la = np.load(args.logits[0], mmap_mode="r")
        lb = np.load(args.logits[1], mmap_mode="r")
        assert la.shape == lb.shape, f"logits shapes {la.shape} and {lb.shape}"
        T = la.shape[0]
        scale = max(float(np.abs(la[i:i + 256]).max()) for i in range(0, T, 256))
        dev = np.concatenate([
            np.abs(np.asarray(lb[i:i + 256], np.float64) - np.asarray(la[i:i + 256], np.float64)).max(-1)
            for i in range(0, T, 256)
        ]) / scale
        q = np.percentile(dev, [50, 90, 99])
        big = [int(p) for p in np.nonzero(dev > args.gate)[0]]
        print(f"deviation max|LB - LA| / max|LA| over {T} positions: median {q[0]:.3g}, 90th {q[1]:.3g}, "
              f"99th {q[2]:.3g}, max {dev.max():.3g} at {int(dev.argmax())}; above {args.gate:g} at "
              f"{len(big)} positions")
        rows = []
        for p in big:
            same = [f"{KIND[k[0]]} L{k[1]}" for k in diffs if k[2] == p]
            before = [c for c in changed_pos if c <= p]
            rows.append({"pos": p, "dev": float(dev[p]), "changed_here": same,
                         "last_change_at_or_before": before[-1] if before else None})
            print(f"  {p}: {dev[p]:.3g}; choices changed here: {', '.join(same) if same else 'none'}; "
                  f"last change at or before: {before[-1] if before else 'none'}")
        if changed_pos:
            at = dev[changed_pos]
            rest = np.delete(dev, changed_pos)
            print(f"deviation at the {len(changed_pos)} positions with a changed choice: median "
                  f"{np.median(at):.3g}, max {at.max():.3g}; at the other {len(rest)}: median "
                  f"{np.median(rest):.3g}, max {rest.max() if len(rest) else 0:.3g}")
        report["deviation"] = {"scale": scale, "median": q[0], "p90": q[1], "p99": q[2],
                               "max": float(dev.max()), "argmax": int(dev.argmax()), "above_gate": rows,
                               "per_position": [float(v) for v in dev]}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main()
