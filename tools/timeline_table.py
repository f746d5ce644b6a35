#!/usr/bin/env python3
"""Where a decode step's time goes inside its CUDA graph, from the kernel timeline that
tools/timeline/ts_kernel_trace.c writes (scripts/device_check.sh timeline).

A step is one replay of a graph: the kernels of one cudaGraphLaunch share its correlation id (where a trace
gives every kernel its own, a replay starts at each run of the graph's first node instead). In each
step the kernels are taken in order of their start; the completion front is the latest end so far. A
kernel's *gap* is the time the front waited for it (start after the front: nothing of the step ran),
its *marginal* time how far it moved the front (its end past the front, from its start or the front,
whichever is later), so that gaps and marginals add up to the step's span, first start to last end; its
*early* time how long it had been running when the front reached it (resident under programmatic dependent
launch, its weights' copies issued, waiting at griddepcontrol.wait): a kernel early by much that still moves
the front by much spends that time after its dependency.
Its *duration* (end − start) includes the time a programmatic dependent launch waits at
griddepcontrol.wait for the kernel before it. Kernels are grouped by name (template arguments kept,
parameters dropped) and averaged over the steps.

    python3 tools/timeline_table.py trace.csv [--graph ID | --eager] [--top N] [--sequence N]
                                    [--bytes ncu.csv --copy GB/s]

--graph: the graph to read (default: the one replayed most often); --eager: instead, every kernel launched
outside a graph, as one step (a prefill: `bench -p 8192 -n 1`, whose warm-up and timed prompts and eager decode steps all count); --sequence N: also list the first N kernels
of the median step in order (offset from the step's start, duration, gap, marginal); --bytes: each kernel's
DRAM bytes a launch from an Nsight Compute CSV of the same step (tools/ncu_table.py, matched by name), with the
TB/s its marginal time gives them, and with --copy (the copy bandwidth measured in the same run) the step's
bubble: its span less the time its bytes take at that bandwidth."""
import argparse, csv, os, shutil, statistics, subprocess, sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_table import per_kernel, short # noqa: E402 (the same names in both tables)


