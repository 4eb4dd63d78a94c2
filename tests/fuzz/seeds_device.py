"""Seed inputs at the device boundary: pollux-emu's vfio-user server (vfio_user_nvme) and
the driver's queue pair against a device the input plays (nvme_qpair)."""
import struct


# ------------------------------------------------------------------ vfio_user_nvme ---
IOVA = 1 << 20


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


def vfio_user_nvme():
    data = IOVA + 0x10000
    return {
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


# ------------------------------------------------------------------ nvme_qpair ---
def q_submit(n=7, lba=0, write=False):
    return bytes([8 if write else 0, n]) + struct.pack("<H", lba)


def q_post(cid, status=0, sqhd=0, sqid=1, dw0=0, wrong_phase=False):
    return bytes([9 if wrong_phase else 1]) + struct.pack("<HHHHI", cid, status, sqhd, sqid, dw0)


def q_take(status=0):
    return bytes([2]) + struct.pack("<H", status)


def q_poll(n=0):
    return bytes([4, n])


def nvme_qpair():
    media_error = (0x81 << 1) | (2 << 9)
    four = b"".join(q_submit(7, i * 8, i % 2 == 1) for i in range(4))
    return {
        "honest": bytes([2]) + four + q_poll() + q_take() * 4 + q_poll(),
        "honest_unbatched": bytes([2 | 8]) + four + q_take() * 4 + q_poll(),
        "errors": bytes([2]) + four + q_poll() + q_take(media_error) + q_take(0x4000 | 2)
                  + q_take() * 2 + q_poll(),
        "duplicates": bytes([2]) + four + q_poll() + q_take() * 2 + bytes([3, 0, 3, 1])
                      + q_poll() + q_take() * 2 + bytes([3, 3]) + q_poll(),
        "unknown_ids": bytes([2]) + four + q_poll() + q_post(999) + q_post(0xffff)
                       + q_post(1, sqid=2) + q_post(2, sqhd=500) + q_post(3, wrong_phase=True)
                       + q_poll() + q_take() * 4 + q_poll(),
        "timeouts": bytes([2 | 4]) + four + q_poll() + bytes([5, 20]) * 3 + q_take()
                    + bytes([5, 25]) + q_poll(),
        "fail_all_then_stale": bytes([2]) + four + q_poll() + q_take() * 3 + bytes([6])
                               + q_poll() + four + q_poll() + q_take() * 4 + q_poll(),
        "unplugged_mid_flight": bytes([2]) + four + q_poll() + q_take() + q_poll() + bytes([7])
                                + q_poll(),
        "queue_full": bytes([0]) + b"".join(q_submit(0, i) for i in range(12)) + q_poll()
                      + q_take() * 3 + q_poll() + q_take() * 3 + q_poll() + q_take() * 3
                      + q_poll(),
        "batches": bytes([3]) + b"".join(q_submit(15, i * 16) for i in range(40)) + q_poll()
                   + q_take() * 40 + q_poll(16) + q_poll(),
    }
