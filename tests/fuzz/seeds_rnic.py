"""Seed inputs of the emulated RNIC at its device boundary (rnic): mailbox commands, WQEs and
doorbells of an honest and a hostile host, packets of a peer."""
import struct


# -------------------------------------------------------------------------- rnic ---
# Host memory layout of the seeds (offsets from IOVA 1 MiB): mailbox 0, EQ 0x1000, CQ 0x2000,
# SQ 0x3000, RQ 0x4000, SRQ 0x5000, a data memory region 0x8000-0x10000 at VA 0x10000000.
RNIC_IOVA = 1 << 20
EQ, CQ, SQ, RQ, SRQ, DATA = 0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x8000
DATA_VA, DATA_LEN = 0x10000000, 0x8000
MR_KEY = 0x101  # the first MR: slot 1, tag 1
QPN, PEER_QPN = 2, 7


def rnic_cmd(opcode, body=b""):
    return bytes([0, opcode]) + body + bytes(56 - len(body))


def poke(offset, data):
    out = b""
    for i in range(0, len(data), 255):
        chunk = data[i:i + 255]
        out += bytes([1]) + struct.pack("<HB", offset + i, len(chunk)) + chunk
    return out


def rnic_doorbell(offset, value):
    return bytes([2]) + struct.pack("<HI", offset, value)


def packet(body, src=2, raw_bytes=False):
    return bytes([3 | (8 if raw_bytes else 0), src]) + struct.pack("<H", len(body)) + body


def rnic_run(n=8):
    return bytes([4, n])


def rnic_wait(exp):
    return bytes([5, exp])


def cq_consume(cqn, n):
    return bytes([7, cqn]) + struct.pack("<H", n)


def qp_attrs(mask, **kw):
    f = dict(dest_address=0, dest_qpn=0, rq_psn=0, sq_psn=0, access=0, state=0, cur_state=0,
             mtu=0, timeout=0, retry=0, rnr_retry=0, min_rnr=0, max_rd=0, max_dest_rd=0)
    f.update(kw)
    return struct.pack("<IIQIIIIBBBBBBBBB3x", QPN, mask, f["dest_address"], f["dest_qpn"],
                       f["rq_psn"], f["sq_psn"], f["access"], f["state"], f["cur_state"],
                       f["mtu"], f["timeout"], f["retry"], f["rnr_retry"], f["min_rnr"],
                       f["max_rd"], f["max_dest_rd"])


def bth(opcode, psn, qpn=QPN, ack_req=False, pad=0, se=False):
    return (bytes([opcode, (0x80 if se else 0) | (pad << 4), 0xff, 0xff, 0])
            + qpn.to_bytes(3, "big") + bytes([0x80 if ack_req else 0]) + psn.to_bytes(3, "big"))


def reth(va, rkey, length):
    return va.to_bytes(8, "big") + rkey.to_bytes(4, "big") + length.to_bytes(4, "big")


def aeth(syndrome, msn):
    return bytes([syndrome]) + msn.to_bytes(3, "big")


def send_wqe(opcode, wr_id, sges, flags=1, remote_addr=0, rkey=0, imm=0):
    w = struct.pack("<BBBBIQQII", opcode, flags, len(sges), 0, imm, wr_id, remote_addr, rkey, 0)
    for addr, length, key in sges:
        w += struct.pack("<QII", addr, length, key)
    return w + bytes(128 - len(w))


def recv_wqe(wr_id, sges):
    w = struct.pack("<QB7x", wr_id, len(sges))
    for addr, length, key in sges:
        w += struct.pack("<QII", addr, length, key)
    return w + bytes(128 - len(w))