def demangle(names):
    """Mangled name → readable name, through c++filt where the machine has it (else the names as they are)."""
    names = sorted(set(names))
    if not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def load(path):
    """The trace's records; those without timestamps (CUPTI leaves start or end 0 where it could not time a
    kernel, e.g. in buffers flushed at exit) are left out and counted."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"timeline_table: no kernel records in {path}")
    readable = demangle(r["name"] for r in rows)
    timed = []
    for r in rows:
        r["start"], r["end"] = int(r["start_ns"]), int(r["end_ns"])
        r["graph"], r["corr"], r["node"] = int(r["graph_id"]), int(r["correlation_id"]), int(r["graph_node_id"])
        r["kernel"] = short(readable[r["name"]])
        if r["start"] > 0 and r["end"] >= r["start"]:
            timed.append(r)
    if len(timed) < len(rows):
        print(f"({len(rows) - len(timed)} of {len(rows)} records had no timestamps and are left out)")
    return timed


def steps_of(rows, graph):
    mine = sorted((r for r in rows if r["graph"] == graph), key=lambda r: (r["start"], r["end"]))
    by = defaultdict(list)
    for r in mine:
        by[r["corr"]].append(r)
    if len(by) == len(mine) and len(mine) > 1: # one correlation id a kernel: cut at the first node's runs
        first, steps = mine[0]["node"], []
        for r in mine:
            if r["node"] == first or not steps:
                steps.append([])
            steps[-1].append(r)
        return steps
    steps = [sorted(k, key=lambda r: (r["start"], r["end"])) for k in by.values()]
    steps.sort(key=lambda s: s[0]["start"])
    return steps


def walk(step):
    """Each kernel's (gap, marginal, early) in start order; gaps and marginals add up to the step's span."""
    front, out = step[0]["start"], []
    for r in step:
        gap = max(0, r["start"] - front)
        marginal = max(0, r["end"] - max(r["start"], front))
        early = max(0, front - r["start"])
        front = max(front, r["end"])
        out.append((gap, marginal, early))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--graph", type=int)
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--sequence", type=int, default=0)
    ap.add_argument("--bytes")
    ap.add_argument("--copy", type=float)
    a = ap.parse_args()
    rows = load(a.trace)
    if a.eager:
        eager = sorted((r for r in rows if not r["graph"]), key=lambda r: (r["start"], r["end"]))
        if not eager:
            sys.exit("timeline_table: no kernel ran outside a CUDA graph")
        graph, steps = None, [eager]
    else:
        replays = defaultdict(set)
        for r in rows:
            if r["graph"]:
                replays[r["graph"]].add(r["corr"])
        if not replays:
            sys.exit("timeline_table: no kernel ran from a CUDA graph (was the step captured? --eager reads the others)")
        graph = a.graph if a.graph is not None else max(replays, key=lambda g: len(replays[g]))
        if graph not in replays:
            sys.exit(f"timeline_table: no kernel ran from graph {graph} (graphs in the trace: {sorted(replays)})")
        steps = steps_of(rows, graph)
    n_kernels = statistics.mode(len(s) for s in steps)
    whole = [s for s in steps if len(s) == n_kernels] # a replay cut by the end of tracing is left out
    if not whole:
        sys.exit(f"timeline_table: graph {graph} has no whole step")
    spans = [max(r["end"] for r in s) - s[0]["start"] for s in whole]
    starts = [s[0]["start"] for s in whole]
    period = statistics.median(b - a for a, b in zip(starts, starts[1:])) if len(starts) > 1 else 0
    per = defaultdict(lambda: {"n": 0, "dur": 0, "gap": 0, "marg": 0, "early": 0})
    for s in whole:
        for r, (gap, marg, early) in zip(s, walk(s)):
            k = per[r["kernel"]]
            k["n"] += 1
            k["dur"] += r["end"] - r["start"]
            k["gap"] += gap
            k["marg"] += marg
            k["early"] += early
    ns = len(whole)
    span = statistics.median(spans)
    if a.eager:
        print(f"{n_kernels} kernels launched outside graphs, first start to last end {span / 1e3:.1f} µs")
    else:
        print(f"graph {graph}: {ns} whole steps of {n_kernels} kernels; step span median {span / 1e3:.1f} µs "
              f"(min {min(spans) / 1e3:.1f}, max {max(spans) / 1e3:.1f}); one step every {period / 1e3:.1f} µs "
              f"(the host's launch and synchronisation between steps: {max(0, period - span) / 1e3:.1f} µs)")
    tot_gap = sum(k["gap"] for k in per.values()) / ns
    tot_marg = sum(k["marg"] for k in per.values()) / ns
    tot_dur = sum(k["dur"] for k in per.values()) / ns
    print(f"a step: marginal {tot_marg / 1e3:.1f} µs + gaps {tot_gap / 1e3:.1f} µs; durations sum to "
          f"{tot_dur / 1e3:.1f} µs (overlap from early starts: {(tot_dur - tot_marg) / 1e3:.1f} µs)\n")
    mb = {} # DRAM MB a launch, by kernel name (--bytes)
    if a.bytes:
        mb = {name: k["bytes"] / 1e6 / len(k["n"]) for name, k in per_kernel(a.bytes).items() if k["n"]}
        step_mb = sum(mb.get(name, 0.0) * k["n"] / ns for name, k in per.items())
        unmatched = sorted(name for name in per if name not in mb)
        line = f"bytes a step {step_mb:.1f} MB (Nsight Compute's, by kernel name"
        line += f"; {len(unmatched)} kernels without a match: {unmatched[:3]})" if unmatched else ")"
        if a.copy:
            floor = step_mb / a.copy * 1e3 # µs at the copy bandwidth (MB / (GB/s) = ms)
            line += (f"; at {a.copy:.0f} GB/s they take {floor:.1f} µs of the step's {span / 1e3:.1f}: "
                     f"bubble {span / 1e3 - floor:.1f} µs")
        print(line + "\n")
    extra_h, extra_s = (" MB each | TB/s (marginal) |", "---|---|") if mb else ("", "")
    print(f"| kernel | a step | marginal µs a step | share | marginal µs each | duration µs each | early µs each | "
          f"gap µs each |{extra_h}")
    print(f"|---|---|---|---|---|---|---|---|{extra_s}")
    rows_out = sorted(per.items(), key=lambda kv: -kv[1]["marg"])
    for name, k in rows_out[:a.top]:
        c = k["n"] / ns
        extra = ""
        if mb:
            m_each = mb.get(name)
            extra = (f" {m_each:.2f} | {m_each * k['n'] / k['marg'] * 1e3 if k['marg'] else 0:.2f} |"
                     if m_each is not None else " – | – |")
        print(f"| {name} | {c:g} | {k['marg'] / ns / 1e3:.1f} | {100 * k['marg'] / ns / (tot_marg + tot_gap):.1f} % | "
              f"{k['marg'] / k['n'] / 1e3:.2f} | {k['dur'] / k['n'] / 1e3:.2f} | {k['early'] / k['n'] / 1e3:.2f} | "
              f"{k['gap'] / k['n'] / 1e3:.2f} |{extra}")
    rest = rows_out[a.top:]
    if rest:
        m = sum(k["marg"] for _, k in rest) / ns
        print(f"| {len(rest)} more kernels | {sum(k['n'] for _, k in rest) / ns:g} | {m / 1e3:.1f} | "
              f"{100 * m / (tot_marg + tot_gap):.1f} % | | | | |" + (" | |" if mb else ""))
    if a.sequence:
        med = sorted(whole, key=lambda s: max(r["end"] for r in s) - s[0]["start"])[ns // 2]
        t0 = med[0]["start"]
        print("\n| # | kernel | start µs | duration µs | early µs | gap µs | marginal µs |\n|---|---|---|---|---|---|---|")
        for i, (r, (gap, marg, early)) in enumerate(zip(med, walk(med))):
            if i >= a.sequence:
                break
            print(f"| {i} | {r['kernel']} | {(r['start'] - t0) / 1e3:.2f} | {(r['end'] - r['start']) / 1e3:.2f} | "
                  f"{early / 1e3:.2f} | {gap / 1e3:.2f} | {marg / 1e3:.2f} |")


main()
