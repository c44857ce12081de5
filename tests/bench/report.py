#!/usr/bin/env python3
"""report.py REPORT DOC: rewrites DOC's benchmark table (the lines between
"<!-- bench:begin -->" and "<!-- bench:end -->") from REPORT, what
tests/bench/run.sh printed: its rows, a blank line, then one line per figure,
"NAME VALUE target OP LIMIT met|not met" or "NAME VALUE". The table lists
every figure with a target first, then the others, then the rows verbatim."""
import sys

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def parse(path):
    rows, figs, in_figs = [], [], False
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line and not in_figs:
                in_figs = True
                continue
            if in_figs and line:
                figs.append(line.split())
            elif not in_figs:
                rows.append(line)
    return rows, figs


def table(rows, figs):
    out = ["| figure | target | measured | |", "| --- | --- | --- | --- |"]
    for f in figs:
        if len(f) >= 6 and f[2] == "target":
            out.append("| `%s` | %s %s | %s | %s |" % (f[0], f[3], f[4], f[1], " ".join(f[5:])))
    others = [f for f in figs if not (len(f) >= 6 and f[2] == "target")]
    if others:
        out += ["", "| other figure | measured |", "| --- | --- |"]
        out += ["| `%s` | %s |" % (f[0], f[1]) for f in others]
    out += ["", "```"] + rows + ["```"]
    return out


def main():
    rows, figs = parse(sys.argv[1])
    with open(sys.argv[2]) as f:
        doc = f.read().split("\n")
    if BEGIN not in doc or END not in doc:
        sys.exit("report.py: %s has no %s ... %s lines" % (sys.argv[2], BEGIN, END))
    a, b = doc.index(BEGIN), doc.index(END)
    doc = doc[:a + 1] + table(rows, figs) + doc[b:]
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(doc))


if __name__ == "__main__":
    main()
