#!/usr/bin/env python3
"""Writes the seed corpus of vfio_user_nvme_fuzz (records as its header describes): honest
admin commands and messages a driver sends, and a few a hostile one would."""
import os
import struct
import sys

IOVA = 1 << 20
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "vfio_user_nvme")
os.makedirs(out, exist_ok=True)


def sqe(opcode, cid, nsid=0, prp1=0, prp2=0, cdw10=0, cdw11=0, cdw12=0, flags=0):
    return bytes([3]) + struct.pack("<BBHIQQQQIIIIII", opcode, flags, cid, nsid, 0, 0, prp1, prp2,
                                    cdw10, cdw11, cdw12, 0, 0, 0)


def poll(n=8):
    return bytes([5, n])


def message(command, payload, with_fd=False, msg_id=99):
    body = struct.pack("<HHIII", msg_id, command, 16 + len(payload), 0, 0) + payload
    return bytes([1 if with_fd else 0]) + struct.pack("<H", len(body)) + body


def poke(offset, data):
    return bytes([2]) + struct.pack("<I", offset)[:3] + bytes([len(data)]) + data


def doorbell(idx, value):
    return bytes([4, idx]) + struct.pack("<H", value)


data = IOVA + 0x10000
seeds = {
    "identify": sqe(0x06, 1, prp1=data, cdw10=1) + sqe(0x06, 2, nsid=1, prp1=data) + poll(),
    "io_queues": (sqe(0x05, 3, prp1=IOVA + 0x20000, cdw10=(15 << 16) | 1, cdw11=1)
                  + sqe(0x01, 4, prp1=IOVA + 0x21000, cdw10=(15 << 16) | 1, cdw11=(1 << 16) | 1)
                  + poll() + poke(0x21000, bytes(64)) + doorbell(2, 1) + poll()),
    "log_page": sqe(0x02, 5, nsid=0xffffffff, prp1=data, cdw10=(127 << 16) | 2) + poll(),
    "prp_outside": sqe(0x06, 6, prp1=0xdead0000, cdw10=1) + sqe(0x06, 7, prp1=IOVA + 0x3f000,
                                                               prp2=8, cdw10=1) + poll(),
    "sgl": sqe(0x06, 8, prp1=data, prp2=(4096 << 32), cdw10=1, flags=0x40) + poll(),
    "features": sqe(0x09, 9, cdw10=7, cdw11=(3 << 16) | 3) + sqe(0x0a, 10, cdw10=7) + poll(),
    "unmap_then_command": (message(3, struct.pack("<IIQQ", 24, 0, IOVA, 256 * 1024))
                           + sqe(0x06, 11, prp1=data, cdw10=1) + poll()),
    "device_info": message(4, struct.pack("<IIII", 16, 0, 0, 0)),
    "region_read": message(9, struct.pack("<QII", 0, 0, 8)),
    "remap_with_fd": message(2, struct.pack("<IIQQQ", 32, 3, 0, 1 << 30, 4096), with_fd=True),
    "doorbells_out_of_order": doorbell(9, 3) + doorbell(1, 500) + doorbell(0, 63) + poll(),
    "disable_reenable": (message(10, struct.pack("<QII", 0x14, 0, 4) + struct.pack("<I", 0))
                         + poll() + message(10, struct.pack("<QII", 0x14, 0, 4)
                                            + struct.pack("<I", 0x460001)) + poll()),
}
for name, blob in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(blob)
print(f"{len(seeds)} inputs in {out}", file=sys.stderr)
