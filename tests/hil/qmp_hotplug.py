"""The host side of the hot-plug HIL test: follows the guest's console and, when the guest
asks, pulls QEMU's NVMe controller out of its PCIe slot (QMP device_del) and plugs a new one
in (device_add, same slot, same backing store).
Usage: qmp_hotplug.py CONSOLE_LOG QMP_SOCKET DEVICE_ARGS_JSON BACKING_FILE
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


class Qmp:
    def __init__(self, path):
        for _ in range(300):
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(path)
                self.s = s
                break
            except OSError:
                s.close()
                time.sleep(0.1)
        else:
            sys.exit(f"qmp: cannot connect to {path}")
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


def main():
    log, sock, device, backing = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    q = Qmp(sock)
    if not wait_for(log, "hil: remove-now"):
        sys.exit("qmp: the guest never asked for the removal")
    t0 = time.monotonic()
    q.cmd("device_del", id=device["id"])
    print(f"qmp: device_del {device['id']}", flush=True)
    if not wait_for(log, "hil: insert-now"):
        sys.exit("qmp: the guest never asked for the re-insertion")
    # The slot must be empty before a device can go back in: QEMU finishes the unplug once
    # the guest has released the device.
    for _ in range(200):
        r = q.cmd("qom-list", path="/machine/peripheral")
        if not any(p["name"] == device["id"] for p in r.get("return", [])):
            print(f"qmp: unplug done after {time.monotonic() - t0:.2f} s", flush=True)
            break
        time.sleep(0.1)
    else:
        sys.exit("qmp: the device is still plugged in 20 s after device_del")
    # QEMU 7.2 may keep the old device's hold on the backing node after the unplug (I/O the
    # controller reset cancelled: "Permission conflict on node"), sometimes for good. The drive
    # that goes back into the slot is the same file: if the node stays held for 1 s, open the
    # file as a new node (the file driver has no cache of its own: both see the same data).
    for _ in range(10):
        r = q.cmd("device_add", **device)
        if "return" in r:
            break
        time.sleep(0.1)
    else:
        q.cmd("blockdev-add", driver="file", filename=backing, **{"node-name": "ns1-again"},
              locking="off")
        r = q.cmd("device_add", **dict(device, drive="ns1-again"))
        print("qmp: the old node stayed held: the file is back as node ns1-again", flush=True)
    print(f"qmp: device_add {device['id']}: {'ok' if 'return' in r else r}", flush=True)


if __name__ == "__main__":
    main()
