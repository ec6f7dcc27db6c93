import sys, re, glob, statistics as st, collections
# Summarizes fero-bench reports named NAME-N.txt in a directory: python3 summary.py DIR before after
d = sys.argv[1]
vals = collections.defaultdict(lambda: collections.defaultdict(list))
other = 0.0
for f in sorted(glob.glob(d + "/*.txt")):
    name = f.split("/")[-1].rsplit("-", 1)[0]
    sysname = None
    for line in open(f):
        m = re.match(r"^(fero-remote|fero|echo|redis) · ", line)
        if m: sysname = m.group(1)
        m = re.search(r"\* (yacks|sacks):.*\|\s+([\d,]+) records/s", line)
        if m: vals[(sysname, m.group(1))][name].append(float(m.group(2).replace(",", "")))
        m = re.match(r"\s+latency\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)", line)
        if m:
            vals[(sysname, "rt p50")][name].append(float(m.group(1)))
            vals[(sysname, "rt p99.9")][name].append(float(m.group(2)))
        m = re.search(r"other processes' share ([\d.]+) CPU-s", line)
        if m: other = max(other, float(m.group(1)))
names = sys.argv[2:]
for key in sorted(vals):
    row = f"{key[0]:12s} {key[1]:9s}"
    meds = {}
    for nm in names:
        v = vals[key][nm]
        if not v: continue
        meds[nm] = st.median(v)
        row += f"  {nm} {st.median(v):10.1f} [{min(v):.1f} .. {max(v):.1f}] (n={len(v)})"
    if len(names) >= 2 and names[0] in meds and names[1] in meds:
        row += f"  {names[1]}/{names[0]} {meds[names[1]]/meds[names[0]]:.3f}"
    print(row)
print("others max CPU-s", other)
