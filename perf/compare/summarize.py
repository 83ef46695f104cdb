#!/usr/bin/env python3
"""Turns the raw tables of perf/compare/run into JSON, a summary and plots.

    summarize.py --out DIR [--placement out|in] [--plot-cmd PATH] [--noise-floor PCT]

Reads DIR/raw/*.txt (nccl-tests tables, one file per library x collective x ranks x repeat x
size band; beside each, .cmd holds the exact command and .rc its exit status), DIR/meta.json
(machine, versions, memcpy bandwidth, launch notes) and writes:

  DIR/<library>_<tool>_n<N>.json   one per library x collective x ranks, the schema Loom's
                                   perf tools write, each value the median over the repeats
  DIR/summary.json, DIR/summary.md per size: every library's busbw and time, Loom's ratio to
                                   the best peer
  DIR/plots/<tool>_n<N>.png        bus bandwidth and time against size (perf/plot)

A run of Loom against another revision of itself (run --against REV; meta.json has "against",
raw names "rev" and "work") gets a summary of its own: per collective x ranks x size each side's
median time and busbw, the ratio working tree / REV of the times, each side's spread over the
repeats ((max - min) / median) and a verdict, "slower" or "faster" only beyond the larger spread
(at least --noise-floor); an overview line per collective x ranks; JSON files rev_<tool>_n<N>.json
and work_<tool>_n<N>.json; plots of both.

A run of the network mode (run --net; meta.json has "network") is titled as such, names the
hosts and each library's transport, and adds the network goal: Loom's busbw at least 1.3x the
best peer's from 1 MiB up, its time no worse than the best peer's below 64 KiB. With several
ranks per host (run --net --per-host N) the tables name hosts x ranks per host, the header the
transports inside and across hosts, and a second Loom run, "loom-flat" (LOOM_ALGO=allreduce:ring,
"Loom flat ring"), gets a column of its own and a table against Loom (the tuner's choice); it is
never a peer. The N in file names is always the number of ranks.

Only the standard library, so a fresh Debian has what it needs.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys

COLLS = [  # (-C name, nccl-tests tool, title)
    ("allreduce", "all_reduce_perf", "all-reduce"),
    ("allgather", "all_gather_perf", "all-gather"),
    ("reducescatter", "reduce_scatter_perf", "reduce-scatter"),
    ("alltoall", "alltoall_perf", "all-to-all"),
    ("broadcast", "broadcast_perf", "broadcast"),
]
TOOL_OF = {c: t for c, t, _ in COLLS}
TITLE_OF = {c: title for c, _, title in COLLS}
REDUCES = {"allreduce", "reducescatter"}
# Columns of the summary, in order; Gloo's algorithms fold into one column (the best per size).
PEERS = ["openmpi", "mpich", "gloo"]
LABEL = {"loom": "Loom", "loom-flat": "Loom flat ring", "openmpi": "Open MPI", "mpich": "MPICH", "gloo": "Gloo"}
# Loom's own runs: never a peer. "loom-flat" is Loom forced to the flat ring (run --net --per-host).
LOOMS = ("loom", "loom-flat")
FLAT_ALGO = "flat ring (LOOM_ALGO=allreduce:ring)"


def column_of(lib, doc):
    """The summary column of a raw library name: Loom's runs apart, Gloo's algorithms folded."""
    return lib if lib in LOOMS else doc["library"]

RAW_NAME = re.compile(r"^(?P<lib>[a-z0-9_.-]+?)__(?P<coll>[a-z]+)__n(?P<n>\d+)__r(?P<rep>\d+)__b(?P<band>\d+)$")


def parse_table(text):
    """Rows of an nccl-tests table: {size: (count, root, oop, ip)}; each placement a dict."""
    rows = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        f = line.split()
        if len(f) < 13 or not f[0].isdigit():
            continue

        def cell(i):
            wrong = f[i + 3]
            return {"time_us": float(f[i]), "algbw": float(f[i + 1]), "busbw": float(f[i + 2]),
                    "wrong": int(wrong) if wrong.lstrip("-").isdigit() else None}

        try:
            rows[int(f[0])] = (int(f[1]), int(f[4]), cell(5), cell(9))
        except ValueError:
            continue
    return rows


def header_value(text, key):
    m = re.search(r"^#\s*%s:\s*(.+)$" % re.escape(key), text, re.M)
    return m.group(1).strip() if m else None


def load_runs(raw_dir):
    """{(lib, coll, n): {rep: {"rows": {...}, "cmds": [...], "text": first header, "rc": [..]}}}"""
    runs = {}
    for path in sorted(glob.glob(os.path.join(raw_dir, "*.txt"))):
        m = RAW_NAME.match(os.path.basename(path)[:-4])
        if not m:
            continue
        key = (m["lib"], m["coll"], int(m["n"]))
        rep = runs.setdefault(key, {}).setdefault(int(m["rep"]), {"rows": {}, "cmds": [], "rc": [], "text": ""})
        with open(path, errors="replace") as fh:
            text = fh.read()
        rep["rows"].update(parse_table(text))
        rep["text"] = rep["text"] or text
        base = path[:-4]
        if os.path.exists(base + ".cmd"):
            with open(base + ".cmd") as fh:
                rep["cmds"].append(fh.read().strip())
        if os.path.exists(base + ".rc"):
            with open(base + ".rc") as fh:
                rep["rc"].append(int(fh.read().strip() or "0"))
    return runs


def bus_factor(coll, n):
    """nccl-tests' bus bandwidth factors."""
    if coll == "allreduce":
        return 2.0 * (n - 1) / n
    if coll == "broadcast":
        return 1.0
    return (n - 1) / n


