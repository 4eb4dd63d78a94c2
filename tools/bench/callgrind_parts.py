#!/usr/bin/env python3
"""Instructions per I/O by part, from a callgrind profile of pollux-bdevperf or of SPDK's
bdevperf on a null bdev (docs/BENCHMARKS.md, "Where the cycles went").

  valgrind --tool=callgrind --callgrind-out-file=OUT pollux-bdevperf --null N:1048576 -q 128 -t 2
  tools/bench/callgrind_parts.py OUT pollux IOS      # IOS: the run's I/O count ("ios" in its JSON)
  tools/bench/callgrind_parts.py OUT spdk           # counts bdevperf_complete calls itself

Each function's own instructions are split by the source file of the code (inlined
histogram, random generator and clock code count where they come from), assigned to a part
by the first rule that matches, and divided by the I/Os. Functions that match no rule
(set-up, tear-down, the dynamic loader) are left out. -v lists the functions of each part.
"""
import collections
import re
import sys

RULES = {
    "pollux": [
        ("latency histogram records", r".", r"histogram\.h$"),
        ("clock reads", r".", r"clock\.cc$|clock\.h$|ia32intrin\.h$"),
        ("tool: random offsets", r".", r"rng\.h$|random\.tcc$|random\.h$"),
        ("tool: task logic", r"anonymous namespace\)::(submit|on_done)\(", r"."),
        ("bdev layer: submission", r"Manager::(read|submit_rw|prepare|get_io|start|qos_admit|"
         r"dispatch|needs_split)\(|NullBackend::supports", r"."),
        ("null module", r"NullBackend::submit", r"."),
        ("bdev layer: completion", r"BdevIo::complete\(|Manager::(io_done|finish|"
         r"complete_to_user|put_io|channel_poll)\(", r"."),
        ("reactor, threads, pollers", r"event::(Reactor|Thread)::|anonymous namespace\)::watch\(",
         r"."),
    ],
    "spdk": [
        ("latency histogram records", r".", r"histogram_data\.h$"),
        ("clock reads", r"^spdk_get_ticks$", r"."),
        ("tool: task logic (xorshift inlined)", r"^bdevperf_(submit_single|submit_task|complete)$",
         r"."),
        ("bdev layer: submission", r"^(spdk_bdev_readv_blocks_with_md|bdev_readv_blocks_with_md|"
         r"bdev_channel_get_io|bdev_io_init|_bdev_io_submit_ext|bdev_io_submit|"
         r"bdev_io_should_split|bdev_io_do_submit|spdk_bdev_desc_get_bdev|_bdev_io_submit)$", r"."),
        ("null module", r"^(bdev_null_submit_request|null_io_poll)$", r"."),
        ("bdev layer: completion", r"^(spdk_bdev_io_complete|bdev_io_complete|spdk_bdev_free_io|"
         r"_bdev_io_complete)$", r"."),
        ("reactor, threads, pollers", r"^(thread_poll|spdk_thread_poll|reactor_run|_reactor_run|"
         r"thread_execute_poller|reactor_post_process_lw_thread|event_queue_run_batch|"
         r"msg_queue_run_batch|thread_update_stats|spdk_thread_get_last_tsc|"
         r"spdk_thread_get_from_ctx|thread_execute_timed_poller)$", r"."),
    ],
}


def parse(path):
    """Self cost per (function, source file) and call counts per function."""
    names, files = {}, {}
    selfc, calls = collections.Counter(), collections.Counter()
    fl = cur = fn = cfn = None
    pending = None

    def name(tok, table):
        m = re.match(r"\((\d+)\)(?: (.*))?", tok)
        if not m:
            return tok
        if m.group(2):
            table[m.group(1)] = m.group(2)
        return table[m.group(1)]

    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("fl="):
            fl = cur = name(line[3:], files)
        elif line.startswith(("fi=", "fe=")):
            cur = name(line[3:], files)
        elif line.startswith("fn="):
            fn, cur = name(line[3:], names), fl
        elif line.startswith("cfn="):
            cfn = name(line[4:], names)
        elif line.startswith(("cfl=", "cfi=")):
            name(line[4:], files)
        elif line.startswith("calls="):
            pending = int(line[6:].split()[0])
        elif line and (line[0].isdigit() or line[0] in "+-*"):
            fields = line.split()
            if len(fields) < 2:
                continue
            if pending is not None:  # the inclusive cost of a call: not this function's own
                calls[cfn] += pending
                pending = None
            else:
                selfc[(fn, cur)] += int(fields[1])
    return selfc, calls


def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    if len(args) < 2 or args[1] not in RULES or (args[1] == "pollux" and len(args) < 3):
        sys.exit(__doc__)
    path, tool = args[0], args[1]
    selfc, calls = parse(path)
    ios = int(args[2]) if len(args) > 2 else calls["bdevperf_complete"]
    parts = collections.OrderedDict((r[0], []) for r in RULES[tool])
    for (fn, fl), cost in selfc.items():
        for part, fre, flre in RULES[tool]:
            if re.search(fre, fn or "") and re.search(flre, fl or ""):
                parts[part].append((cost, fn, fl))
                break
    print(f"{path}: {ios} I/Os, instructions per I/O")
    total = 0
    for part, items in parts.items():
        c = sum(i[0] for i in items)
        total += c
        print(f"  {c / ios:7.1f}  {part}")
        if "-v" in sys.argv:
            for cost, fn, fl in sorted(items, reverse=True)[:8]:
                if cost / ios >= 0.2:
                    print(f"            {cost / ios:7.1f}  {fn[:70]} [{(fl or '').split('/')[-1]}]")
    print(f"  {total / ios:7.1f}  total")


if __name__ == "__main__":
    main()