def rnic_up(srq=False, mtu=3):
    """PD, EQ, CQ, a data MR (all access), a QP brought to RTS (peer port 2, QP 7)."""
    a = RNIC_IOVA
    setup = (rnic_cmd(0x10)
             + rnic_cmd(0x02, struct.pack("<QI", a + EQ, 4))
             + rnic_cmd(0x20, struct.pack("<QI", a + CQ, 4))
             + rnic_cmd(0x12, struct.pack("<IIQQQ", 0, 0xf, DATA_VA, DATA_LEN, a + DATA)))
    if srq:
        setup += rnic_cmd(0x28, struct.pack("<QII", a + SRQ, 3, 0))
    setup += rnic_cmd(0x30, struct.pack("<QQIIIIBB2x", a + SQ, a + RQ, 0, 0, 0,
                                        0 if srq else 0xffffffff, 3, 3))
    setup += rnic_cmd(0x31, qp_attrs(0x39, state=1, access=0xf))
    setup += rnic_cmd(0x31, qp_attrs(0x129181, state=2, dest_address=2, dest_qpn=PEER_QPN,
                                     rq_psn=0, mtu=mtu, max_dest_rd=4, min_rnr=12))
    setup += rnic_cmd(0x31, qp_attrs(0x12e01, state=3, sq_psn=100, timeout=14, retry=7,
                                     rnr_retry=7, max_rd=4))
    return setup


def push(count, wqe):
    """The WQE for SQ count `count` into QPN's push slot, as the provider writes it: its count
    zeroed first, the rest, the count last (dword stores into the push window)."""
    base = (QPN * 256 + (count & 1) * 128) // 4
    words = struct.unpack("<32I", wqe[:28] + bytes(4) + wqe[32:])
    out = bytes([2 | 8]) + struct.pack("<HI", base + 7, 0)
    for i, w in enumerate(words):
        if i != 7:
            out += bytes([2 | 8]) + struct.pack("<HI", base + i, w)
    return out + bytes([2 | 8]) + struct.pack("<HI", base + 7, count)


def sq_doorbell(count):
    return rnic_doorbell(0x0 + QPN * 8, count)


def rq_doorbell(count):
    return rnic_doorbell(QPN * 8 + 4, count)


