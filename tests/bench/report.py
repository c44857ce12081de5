#!/usr/bin/env python3
"""report.py REPORT DOC: rewrites DOC's benchmark table (the lines between
"<!-- bench:begin -->" and "<!-- bench:end -->") from REPORT, what
tests/bench/run.sh printed: its rows (the command, host and load first), a
blank line, then one line per figure, "NAME MEDIAN [MIN-MAX] target OP LIMIT
VERDICT" or "NAME MEDIAN [MIN-MAX]", the range absent where a figure is made of
medians. The table lists every figure with a target first, then the others,
then the rows verbatim. run.sh decides whether the run may be written."""
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


def split_figure(f):
    """name, median, range ("" when none), and the target's tokens"""
    name, value, rest = f[0], f[1], f[2:]
    rng = ""
    if rest and rest[0].startswith("["):
        rng, rest = rest[0], rest[1:]
    return name, value, rng, rest


def table(rows, figs):
    out = ["| figure | target | median | range of the reps | |", "| --- | --- | --- | --- | --- |"]
    others = []
    for f in figs:
        name, value, rng, rest = split_figure(f)
        if len(rest) >= 4 and rest[0] == "target":
            out.append("| `%s` | %s %s | %s | %s | %s |" % (name, rest[1], rest[2], value, rng,
                                                         " ".join(rest[3:])))
        else:
            others.append((name, value, rng))
    if others:
        out += ["", "| other figure | median | range of the reps |", "| --- | --- | --- |"]
        out += ["| `%s` | %s | %s |" % o for o in others]
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