def median_cell(cells, size, coll, n):
    """The median time over the repeats; algbw and busbw recomputed from it and the size, as
    nccl-tests defines them, since the tables print bandwidths with two decimals only."""
    cells = [c for c in cells if c]
    if not cells:
        return None
    wrongs = [c["wrong"] for c in cells if c["wrong"] is not None]
    t = statistics.median(c["time_us"] for c in cells)
    algbw = size / t / 1e3 if t > 0 else 0.0
    return {
        "time_us": round(t, 3),
        "algbw": round(algbw, 5),
        "busbw": round(algbw * bus_factor(coll, n), 5),
        "wrong": max(wrongs) if wrongs else None,
    }


def library_json(lib, coll, n, reps, meta):
    base, _, algo = lib.partition("-")
    sizes = sorted({s for r in reps.values() for s in r["rows"]})
    results, bw = [], []
    out_of_bounds = 0
    for size in sizes:
        present = [r["rows"][size] for r in reps.values() if size in r["rows"]]
        count, root = present[0][0], present[0][1]
        oop = median_cell([p[2] for p in present], size, coll, n)
        ip = median_cell([p[3] for p in present], size, coll, n)
        for c in (oop, ip):
            bw.append(c["busbw"])
        out_of_bounds += sum(max(p[i]["wrong"] or 0, 0) for p in present for i in (2, 3))
        results.append({"size": size, "count": count, "type": "float",
                        "redop": "sum" if coll in REDUCES else "none", "root": root,
                        "out_of_place": oop, "in_place": ip})
    first = reps[min(reps)]
    doc = {
        "tool": TOOL_OF[coll],
        "library": base,
        "version": meta.get("versions", {}).get(base) or header_value(first["text"], "Library") or "",
        "command": " ; ".join(first["cmds"]),
        "machine": meta.get("machine", {}),
        "nranks": n,
        "nthreads": 1,
        "datatype": "float",
        "op": "sum" if coll in REDUCES else "none",
        "root": 0,
        "mem": "host",
        "registered": False,
        "results": results,
        "out_of_bounds": out_of_bounds,
        "avg_busbw": round(sum(bw) / len(bw), 4) if bw else 0.0,
    }
    if lib == "loom-flat":
        doc["algorithm"] = FLAT_ALGO
    elif algo:
        doc["algorithm"] = algo
    doc["repeats"] = len(reps)
    doc["statistic"] = ("median time over the repeats, per size and placement; algbw = size / "
                        "time, busbw = algbw * nccl-tests' factor")
    doc["exit_status"] = sorted({rc for r in reps.values() for rc in r["rc"]})
    return doc