def rnic():
    d = DATA_VA
    pattern = bytes(range(256)) * 16
    recvs = (poke(RQ, recv_wqe(1, [(d, 2048, MR_KEY)])) + poke(RQ + 128, recv_wqe(2, [
        (d + 2048, 100, MR_KEY), (d + 4096, 4000, MR_KEY)])) + rq_doorbell(2))
    sends = (poke(DATA, pattern)
             + poke(SQ, send_wqe(2, 11, [(d, 3000, MR_KEY)]))                 # SEND 3000 B
             + poke(SQ + 128, send_wqe(0, 12, [(d, 512, MR_KEY)], remote_addr=0x5000,
                                       rkey=0x999))                           # RDMA WRITE
             + poke(SQ + 256, send_wqe(4, 13, [(d + 8192, 2048, MR_KEY)], remote_addr=0x6000,
                                       rkey=0x999, flags=5))                  # RDMA READ, fenced
             + poke(SQ + 384, send_wqe(3, 14, [], imm=0xabcd)) + sq_doorbell(4))
    return {
        "setup": rnic_up() + rnic_run(),
        "query_and_errors": (rnic_cmd(0x01) + rnic_cmd(0x77) + rnic_cmd(0x11, struct.pack("<I", 5))
                             + rnic_cmd(0x12, struct.pack("<IIQQQ", 0, 2, 0, 4096, 0))
                             + rnic_cmd(0x20, struct.pack("<QI", RNIC_IOVA + CQ, 16))
                             + rnic_cmd(0x31, qp_attrs(0x1, state=3))),
        "inbound_send": rnic_up() + recvs + packet(bth(0x00, 0) + pattern[:1024])
                        + packet(bth(0x02, 1, ack_req=True) + pattern[:976])
                        + packet(bth(0x05, 2, ack_req=True) + bytes(4) + pattern[:50], src=2)
                        + rnic_run() + cq_consume(0, 2),
        "inbound_write_read": rnic_up() + packet(bth(0x0a, 0, ack_req=True) + reth(d + 100, MR_KEY, 64)
                                                 + pattern[:64])
                              + packet(bth(0x06, 1) + reth(d, MR_KEY, 2048) + pattern[:1024])
                              + packet(bth(0x08, 2, ack_req=True) + pattern[:1024])
                              + packet(bth(0x0c, 3) + reth(d, MR_KEY, 3000)) + rnic_run()
                              + packet(bth(0x0a, 6, ack_req=True) + reth(d + 0x9000, MR_KEY, 64)
                                       + pattern[:64]) + rnic_run(),
        "outbound_with_acks": rnic_up() + sends + rnic_run(16)
                              + packet(bth(0x11, 102) + aeth(0x1f, 1))
                              + packet(bth(0x11, 103) + aeth(0x1f, 2))
                              + packet(bth(0x0d, 104) + aeth(0x1f, 3) + pattern[:1024])
                              + packet(bth(0x0f, 105) + aeth(0x1f, 3) + pattern[:1024])
                              + packet(bth(0x11, 106) + aeth(0x1f, 4)) + rnic_run(16) + cq_consume(0, 4),
        "naks_and_timeouts": rnic_up() + sends + rnic_run(16)
                             + packet(bth(0x11, 100) + aeth(0x20 | 12, 0))   # RNR NAK
                             + rnic_wait(24) + rnic_run()
                             + packet(bth(0x11, 100) + aeth(0x60, 0))        # PSN sequence NAK
                             + rnic_wait(28) + rnic_wait(30) + rnic_wait(31)
                             + packet(bth(0x11, 101) + aeth(0x62, 0)),       # remote access NAK
        "srq": rnic_up(srq=True) + poke(SRQ, recv_wqe(5, [(d, 4096, MR_KEY)]))
               + rnic_doorbell(0xc00, 1) + packet(bth(0x04, 0, ack_req=True) + pattern[:200]),
        "cq_overflow": rnic_up() + b"".join(
            b"".join(poke(RQ + 128 * (i % 8), recv_wqe(r * 8 + i, [(d, 64, MR_KEY)]))
                     for i in range(8)) + rq_doorbell(8 * (r + 1))
            + b"".join(packet(bth(0x04, r * 8 + i, ack_req=True) + pattern[:8])
                       for i in range(8)) + rnic_run() for r in range(3)),
        "bad_packets": rnic_up() + packet(bth(0x04, 0), raw_bytes=True)
                       + packet(bth(0x04, 0, qpn=9) + pattern[:16])
                       + packet(bth(0x04, 0) + pattern[:16], src=3)
                       + packet(bth(0x24, 0) + pattern[:16])
                       + packet(bth(0x0c, 0) + reth(d, MR_KEY, 1 << 31))
                       + packet(bth(0x04, 0, pad=3) + pattern[:2]),
        # A SEND pushed with its doorbell (the ring's copy is not valid), then one whose slot
        # holds another count (the ring's is read), then a QP reset: its slots are cleared.
        "pushed_and_stale": rnic_up() + poke(DATA, pattern)
                            + push(1, send_wqe(2, 21, [(d, 100, MR_KEY)])) + sq_doorbell(1)
                            + rnic_run()
                            + push(4, send_wqe(2, 30, [(d, 64, MR_KEY)]))
                            + poke(SQ + 128, send_wqe(2, 22, [(d, 200, MR_KEY)])) + sq_doorbell(2)
                            + rnic_run() + packet(bth(0x11, 1) + aeth(0x1f, 2)) + rnic_run()
                            + cq_consume(0, 2) + rnic_cmd(0x31, qp_attrs(0x1, state=0))
                            + push(1, send_wqe(2, 23, [(d, 8, MR_KEY)])) + rnic_run(),
        "reset_and_reuse": rnic_up() + sends + rnic_run(4)
                           + bytes([6, 3]) + struct.pack("<I", 0) + bytes([6, 3]) + struct.pack("<I", 1)
                           + rnic_up() + rnic_cmd(0x13, struct.pack("<I", MR_KEY))
                           + rnic_cmd(0x31, qp_attrs(0x1, state=6)) + sq_doorbell(1) + rnic_run(),
    }
