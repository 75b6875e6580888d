#!/usr/bin/env python3
"""Prints why each skipped test skipped: CTest's summary names them, and each
one's last line of output (its "skip: ..." line) says why.

usage: skip-reasons.py CTEST_OUTPUT BUILD_DIR
"""
import re
import sys


def skipped_names(ctest_output):
    names = []
    with open(ctest_output, errors="replace") as f:
        for line in f:
            m = re.match(r"^\s+\d+ - (.*) \(Skipped\)\s*$", line)
            if m:
                names.append(m.group(1))
    return names


def last_lines(log):
    """Each test's name -> the last non-empty line of its output."""
    last = {}
    name, output = None, None
    with open(log, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^\d+/\d+ Test: (.*)$", line)
            if m:
                name, output = m.group(1), None
            elif line == "Output:" and name is not None:
                output = []
            elif line == "<end of output>" and output is not None:
                body = [l for l in output if l.strip() and not l.startswith("-----")]
                last[name] = body[-1] if body else "(no output)"
                name, output = None, None
            elif output is not None:
                output.append(line)
    return last


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: skip-reasons.py CTEST_OUTPUT BUILD_DIR")
    names = skipped_names(sys.argv[1])
    if not names:
        return
    try:
        last = last_lines(f"{sys.argv[2]}/Testing/Temporary/LastTest.log")
    except OSError as e:
        sys.exit(f"skip-reasons.py: cannot read CTest's log: {e}")
    print("Why the skipped tests skipped:")
    for n in names:
        print(f"  {n}: {last.get(n, '(not in the log)')}")


if __name__ == "__main__":
    main()