def fmt_size(b):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale and b % scale == 0:
            return "%d %s" % (b // scale, unit)
    return "%d B" % b


def fmt_time(us):
    if us is None:
        return "-"
    return "%.0f" % us if us >= 1000 else "%.1f" % us if us >= 10 else "%.2f" % us


def fmt_bw(bw):
    if bw is None:
        return "-"
    return "%.1f" % bw if bw >= 10 else "%.2f" % bw if bw >= 1 else "%.3f" % bw


def fmt_ratio(r):
    return "-" if r is None else "%.2f" % r


def comparison(docs, coll, n, placement):
    """Rows {size, libs: {lib: {busbw, time_us, algo}}, best_peer, ratios} for one table."""
    key = "out_of_place" if placement == "out" else "in_place"
    by_lib = {}
    for (lib, c, nn), doc in docs.items():
        if c != coll or nn != n:
            continue
        base = column_of(lib, doc)
        for r in doc["results"]:
            cell = r[key]
            if r["size"] == 0 or cell is None or cell["time_us"] <= 0:
                continue
            entry = {"busbw": cell["busbw"], "time_us": cell["time_us"], "algo": doc.get("algorithm"),
                     "wrong": cell["wrong"]}
            slot = by_lib.setdefault(base, {})
            old = slot.get(r["size"])
            # Gloo: the best of its algorithms, preferring those whose results were right.
            if old is None or (bool(entry["wrong"]), entry["time_us"]) < (bool(old["wrong"]), old["time_us"]):
                slot[r["size"]] = entry
    sizes = sorted({s for v in by_lib.values() for s in v})
    rows = []
    for size in sizes:
        libs = {lib: by_lib[lib][size] for lib in by_lib if size in by_lib[lib]}
        # A peer whose result was wrong at this size is no yardstick.
        peers = {lib: v for lib, v in libs.items() if lib not in LOOMS and not v["wrong"]}
        best = min(peers, key=lambda l: peers[l]["time_us"]) if peers else None
        loom, flat = libs.get("loom"), libs.get("loom-flat")
        row = {"size": size, "libs": libs, "best_peer": best, "ratio_busbw": None, "ratio_time": None}
        if best and loom:
            bp = peers[best]
            row["ratio_busbw"] = round(loom["busbw"] / bp["busbw"], 3) if bp["busbw"] > 0 else None
            row["ratio_time"] = round(loom["time_us"] / bp["time_us"], 3)
        if "loom-flat" in by_lib:  # Loom (the tuner's choice) over Loom's flat ring
            row["ratio_flat_time"] = round(loom["time_us"] / flat["time_us"], 3) if loom and flat else None
        rows.append(row)
    return rows


def markdown_table(rows, libs_present):
    cols = [l for l in LOOMS if l == "loom" or l in libs_present] + [p for p in PEERS if p in libs_present]
    head = ["size"]
    for lib in cols:
        head += ["%s GB/s" % LABEL[lib], "%s us" % LABEL[lib]]
    if "gloo" in cols:
        head += ["Gloo alg"]
    head += ["best peer", "Loom/best busbw", "Loom/best time"]
    if "loom-flat" in cols:
        head += ["Loom/flat ring time"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
    for r in rows:
        line = [fmt_size(r["size"])]
        for lib in cols:
            v = r["libs"].get(lib)
            mark = " (wrong)" if v and v["wrong"] else ""
            line += [fmt_bw(v and v["busbw"]) + mark, fmt_time(v and v["time_us"])]
        if "gloo" in cols:
            g = r["libs"].get("gloo")
            line += [(g and g.get("algo")) or "-"]
        best = r["best_peer"]
        line += [LABEL.get(best, best or "-"), fmt_ratio(r["ratio_busbw"]), fmt_ratio(r["ratio_time"])]
        if "loom-flat" in cols:
            line += [fmt_ratio(r.get("ratio_flat_time"))]
        out.append("| " + " | ".join(line) + " |")
    return out


def headline(rows):
    """Loom against the best peer at the largest and the smallest size measured."""
    usable = [r for r in rows if r["libs"].get("loom") and r["best_peer"]]
    if not usable:
        return None
    big, small = usable[-1], usable[0]
    return {
        "largest": {"size": big["size"], "loom_busbw": big["libs"]["loom"]["busbw"],
                    "peer": big["best_peer"], "peer_busbw": big["libs"][big["best_peer"]]["busbw"],
                    "ratio_busbw": big["ratio_busbw"]},
        "smallest": {"size": small["size"], "loom_time_us": small["libs"]["loom"]["time_us"],
                     "peer": small["best_peer"],
                     "peer_time_us": small["libs"][small["best_peer"]]["time_us"],
                     "ratio_time": small["ratio_time"]},
    }


# The network mode's goal (the issue that asked for it): from 1 MiB up, Loom's busbw at least
# GOAL_BW times the best peer's; below 64 KiB, Loom's time no more than the best peer's.
GOAL_BW, GOAL_BW_FROM, GOAL_LAT_BELOW = 1.3, 1 << 20, 64 << 10


def goal_check(rows):
    """The goal on one table: the worst ratio in each range, and whether it is met."""
    big = [r for r in rows if r["size"] >= GOAL_BW_FROM and r["ratio_busbw"] is not None]
    small = [r for r in rows if r["size"] < GOAL_LAT_BELOW and r["ratio_time"] is not None]
    res = {}
    if big:
        w = min(big, key=lambda r: r["ratio_busbw"])
        res["bandwidth"] = {"sizes": [big[0]["size"], big[-1]["size"]], "worst_size": w["size"],
                            "worst_ratio_busbw": w["ratio_busbw"], "peer": w["best_peer"],
                            "met": all(r["ratio_busbw"] >= GOAL_BW for r in big),
                            "sizes_met": sum(r["ratio_busbw"] >= GOAL_BW for r in big), "sizes_all": len(big)}
    if small:
        w = max(small, key=lambda r: r["ratio_time"])
        res["latency"] = {"sizes": [small[0]["size"], small[-1]["size"]], "worst_size": w["size"],
                          "worst_ratio_time": w["ratio_time"], "peer": w["best_peer"],
                          "met": all(r["ratio_time"] <= 1.0 for r in small),
                          "sizes_met": sum(r["ratio_time"] <= 1.0 for r in small), "sizes_all": len(small)}
    return res


def per_host(net):
    return int((net or {}).get("per_host") or 1)


def shape(n, net):
    """n ranks as the tables name them: "n" (one rank per host, or the host mode), else "H x L"."""
    ph = per_host(net)
    return "%d x %d" % (n // ph, ph) if ph > 1 else str(n)


def flat_check(rows):
    """Loom (the tuner's choice) against Loom's flat ring on one table: time ratios."""
    rs = [r for r in rows if r.get("ratio_flat_time") is not None]
    if not rs:
        return None
    best = min(rs, key=lambda r: r["ratio_flat_time"])
    worst = max(rs, key=lambda r: r["ratio_flat_time"])
    return {"largest": {"size": rs[-1]["size"], "ratio_time": rs[-1]["ratio_flat_time"]},
            "best": {"size": best["size"], "ratio_time": best["ratio_flat_time"]},
            "worst": {"size": worst["size"], "ratio_time": worst["ratio_flat_time"]},
            "sizes_faster": sum(r["ratio_flat_time"] < 1.0 for r in rs), "sizes_all": len(rs)}


def network_lines(net):
    """The header of a network-mode summary."""
    hosts = net.get("hosts") or []
    ph = per_host(net)
    topo = (net.get("topology") or "").rstrip(".")
    if ph > 1:
        what = "%s hosts x %d ranks per host (%s ranks)" % (
            " and ".join(str(h) for h in hosts), ph, " and ".join(str(h * ph) for h in hosts))
    else:
        what = "%s hosts" % " and ".join(str(h) for h in hosts)
    out = ["Network mode: %s. %s." % (what, topo[:1].upper() + topo[1:]), ""]
    ia = net.get("inside_across")
    if ia:
        out += ["Transports inside a host and across hosts:", "",
                "| library | inside a host | across hosts |", "|---|---|---|"]
        for lib, (inside, across) in ia.items():
            out.append("| %s | %s | %s |" % (LABEL.get(lib, lib), inside, across))
        out += ["", "In detail:"]
    else:
        out.append("Transports:")
    out.append("")
    for lib, how in (net.get("transports") or {}).items():
        out.append("- %s: %s" % (LABEL.get(lib, lib), how))
    if net.get("openmpi_unavailable"):
        out += ["", "**Open MPI did not run across the namespaces**: %s" % net["openmpi_unavailable"]]
    out.append("")
    return out



def machine_state_lines(out, meta):
    """The load averages sampled during the run (load.txt) and the memcpy bandwidth, as lines."""
    lines = []
    load_path = os.path.join(out, "load.txt")
    if os.path.exists(load_path):
        with open(load_path) as fh:
            samples = [line.split() for line in fh if line.strip()]
        lines.append("Load average (1, 5, 15 min; ours included while we run) %s." % ", ".join(
            "%s %s" % (f[0], "/".join(f[1:])) for f in samples))
    mc = meta.get("memcpy") or {}
    if mc:
        lines.append("memcpy bandwidth (perf/compare/memcpy_bw, 256 MiB, best of 7): %s."
                     % ", ".join("%s thread(s) %.2f GB/s" % (t, v) for t, v in sorted(mc.items())))
    lines += c2c_lines(out)
    return lines


def c2c_lines(out):
    """The cores' state before each run (c2c.txt: LIB COLL N REP BAND, then c2c's line), as
    lines: the range of the hand-off and the ping-pong, and per library the runs that started
    with the cores far apart (a hand-off under half the run's best)."""
    path = os.path.join(out, "c2c.txt")
    if not os.path.exists(path):
        return []
    runs = []
    with open(path) as fh:
        for line in fh:
            w = line.split()
            if len(w) >= 14 and w[5] == "c2c":
                runs.append((w[0], float(w[w.index("handoff_gbs") + 1]),
                             float(w[w.index("pingpong_us") + 1]),
                             "CPUs %s and %s" % (w[7], w[8]), int(w[w.index("bytes") + 1])))
    if not runs:
        return []
    best = max(r[1] for r in runs)
    per = {}
    for lib, gbs, *_ in runs:
        far, total = per.get(lib, (0, 0))
        per[lib] = (far + (gbs < best / 2), total + 1)
    cpus = ", ".join(sorted({r[3] for r in runs}))
    sizes = ", ".join(fmt_size(b) for b in sorted({r[4] for r in runs}))
    return ["Cores before each run (perf/compare/c2c, %s: a %s hand-off, a ping-pong): "
            "%.1f-%.1f GB/s, %.3f-%.3f us; far apart (hand-off under half the best) before %s. "
            "A library that ran far apart more often than another is compared at a disadvantage."
            % (cpus, sizes, min(r[1] for r in runs), best, min(r[2] for r in runs),
               max(r[2] for r in runs),
               ", ".join("%d of %d %s runs" % (per[k][0], per[k][1], k) for k in sorted(per)))]

def write_summary(out, docs, meta, placement):
    nranks_all = sorted({n for (_, _, n) in docs})
    net = meta.get("network")
    word = ("hosts x ranks" if per_host(net) > 1 else "hosts") if net else "ranks"
    summary = {"machine": meta.get("machine"), "memcpy": meta.get("memcpy"),
               "versions": meta.get("versions"), "launch": meta.get("launch"),
               "repeats": meta.get("repeats"), "placement": placement, "collectives": {}}
    if net:
        summary["network"] = net
    md = ["# Loom against Open MPI and Gloo between network namespaces" if net
          else "# Loom against MPI and Gloo on one host", ""]
    m = meta.get("machine", {})
    md.append("Machine: %s, %s CPUs (%s), %s GiB. Date: %s. Mode: %s, %s repeat(s), median per size."
              % (m.get("hostname"), m.get("cpus"), m.get("cpu_model"), m.get("mem_gib"),
                 meta.get("date"), meta.get("mode"), meta.get("repeats")))
    vers = meta.get("versions") or {}
    md.append("Versions: %s." % "; ".join("%s: %s" % (LABEL.get(k, k), v) for k, v in vers.items() if v))
    md += machine_state_lines(out, meta)
    if net:
        md += [""] + network_lines(net)
    md += ["", "Float32, sum where the collective reduces; %s columns; busbw as nccl-tests "
           "(all-reduce 2(n-1)/n, all-gather/reduce-scatter/all-to-all (n-1)/n, broadcast 1). "
           "Ratios are Loom over the best peer at that size: busbw above 1 and time below 1 "
           "favour Loom. Gloo is the best of its algorithms at each size (named). \"(wrong)\": "
           "some element of the checked call was wrong (in any repeat); such a result is never "
           "the best peer."
           % ("out-of-place" if placement == "out" else "in-place"), ""]
    heads = ["| collective | %s | largest size | Loom busbw | best peer | peer busbw | ratio "
             "| smallest size | Loom us | best peer | peer us | ratio |" % word,
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|"]
    goals = ["| collective | %s | busbw >= %.1fx best peer, %s and up: worst (size, peer) | met "
             "| time <= best peer below %s: worst (size, peer) | met |"
             % (word, GOAL_BW, fmt_size(GOAL_BW_FROM), fmt_size(GOAL_LAT_BELOW)),
             "|---|---:|---|---|---|---|"]
    flats = ["| collective | %s | Loom/flat ring time at the largest size | best (size) | worst (size) "
             "| sizes where Loom beats its flat ring |" % word,
             "|---|---:|---:|---:|---:|---:|"]
    sections = []
    for coll, tool, title in COLLS:
        for n in nranks_all:
            rows = comparison(docs, coll, n, placement)
            if not rows:
                continue
            libs_present = {lib for r in rows for lib in r["libs"]}
            h = headline(rows)
            summary["collectives"].setdefault(coll, {})[str(n)] = {"rows": rows, "headline": h}
            if net:
                g = goal_check(rows)
                summary["collectives"][coll][str(n)]["goal"] = g
                bw, lat = g.get("bandwidth"), g.get("latency")
                goals.append("| %s | %s | %s | %s | %s | %s |" % (
                    title, shape(n, net),
                    "%.2f (%s, %s)" % (bw["worst_ratio_busbw"], fmt_size(bw["worst_size"]), LABEL.get(bw["peer"]))
                    if bw else "-",
                    ("yes" if bw["met"] else "no, %d of %d sizes" % (bw["sizes_met"], bw["sizes_all"])) if bw else "-",
                    "%.2f (%s, %s)" % (lat["worst_ratio_time"], fmt_size(lat["worst_size"]), LABEL.get(lat["peer"]))
                    if lat else "-",
                    ("yes" if lat["met"] else "no, %d of %d sizes" % (lat["sizes_met"], lat["sizes_all"])) if lat else "-"))
            if h:
                L, S = h["largest"], h["smallest"]
                heads.append("| %s | %s | %s | %.2f | %s | %.2f | %s | %s | %s | %s | %s | %s |" % (
                    title, shape(n, net), fmt_size(L["size"]), L["loom_busbw"], LABEL.get(L["peer"]), L["peer_busbw"],
                    fmt_ratio(L["ratio_busbw"]), fmt_size(S["size"]), fmt_time(S["loom_time_us"]),
                    LABEL.get(S["peer"]), fmt_time(S["peer_time_us"]), fmt_ratio(S["ratio_time"])))
            f = flat_check(rows)
            if f:
                summary["collectives"][coll][str(n)]["loom_vs_flat_ring"] = f
                flats.append("| %s | %s | %.2f (%s) | %.2f (%s) | %.2f (%s) | %d of %d |" % (
                    title, shape(n, net), f["largest"]["ratio_time"], fmt_size(f["largest"]["size"]),
                    f["best"]["ratio_time"], fmt_size(f["best"]["size"]),
                    f["worst"]["ratio_time"], fmt_size(f["worst"]["size"]), f["sizes_faster"], f["sizes_all"]))
            if net and per_host(net) > 1:
                sections += ["### %s, %d hosts x %d ranks (%d ranks; %s)"
                             % (title, n // per_host(net), per_host(net), n, tool), ""]
            else:
                sections += ["### %s, %d %s (%s)" % (title, n, word, tool), ""]
            sections += markdown_table(rows, libs_present) + [""]
    md += ["## Overview", ""] + heads + [""]
    if net:
        md += ["## Network goal", "",
               "Loom's busbw at least %.1fx the best peer's from %s up, and its time no worse than the "
               "best peer's below %s (ratios as above; worst size of each range)."
               % (GOAL_BW, fmt_size(GOAL_BW_FROM), fmt_size(GOAL_LAT_BELOW)), ""] + goals + [""]
    if len(flats) > 2:
        md += ["## Two levels against the flat ring", "",
               "Loom (the tuner's choice; with several hosts of several ranks it may pick the "
               "hierarchical all-reduce) over Loom flat ring (LOOM_ALGO=allreduce:ring, one ring over "
               "all ranks), time per call: below 1 the tuner's choice is faster. The flat ring is "
               "never a peer: the other tables compare Loom's tuner with the best peer.", ""] + flats + [""]
    md += ["## Per size", ""] + sections
    md += ["## How it was run", ""]
    for lib, how in (meta.get("launch") or {}).items():
        md.append("- %s: `%s`" % (lib, how))
    for note in meta.get("notes", []):
        md.append("- " + note)
    md.append("")
    with open(os.path.join(out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    with open(os.path.join(out, "summary.md"), "w") as fh:
        fh.write("\n".join(md))
    return summary


# ---- Loom against Loom (run --against REV) ----------------------------------------------------
# Raw names "rev" (the revision REV) and "work" (the working tree). Per size: each side's median
# time over the repeats, busbw from it, each side's spread ((max - min) / median of its repeats),
# the ratio work/REV of the medians and a verdict against the noise of the two: "slower" only
# when the ratio exceeds 1 + the larger spread (at least the floor) AND every repeat of the
# working tree was slower than every repeat of REV (their ranges apart, by the floor too). The
# second condition keeps one slow repeat from making a verdict: with two repeats the median is
# their mean, and a single outlier moves it further than the spread it makes. ("faster" alike.)
SIDES = ("rev", "work")


def side_cell(reps, size, idx, coll, n):
    """One side at one size: the times of its repeats, their median, busbw, spread."""
    cells = [r["rows"][size][idx] for r in reps.values() if size in r["rows"]]
    cells = [c for c in cells if c and c["time_us"] > 0]
    if not cells:
        return None
    times = [c["time_us"] for c in cells]
    med = median_cell(cells, size, coll, n)
    spread = (max(times) - min(times)) / med["time_us"] * 100 if len(times) > 1 and med["time_us"] > 0 else None
    return {"time_us": med["time_us"], "busbw": med["busbw"], "times_us": times,
            "min_us": min(times), "max_us": max(times),
            "spread_pct": round(spread, 2) if spread is not None else None,
            "wrong": any((c["wrong"] or 0) > 0 for c in cells)}


def against_rows(runs, coll, n, placement, floor):
    idx = 2 if placement == "out" else 3
    sides = {s: runs.get((s, coll, n), {}) for s in SIDES}
    sizes = sorted({size for reps in sides.values() for r in reps.values() for size in r["rows"]})
    rows = []
    for size in sizes:
        if size == 0:
            continue
        c = {s: side_cell(sides[s], size, idx, coll, n) for s in SIDES}
        row = {"size": size, "rev": c["rev"], "work": c["work"], "ratio_time": None,
               "noise_pct": None, "verdict": "-"}
        rev, work = c["rev"], c["work"]
        if rev and work:
            row["ratio_time"] = round(work["time_us"] / rev["time_us"], 4)
            spreads = [rev["spread_pct"], work["spread_pct"]]
            if None not in spreads:
                row["noise_pct"] = round(max(spreads + [floor]), 2)
            elif floor > 0:
                row["noise_pct"] = floor
            if row["noise_pct"] is None or len(rev["times_us"]) < 2 or len(work["times_us"]) < 2:
                row["verdict"] = "?"
            elif (row["ratio_time"] > 1 + row["noise_pct"] / 100
                  and work["min_us"] > rev["max_us"] * (1 + floor / 100)):
                row["verdict"] = "slower"
            elif (row["ratio_time"] < 1 / (1 + row["noise_pct"] / 100)
                  and work["max_us"] * (1 + floor / 100) < rev["min_us"]):
                row["verdict"] = "faster"
            else:
                row["verdict"] = "same"
        rows.append(row)
    return rows


def against_overview(rows):
    rs = [r for r in rows if r["ratio_time"] is not None]
    if not rs:
        return None
    worst = max(rs, key=lambda r: r["ratio_time"])
    best = min(rs, key=lambda r: r["ratio_time"])
    geo = 1.0
    for r in rs:
        geo *= r["ratio_time"]
    return {"sizes": len(rs), "geomean_ratio": round(geo ** (1.0 / len(rs)), 4),
            "worst": {"size": worst["size"], "ratio_time": worst["ratio_time"], "noise_pct": worst["noise_pct"],
                      "verdict": worst["verdict"]},
            "best": {"size": best["size"], "ratio_time": best["ratio_time"], "noise_pct": best["noise_pct"],
                     "verdict": best["verdict"]},
            "slower": [r["size"] for r in rs if r["verdict"] == "slower"],
            "faster": [r["size"] for r in rs if r["verdict"] == "faster"],
            "no_verdict": sum(r["verdict"] == "?" for r in rs),
            "wrong": [r["size"] for r in rs if r["rev"]["wrong"] or r["work"]["wrong"]]}


def fmt_pct(p):
    return "-" if p is None else "%.1f%%" % p


def md_cell(text):
    return str(text).replace("|", "\\|")


def short_subject(s, width=72):
    return s if len(s) <= width else s[:width - 3].rstrip() + "..."


def write_against_summary(out, runs, meta, placement):
    ag = meta["against"]
    rev, work = ag["rev"], ag["work"]
    floor = float(ag.get("noise_floor_pct") or 0)
    rname, wname = "REV %s" % rev["short"], "work %s" % work["short"]
    if work.get("uncommitted"):
        wname += "+"
    summary = {"machine": meta.get("machine"), "date": meta.get("date"), "command": meta.get("command"),
               "against": ag, "launch": meta.get("launch"), "repeats": meta.get("repeats"),
               "placement": placement, "memcpy": meta.get("memcpy"), "collectives": {}}
    m = meta.get("machine", {})
    dirty = work.get("uncommitted") or []
    md = ["# Loom: the working tree (%s%s) against %s" % (work["short"], " + uncommitted changes" if dirty else "",
                                                        rev["short"]), ""]
    md.append("Machine: %s, nproc %s (%s), %s GiB. Date: %s. Mode: %s, %s repeat(s), median per size, "
              "%s to %s." % (m.get("hostname"), m.get("nproc") or m.get("cpus"), m.get("cpu_model"),
                             m.get("mem_gib"), meta.get("date"), meta.get("mode"), meta.get("repeats"),
                             fmt_size(ag["sizes"][0]), fmt_size(ag["sizes"][1])))
    md += machine_state_lines(out, meta)
    md += ["", "| side | revision | subject | build | libloom its perf tools load |", "|---|---|---|---|---|"]
    for s, name in ((rev, "REV"), (work, "working tree")):
        what = "`%s` (%s)" % (s["short"], s["sha"])
        if s is rev and s.get("given") not in (s["short"], s["sha"]):
            what += ", given as `%s`" % s["given"]
        if s is work:
            what += ", branch %s%s" % (s.get("branch"), ", %d uncommitted file(s)" % len(dirty) if dirty else ", clean")
        libs = sorted(set((s.get("libloom") or {}).values())) or ["?"]
        md.append("| %s | %s | %s | %s | %s |" % (name, what, md_cell(short_subject(s["subject"])), s["build"],
                                                  ", ".join(libs)))
    if rev["sha"] == work["sha"] and not dirty:
        md += ["", "Both sides are the same code: this run measures the noise (an A/A comparison)."]
    md += ["", "Command: `%s`" % meta.get("command"), ""]
    md += ["Time: the median over the repeats of each run's time per call (mean of -n calls, or more "
           "under --min_ms, max across ranks), %s, float32, sum where the collective reduces; busbw from that time as nccl-tests. "
           "work/REV: the working tree's median time over REV's (below 1 the working tree is faster). "
           "Spread: (max - min) / median of one side's repeats. Noise: the larger spread of the two%s. "
           "Verdict: \"slower\" when work/REV > 1 + noise and every working-tree repeat was slower than "
           "every REV repeat%s; \"faster\" when work/REV < 1 / (1 + noise) and every working-tree repeat "
           "was faster; else \"same\"; \"?\" without a noise estimate (one repeat). With 2 repeats a "
           "single outlier on one side can still make a verdict. \"(wrong)\": some checked element was "
           "wrong in a repeat."
           % ("out-of-place" if placement == "out" else "in-place",
              ", at least %g%%" % floor if floor > 0 else "", " (by %g%% or more)" % floor if floor > 0 else ""),
           ""]
    heads = ["| collective | ranks | sizes | work/REV time, geomean | worst work/REV (size, noise) "
             "| slower beyond noise | faster beyond noise |", "|---|---:|---:|---:|---|---|---|"]
    sections = []
    nranks_all = sorted({n for (s, _, n) in runs if s in SIDES})
    for coll, tool, title in COLLS:
        for n in nranks_all:
            rows = against_rows(runs, coll, n, placement, floor)
            if not rows:
                continue
            ov = against_overview(rows)
            summary["collectives"].setdefault(coll, {})[str(n)] = {"rows": rows, "overview": ov}
            if ov:
                w = ov["worst"]

                def listed(sizes):
                    if not sizes:
                        return "0"
                    names = ", ".join(fmt_size(x) for x in sizes[:4]) + (", ..." if len(sizes) > 4 else "")
                    return "%d (%s)" % (len(sizes), names)
                heads.append("| %s | %d | %d%s | %.3f | %.3f (%s, %s) | %s | %s |" % (
                    title, n, ov["sizes"], ", %d without verdict" % ov["no_verdict"] if ov["no_verdict"] else "",
                    ov["geomean_ratio"], w["ratio_time"], fmt_size(w["size"]), fmt_pct(w["noise_pct"]),
                    listed(ov["slower"]), listed(ov["faster"])))
            sections += ["### %s, %d ranks (%s)" % (title, n, tool), "",
                         "| size | %s us | %s us | %s GB/s | %s GB/s | work/REV time | REV spread "
                         "| work spread | verdict |" % (rname, wname, rname, wname),
                         "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
            for r in rows:
                rv, wk = r["rev"], r["work"]

                def t(c):
                    return fmt_time(c and c["time_us"]) + (" (wrong)" if c and c["wrong"] else "")
                sections.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    fmt_size(r["size"]), t(rv), t(wk), fmt_bw(rv and rv["busbw"]), fmt_bw(wk and wk["busbw"]),
                    "-" if r["ratio_time"] is None else "%.3f" % r["ratio_time"],
                    fmt_pct(rv and rv["spread_pct"]), fmt_pct(wk and wk["spread_pct"]), r["verdict"]))
            sections.append("")
    md += ["## Overview", ""] + heads + ["", "## Per size", ""] + sections
    md += ["## How it was run", ""]
    md.append("- order: %s" % ag.get("order"))
    for s, name in ((rev, "REV"), (work, "working tree")):
        md.append("- %s: built with `%s`; runs `%s`" % (name, s["cmake"], s["launch"]))
    # The exact commands of the first configuration (every launch's: raw/*.cmd).
    first = next(((c, n) for c, _, _ in COLLS for n in nranks_all
                  if all((sd, c, n) in runs for sd in SIDES)), None)
    if first:
        c, n = first
        md.append("- exact commands, %s at %d ranks, first repeat (every launch's in raw/*.cmd):"
                  % (TITLE_OF[c], n))
        for sd in SIDES:
            reps = runs[(sd, c, n)]
            for cmd in reps[min(reps)]["cmds"]:
                md.append("  - `%s`" % cmd)
    for note in meta.get("notes", []):
        md.append("- " + note)
    md.append("")
    with open(os.path.join(out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    with open(os.path.join(out, "summary.md"), "w") as fh:
        fh.write("\n".join(md))
    return summary


def label_of(lib):
    if lib in LABEL:
        return LABEL[lib]
    base, _, algo = lib.partition("-")
    return LABEL.get(base, base) + (" " + algo if algo and algo != "default" else "")


def write_plots(out, docs, files, plot_cmd, placement, word="ranks"):
    pdir = os.path.join(out, "plots")
    os.makedirs(pdir, exist_ok=True)
    made, how = [], None
    for coll, tool, title in COLLS:
        for n in sorted({n for (_, _, n) in docs}):
            keys = [k for k in docs if k[1] == coll and k[2] == n]
            if not keys:
                continue
            png = os.path.join(pdir, "%s_n%d.png" % (tool, n))
            where = "out-of-place" if placement == "out" else "in-place"
            order = ["loom"] + PEERS
            keys.sort(key=lambda k: (order.index(k[0].split("-")[0]) if k[0].split("-")[0] in order
                                     else len(order), k[0]))
            argv = [plot_cmd, "-o", png, "-t", "%s, %d %s, %s, median of %s run(s), %s"
                    % (title, n, word, where, docs[keys[0]].get("repeats"),
                       docs[keys[0]]["machine"].get("hostname", ""))]
            if placement == "in":
                argv.append("--in-place")
            for k in keys:
                argv += ["-l", label_of(k[0]), files[k]]
            res = subprocess.run(argv, capture_output=True, text=True)
            if res.returncode == 0 and os.path.exists(png):
                made.append(png)
                how = plot_cmd
            else:
                sys.stderr.write("summarize: %s failed (%s); no plot %s\n"
                                 % (plot_cmd, (res.stderr or "").strip()[:200], png))
    return made, how


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--placement", choices=["out", "in"], default="out")
    ap.add_argument("--noise-floor", type=float, default=None,
                    help="run --against: the least noise a verdict assumes, percent (default: the run's)")
    ap.add_argument("--plot-cmd", help="the plotting tool (default: perf/plot beside this script)",
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plot"))
    a = ap.parse_args()
    meta = {}
    if os.path.exists(os.path.join(a.out, "meta.json")):
        with open(os.path.join(a.out, "meta.json")) as fh:
            meta = json.load(fh)
    runs = load_runs(os.path.join(a.out, "raw"))
    if not runs:
        sys.exit("summarize: no raw tables under %s/raw" % a.out)
    against = meta.get("against")
    if against and a.noise_floor is not None:
        against["noise_floor_pct"] = a.noise_floor
    if against:
        LABEL["rev"] = "REV %s" % against["rev"]["short"]
        LABEL["work"] = "working tree %s%s" % (against["work"]["short"], "+" if against["work"].get("uncommitted") else "")
    docs, files = {}, {}
    for (lib, coll, n), reps in sorted(runs.items()):
        if not any(r["rows"] for r in reps.values()):
            sys.stderr.write("summarize: %s %s n=%d produced no rows; see raw/\n" % (lib, coll, n))
            continue
        doc = library_json(lib, coll, n, reps, meta)
        if against and lib in SIDES:
            doc["library"] = "loom"
            doc["side"] = "REV" if lib == "rev" else "working tree"
            doc["revision"] = against[lib]["sha"]
        path = os.path.join(a.out, "%s_%s_n%d.json" % (lib, TOOL_OF[coll], n))
        with open(path, "w") as fh:
            json.dump(doc, fh, indent=1)
        docs[(lib, coll, n)] = doc
        files[(lib, coll, n)] = path
    if against:
        write_against_summary(a.out, runs, meta, a.placement)
    else:
        write_summary(a.out, docs, meta, a.placement)
    net = meta.get("network")
    made, how = write_plots(a.out, docs, files, a.plot_cmd, a.placement,
                            ("hosts (network namespaces)" if per_host(net) == 1 else
                             "ranks, %d per host (network namespaces)" % per_host(net)) if net else "ranks")
    print("summarize: %d JSON files, summary.md, summary.json, %d plots%s in %s"
          % (len(docs), len(made), " (%s)" % how if how else "", a.out))


if __name__ == "__main__":
    main()
