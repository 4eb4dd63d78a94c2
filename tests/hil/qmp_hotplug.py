"""The host side of the hot-plug HIL tests: pulls QEMU's NVMe controller out of its PCIe slot
(QMP device_del) and plugs a new one in (device_add, same slot, same backing store) when the
guest asks. Two ways of asking:
  console: the guest prints "hil: remove-now", later "hil: insert-now" (one cycle; shell tests)
  agent:   the guest writes "remove ID" / "insert ID" lines on a serial port (QEMU's chardev
           socket AGENT_SOCKET) and reads "ok remove ID" or "error remove ID: why" back, any
           number of times (the scenario runner's qemu devices: scenarios/runner/pcie_target.cc)
Usage: qmp_hotplug.py console CONSOLE_LOG QMP_SOCKET DEVICE_ARGS_JSON BACKING_FILE
       qmp_hotplug.py agent AGENT_SOCKET QMP_SOCKET DEVICE_ARGS_JSON BACKING_FILE
"""
import json
import socket
import sys
import time


def wait_for(log, marker, deadline_s=300):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with open(log, "rb") as f:
                if marker.encode() in f.read():
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def connect_unix(path, what):
    for _ in range(300):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            return s
        except OSError:
            s.close()
            time.sleep(0.1)
    sys.exit(f"{what}: cannot connect to {path}")


class Qmp:
    def __init__(self, path):
        self.s = connect_unix(path, "qmp")
        self.f = self.s.makefile("rwb")
        self.read()  # greeting
        self.cmd("qmp_capabilities")

    def read(self):
        return json.loads(self.f.readline())

    def cmd(self, name, **args):
        self.f.write(json.dumps({"execute": name, "arguments": args}).encode() + b"\n")
        self.f.flush()
        while True:
            r = self.read()
            if "return" in r or "error" in r:
                if "error" in r:
                    print(f"qmp: {name}: {r['error']}", flush=True)
                return r
            print(f"qmp event: {r.get('event')} {r.get('data', {})}", flush=True)


class Slot:
    """One hot-pluggable controller: its device_add arguments and backing file."""

    def __init__(self, qmp, device, backing):
        self.q, self.device, self.backing = qmp, device, backing
        self.removed_at = None
        self.nodes = 0  # backing nodes opened again (see insert)

    def remove(self):
        self.removed_at = time.monotonic()
        r = self.q.cmd("device_del", id=self.device["id"])
        print(f"qmp: device_del {self.device['id']}", flush=True)
        return r.get("error", {}).get("desc")

    def insert(self):
        """device_add once the slot is empty; None or why it failed."""
        # QEMU finishes the unplug once the guest has released the device.
        for _ in range(200):
            r = self.q.cmd("qom-list", path="/machine/peripheral")
            if not any(p["name"] == self.device["id"] for p in r.get("return", [])):
                since = time.monotonic() - (self.removed_at or time.monotonic())
                print(f"qmp: unplug done after {since:.2f} s", flush=True)
                break
            time.sleep(0.1)
        else:
            return "the device is still plugged in 20 s after device_del"
        # QEMU 7.2 may keep the old device's hold on the backing node after the unplug (I/O
        # the controller reset cancelled: "Permission conflict on node"), sometimes for good.
        # The drive that goes back into the slot is the same file: if the node stays held for
        # 1 s, open the file as a new node (the file driver has no cache of its own: both see
        # the same data).
        for _ in range(10):
            r = self.q.cmd("device_add", **self.device)
            if "return" in r:
                break
            time.sleep(0.1)
        else:
            self.nodes += 1
            node = f"{self.device['drive']}-again{self.nodes}"
            self.q.cmd("blockdev-add", driver="file", filename=self.backing,
                       **{"node-name": node}, locking="off")
            r = self.q.cmd("device_add", **dict(self.device, drive=node))
            print(f"qmp: the old node stayed held: the file is back as node {node}", flush=True)
        print(f"qmp: device_add {self.device['id']}: {'ok' if 'return' in r else r}", flush=True)
        return None if "return" in r else r["error"].get("desc", "device_add failed")


def console(slot, log):
    if not wait_for(log, "hil: remove-now"):
        sys.exit("qmp: the guest never asked for the removal")
    slot.remove()
    if not wait_for(log, "hil: insert-now"):
        sys.exit("qmp: the guest never asked for the re-insertion")
    if why := slot.insert():
        sys.exit(f"qmp: {why}")


def agent(slot, path):
    s = connect_unix(path, "agent")
    f = s.makefile("rwb")
    for raw in f:
        line = raw.decode(errors="replace").strip()
        if not line:
            continue
        print(f"agent: the guest asks: {line}", flush=True)
        verb, _, dev = line.partition(" ")
        if dev != slot.device["id"] or verb not in ("remove", "insert"):
            why = f"unknown request (this agent serves remove/insert {slot.device['id']})"
        else:
            why = slot.remove() if verb == "remove" else slot.insert()
        reply = f"ok {line}" if why is None else f"error {line}: {why}"
        f.write(reply.encode() + b"\n")
        f.flush()
        print(f"agent: {reply}", flush=True)


def main():
    mode, where, sock, device, backing = sys.argv[1:6]
    slot = Slot(Qmp(sock), json.loads(device), backing)
    if mode == "console":
        console(slot, where)
    elif mode == "agent":
        agent(slot, where)
    else:
        sys.exit(f"qmp_hotplug.py: unknown mode {mode} (console or agent)")


if __name__ == "__main__":
    main()
