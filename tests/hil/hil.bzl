"""hil_test: a test in the QEMU guest (qemu_run.sh boots it with a guest script and binaries)."""

def hil_test(name, guest_script, binaries, host_tools = [], host_files = [], hotplug = "", env = {}):
    """Boots the guest with guest_script as /hil/run.sh and binaries (labels) on its PATH.

    guest/hil_lib.sh is packed too: the helpers guest scripts source (`. /hil/bin/hil_lib.sh`).

    host_tools: names of host programs packed too (found on PATH, e.g. nvme-cli's "nvme").
    host_files: absolute paths of host files packed at the same path in the guest (e.g.
      libibverbs' rxe provider and its /etc/libibverbs.d entry).
    hotplug: one namespace on a -blockdev and qmp_hotplug.py on the host side, asked by
      console markers ("console") or on the guest's /dev/ttyS1 ("agent").
    """
    binaries = binaries + ["guest/hil_lib.sh"]  # the guest scripts' shared helpers
    args = ["--hotplug=%s:$(location qmp_hotplug.py)" % hotplug] if hotplug else []
    args += ["$(location //tools/guest:pack.sh)", "$(location %s)" % guest_script]
    args += ["$(location %s)" % b for b in binaries] + host_tools + ["=" + f for f in host_files]
    # build.sh, init and modules.txt beside pack.sh: qemu_run.sh picks the guest they key.
    data = [guest_script, "//tools/guest:pack.sh", "//tools/guest:build.sh",
            "//tools/guest:init", "//tools/guest:modules.txt"] + binaries
    if hotplug:
        data.append("qmp_hotplug.py")
    native.sh_test(
        name = name,
        size = "large",
        srcs = ["qemu_run.sh"],
        args = args,
        data = data,
        env = env,
        # Not exclusive: QEMU runs its vCPUs on one host thread (qemu_run.sh: thread=single), the
        # one CPU Bazel counts a test as, so a guest runs beside other tests and compiles (run
        # alone, one of CI's two cores idled through every guest). The realtime test, which a
        # busy machine would fail, is exclusive itself.
        # External: the guest (tools/setup.sh's cache) and QEMU are inputs Bazel does not see.
        tags = ["external"],
    )
