#!/usr/bin/env python3
"""Counts test results after `bazel test`: every test case of every test target that ran this
time (from the targets' test.xml), plus targets that failed without a usable test.xml.
Arguments: one or more stages, each a log and its testlogs directory
(`ci_count.py LOG TESTLOGS [LOG TESTLOGS ...]`: the plain run, then the sanitizer stages).
Prints a line per stage and a closing line "N passed, N failed" over all of them; exits 1 if
anything failed or nothing ran."""
import pathlib
import re
import sys
import xml.etree.ElementTree as ET


def count(log, testlogs):
    """(passed, failed, targets) of one bazel test run."""
    # "//pkg:target   PASSED in 0.1s" / "(cached) PASSED" / "FAILED in" / "FAILED TO BUILD" / ...
    status = {}
    for m in re.finditer(r"^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|"
                         r"FAILED TO BUILD|INCOMPLETE|SKIPPED)\b", log, re.M):
        status[m.group(1)] = m.group(2)
    passed = failed = 0
    for target, st in sorted(status.items()):
        cases = None
        if testlogs is not None:
            base = testlogs / target[2:].replace(":", "/")
            # A sharded target has one test.xml per shard (shard_1_of_4/test.xml, ...).
            xmls = sorted(base.glob("shard_*_of_*/test.xml"))
            if not xmls and (base / "test.xml").exists():
                xmls = [base / "test.xml"]
            if xmls:
                try:
                    cases = [c for x in xmls for c in ET.parse(x).getroot().iter("testcase")]
                except ET.ParseError:
                    cases = None
        if st in ("PASSED", "FLAKY") and cases:
            bad = sum(1 for c in cases if c.find("failure") is not None or c.find("error") is not None)
            skipped = sum(1 for c in cases if c.find("skipped") is not None
                          or c.get("status") == "notrun")
            passed += len(cases) - bad - skipped
            failed += bad
        elif st in ("PASSED", "FLAKY"):
            passed += 1
        elif st == "NO STATUS":
            failed += 1
            print(f"ci: {target}: no status (not run)")
        else:
            failed += 1
            print(f"ci: {target}: {st}")
    return passed, failed, len(status)


args = sys.argv[1:]
if not args or len(args) % 2:
    args = args + [""]  # the older form: a log alone
total_passed = total_failed = 0
for i in range(0, len(args), 2):
    log_path, logs_dir = args[i], args[i + 1]
    text = pathlib.Path(log_path).read_text(errors="replace") if pathlib.Path(log_path).exists() else ""
    p, f, n = count(text, pathlib.Path(logs_dir) if logs_dir else None)
    if not text:
        f += 1
        print(f"ci: {log_path}: no log (the stage did not run)")
    print(f"ci: {log_path}: {n} test targets, {p} test cases passed, {f} failed")
    total_passed += p
    total_failed += f

print(f"{total_passed} passed, {total_failed} failed")
sys.exit(0 if total_failed == 0 and total_passed > 0 else 1)
