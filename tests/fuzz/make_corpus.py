#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (each input in the record format its target's
header describes): what an honest peer sends, and what a hostile one would.
  tests/fuzz/make_corpus.py [TARGET...]     (default: every target below)"""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def write_corpus(target, seeds):
    out = os.path.join(HERE, "corpus", target)
    os.makedirs(out, exist_ok=True)
    for name, blob in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)
    print(f"{len(seeds)} inputs in {out}", file=sys.stderr)


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


# ---------------------------------------------------------------- NVMe over fabrics ---
NQN = b"nqn.2026-11.io.pollux:fuzz"
HOSTNQN = b"nqn.2026-11.io.pollux:fuzz-host"
DISCOVERY_NQN = b"nqn.2014-08.org.nvmexpress.discovery"
SGL_IN_CAPSULE = 0x01  # Data Block, Offset subtype
SGL_TRANSPORT = 0x5a   # Transport Data Block, transport subtype
PSDT_SGL = 0x40


def nvme_sqe(opcode, cid, nsid=0, cdw10=0, cdw11=0, cdw12=0, cdw13=0, sgl_len=0,
             sgl_id=SGL_TRANSPORT, flags=PSDT_SGL, sgl_addr=0):
    sgl = struct.pack("<QI3xB", sgl_addr, sgl_len, sgl_id if sgl_len else 0)
    return (struct.pack("<BBHI", opcode, flags, cid, nsid) + bytes(16) + sgl
            + struct.pack("<IIIIII", cdw10, cdw11, cdw12, cdw13, 0, 0))


def fabrics_sqe(fctype, cid, body=b""):
    """A fabrics command: FCTYPE at byte 4, then bytes 5.. as given (to 64 bytes)."""
    sqe = bytearray(struct.pack("<BBHB", 0x7f, PSDT_SGL, cid, fctype) + body)
    return bytes(sqe + bytes(64 - len(sqe)))


def connect_sqe(cid, qid, sqsize, kato=0):
    sqe = bytearray(fabrics_sqe(0x01, cid))
    sqe[24:40] = struct.pack("<QI3xB", 0, 1024, SGL_IN_CAPSULE)
    sqe[40:52] = struct.pack("<HHHBxI", 0, qid, sqsize, 0, kato)
    return bytes(sqe)


def connect_data(cntlid=0xffff, subnqn=NQN, hostnqn=HOSTNQN):
    d = bytearray(1024)
    d[0:16] = bytes(range(1, 17))
    d[16:18] = struct.pack("<H", cntlid)
    d[256:256 + len(subnqn)] = subnqn
    d[512:512 + len(hostnqn)] = hostnqn
    return bytes(d)


def property_set(cid, ofst, value):
    sqe = bytearray(fabrics_sqe(0x00, cid))
    sqe[40] = 0  # 4 bytes
    sqe[44:56] = struct.pack("<IQ", ofst, value)
    return bytes(sqe)


def property_get(cid, ofst, eight=False):
    sqe = bytearray(fabrics_sqe(0x04, cid))
    sqe[40] = 1 if eight else 0
    sqe[44:48] = struct.pack("<I", ofst)
    return bytes(sqe)


CC_ENABLE = 0x460001  # IOCQES 4, IOSQES 6, EN


# ---------------------------------------------------------------------- nvmf_tcp ---
def tcp_record(kind, payload):
    return bytes([kind]) + struct.pack("<H", len(payload)) + payload


def pdu(b):
    """A PDU record: the harness sets PLEN and computes the digests its flags ask for."""
    return tcp_record(1, b)


def raw(b):
    return tcp_record(0, b)


def conn(i):
    return bytes([2, i])


def wait(exp):
    return bytes([3, exp])


def host_read(n=0):
    return bytes([4]) + struct.pack("<H", n)


def window(n):
    return bytes([5]) + struct.pack("<H", n)


def recv_chunk(n):
    return bytes([5 | 8]) + struct.pack("<H", n)


def icreq(hpda=0, dgst=0, maxr2t=0, pfv=0):
    return pdu(struct.pack("<BBBBIHBBI", 0x00, 0, 128, 0, 128, pfv, hpda, dgst, maxr2t)
               + bytes(112))


def capsule(sqe, data=b"", hd=False, dd=False):
    flags = (1 if hd else 0) | (2 if dd and data else 0)
    header_end = 72 + (4 if hd else 0)
    pdo = header_end if data else 0
    b = struct.pack("<BBBBI", 0x04, flags, 72, pdo, 0) + sqe + (bytes(4) if hd else b"")
    if data:
        b += data + (bytes(4) if dd else b"")
    return pdu(b)


def h2c_data(cid, ttag, datao, data, last=True, hd=False, dd=False):
    flags = (1 if hd else 0) | (2 if dd else 0) | (4 if last else 0)
    pdo = 24 + (4 if hd else 0)
    b = (struct.pack("<BBBBIHHII4x", 0x06, flags, 24, pdo, 0, cid, ttag, datao, len(data))
         + (bytes(4) if hd else b"") + data + (bytes(4) if dd else b""))
    return pdu(b)


def h2c_term(fes=1, fei=0):
    return pdu(struct.pack("<BBBBIHI10x", 0x02, 0, 24, 0, 24, fes, fei))


def admin_up(hd=False, dd=False, kato=0, dgst=None, sqsize=15):
    """ICReq, Connect (admin queue), CC.EN = 1: a controller ready for admin commands."""
    if dgst is None:
        dgst = (1 if hd else 0) | (2 if dd else 0)
    return (icreq(dgst=dgst) + capsule(connect_sqe(1, 0, sqsize, kato), connect_data(), hd, dd)
            + capsule(property_set(2, 0x14, CC_ENABLE), hd=hd, dd=dd))


def io_queue_up(qid=1, cntlid=1, hd=False, dd=False, maxr2t=0):
    dgst = (1 if hd else 0) | (2 if dd else 0)
    return (icreq(dgst=dgst, maxr2t=maxr2t)
            + capsule(connect_sqe(1, qid, 15), connect_data(cntlid), hd, dd))


def nvmf_tcp():
    identify = (capsule(nvme_sqe(0x06, 3, cdw10=1, sgl_len=4096))
                + capsule(nvme_sqe(0x06, 4, nsid=1, cdw10=0, sgl_len=4096))
                + capsule(nvme_sqe(0x06, 5, cdw10=2, sgl_len=4096)))
    block = bytes(range(256)) * 32  # 8 KiB
    write_read = (conn(1) + io_queue_up()
                  + capsule(nvme_sqe(0x01, 7, nsid=1, cdw10=8, cdw12=15, sgl_len=8192))
                  + h2c_data(7, 0, 0, block[:4096]) + h2c_data(7, 0, 4096, block[4096:])
                  + capsule(nvme_sqe(0x01, 8, nsid=1, cdw10=40, cdw12=0, sgl_len=512,
                                     sgl_id=SGL_IN_CAPSULE), block[:512])
                  + capsule(nvme_sqe(0x02, 9, nsid=1, cdw10=8, cdw12=15, sgl_len=8192))
                  + capsule(nvme_sqe(0x02, 10, nsid=2, cdw10=1, cdw12=0, sgl_len=4096)))
    return {
        "icreq_only": bytes([0]) + icreq(),
        "icreq_hpda_maxr2t": bytes([0]) + icreq(hpda=3, maxr2t=7, dgst=3),
        "admin_identify": bytes([0]) + admin_up() + identify
                          + capsule(property_get(6, 0x1c)) + capsule(property_get(7, 0, True)),
        "admin_digests": bytes([0]) + admin_up(hd=True, dd=True) + capsule(
            nvme_sqe(0x06, 3, cdw10=1, sgl_len=4096), hd=True, dd=True),
        "header_digest_only": bytes([0]) + admin_up(hd=True) + capsule(
            nvme_sqe(0x02, 3, nsid=0xffffffff, cdw10=(255 << 16) | 2, sgl_len=1024), hd=True),
        "io_write_read": bytes([0]) + admin_up() + write_read,
        "io_no_c2h_success": bytes([1]) + admin_up() + write_read,
        "io_no_in_capsule_data": bytes([2]) + admin_up() + write_read,
        "io_digests_maxr2t": bytes([4 | 8]) + admin_up(hd=True, dd=True) + conn(1)
                             + io_queue_up(hd=True, dd=True, maxr2t=3)
                             + capsule(nvme_sqe(0x01, 7, nsid=1, cdw12=31, sgl_len=16384),
                                       hd=True, dd=True)
                             + h2c_data(7, 0, 0, block, hd=True, dd=True)
                             + h2c_data(7, 1, 8192, block, hd=True, dd=True),
        "io_commands": bytes([0]) + admin_up() + conn(1) + io_queue_up()
                       + capsule(nvme_sqe(0x00, 3, nsid=1))  # flush
                       + capsule(nvme_sqe(0x08, 4, nsid=1, cdw10=0, cdw12=7))  # write zeroes
                       + capsule(nvme_sqe(0x09, 5, nsid=1, cdw10=0, cdw11=4, sgl_len=16,
                                          sgl_id=SGL_IN_CAPSULE),
                                 struct.pack("<IIQ", 0, 8, 16))  # deallocate
                       + capsule(nvme_sqe(0x05, 6, nsid=1, cdw12=0, sgl_len=512))  # compare
                       + capsule(fabrics_sqe(0x08, 11)),  # disconnect
        "admin_features_aer": bytes([0]) + admin_up()
                              + capsule(nvme_sqe(0x09, 3, cdw10=7, cdw11=(3 << 16) | 3))
                              + capsule(nvme_sqe(0x0a, 4, cdw10=7))
                              + capsule(nvme_sqe(0x0c, 5)) + capsule(nvme_sqe(0x0c, 6))
                              + capsule(nvme_sqe(0x18, 7)) + capsule(nvme_sqe(0x08, 8, cdw10=5)),
        "discovery_log": bytes([0]) + icreq()
                         + capsule(connect_sqe(1, 0, 15), connect_data(subnqn=DISCOVERY_NQN))
                         + capsule(property_set(2, 0x14, CC_ENABLE))
                         + capsule(nvme_sqe(0x02, 3, cdw10=(255 << 16) | 0x70, sgl_len=1024)),
        "keep_alive_timeout": bytes([0]) + admin_up(kato=100) + wait(28) + wait(28),
        "capsule_before_icreq": bytes([0]) + capsule(connect_sqe(1, 0, 15), connect_data()),
        "host_terminates": bytes([0]) + icreq() + h2c_term(),
        "small_window_chunks": bytes([0x18]) + window(40) + recv_chunk(7) + admin_up() + identify
                               + host_read(30) + host_read(100) + wait(20) + host_read(0),
        "too_many_commands": bytes([0]) + admin_up(sqsize=3) + b"".join(
            capsule(nvme_sqe(0x0c, 10 + i)) for i in range(6)),
        "close_with_io_out": bytes([0x00]) + admin_up() + conn(1) + io_queue_up()
                             + capsule(nvme_sqe(0x01, 7, nsid=1, cdw12=31, sgl_len=16384))
                             + bytes([6]) + conn(0) + bytes([7]),
        "raw_garbage": bytes([0]) + raw(b"\x04\x00\x48\x00\xff\xff\xff\x7f" + bytes(64)),
    }


# ----------------------------------------------------------------- nvmf_commands ---
def cmd(q, sqe, data=b"", in_flight=False):
    return bytes([8 if in_flight else 0, q]) + sqe + data


def nvmf_connect(q, sqsize=15, kato=0, flags=0):
    return bytes([1, q, sqsize]) + struct.pack("<HB", kato, flags)


def cc_enable(value=0):
    return bytes([2]) + struct.pack("<I", value)


def disconnect(q):
    return bytes([4, q])


def nvmf_commands():
    up = nvmf_connect(0) + cc_enable()
    io = nvmf_connect(1) + nvmf_connect(2)
    block = bytes(range(256)) * 64  # 16 KiB
    admin = (cmd(0, nvme_sqe(0x06, 1, cdw10=1, sgl_len=4096))
             + cmd(0, nvme_sqe(0x06, 2, nsid=1, cdw10=0, sgl_len=4096))
             + cmd(0, nvme_sqe(0x06, 3, cdw10=2, sgl_len=4096))
             + cmd(0, nvme_sqe(0x06, 4, nsid=1, cdw10=3, sgl_len=4096))
             + cmd(0, nvme_sqe(0x02, 5, nsid=0xffffffff, cdw10=(127 << 16) | 2, sgl_len=512))
             + cmd(0, nvme_sqe(0x02, 6, cdw10=(255 << 16) | 1, sgl_len=1024))
             + cmd(0, nvme_sqe(0x02, 7, cdw10=(1023 << 16) | 4, cdw12=8, sgl_len=4096))
             + cmd(0, nvme_sqe(0x09, 8, cdw10=7, cdw11=(3 << 16) | 3))
             + cmd(0, nvme_sqe(0x0a, 9, cdw10=7))
             + cmd(0, nvme_sqe(0x09, 10, cdw10=0x0b, cdw11=0x900))
             + cmd(0, nvme_sqe(0x0a, 11, cdw10=0x0f))
             + cmd(0, nvme_sqe(0x18, 12))
             + cmd(0, nvme_sqe(0x0c, 13)) + cmd(0, nvme_sqe(0x08, 14, cdw10=13)))
    io_cmds = (cmd(1, nvme_sqe(0x01, 20, nsid=1, cdw10=0, cdw12=31, sgl_len=16384), block)
               + cmd(1, nvme_sqe(0x02, 21, nsid=1, cdw10=0, cdw12=31, sgl_len=16384))
               + cmd(2, nvme_sqe(0x01, 22, nsid=2, cdw10=1, cdw12=1, sgl_len=8192), block[:8192])
               + cmd(2, nvme_sqe(0x02, 23, nsid=2, cdw10=1, cdw12=1, sgl_len=8192))
               + cmd(1, nvme_sqe(0x05, 24, nsid=1, cdw12=0, sgl_len=512), block[:512])
               + cmd(1, nvme_sqe(0x08, 25, nsid=1, cdw10=100, cdw12=50))
               + cmd(1, nvme_sqe(0x09, 26, nsid=1, cdw10=1, cdw11=4, sgl_len=32),
                     struct.pack("<IIQ", 0, 8, 16) + struct.pack("<IIQ", 0, 300, 200))
               + cmd(1, nvme_sqe(0x00, 27, nsid=1))
               + cmd(1, nvme_sqe(0x02, 28, nsid=1, cdw10=250, cdw12=15, sgl_len=8192)))
    return {
        "admin": bytes([0]) + up + admin,
        "io": bytes([0]) + up + io + io_cmds,
        "io_keyed_sgl": bytes([1]) + up + io + io_cmds,
        "io_in_flight_disconnect": bytes([2]) + up + io + cmd(
            1, nvme_sqe(0x01, 30, nsid=1, cdw12=31, sgl_len=16384), block, True)
            + cmd(1, nvme_sqe(0x02, 31, nsid=1, cdw12=31, sgl_len=16384), in_flight=True)
            + disconnect(0) + disconnect(1),
        "discovery": bytes([0]) + nvmf_connect(0, flags=1) + cc_enable()
                     + cmd(0, nvme_sqe(0x02, 1, cdw10=(1023 << 16) | 0x70, sgl_len=4096))
                     + cmd(0, nvme_sqe(0x06, 2, cdw10=1, sgl_len=4096)),
        "host_not_allowed": bytes([4]) + nvmf_connect(0, flags=2) + nvmf_connect(0),
        "commands_before_connect": bytes([0]) + cmd(0, nvme_sqe(0x06, 1, cdw10=1, sgl_len=4096))
                                   + cmd(1, nvme_sqe(0x02, 2, nsid=1, sgl_len=512)),
        "keep_alive": bytes([0]) + nvmf_connect(0, kato=100) + cc_enable() + bytes([3, 27])
                      + cmd(0, nvme_sqe(0x18, 3)) + bytes([3, 28]) + bytes([3, 28]),
        "reset_under_io": bytes([0]) + up + io + cmd(
            1, nvme_sqe(0x01, 40, nsid=1, cdw12=31, sgl_len=16384), block, True)
            + cc_enable(0x460000) + cc_enable() + nvmf_connect(1),
        "shutdown": bytes([0]) + up + io + cc_enable(0x464001) + bytes([5, 3]) + cc_enable(0x460000),
    }


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
        "reset_and_reuse": rnic_up() + sends + rnic_run(4)
                           + bytes([6, 3]) + struct.pack("<I", 0) + bytes([6, 3]) + struct.pack("<I", 1)
                           + rnic_up() + rnic_cmd(0x13, struct.pack("<I", MR_KEY))
                           + rnic_cmd(0x31, qp_attrs(0x1, state=6)) + sq_doorbell(1) + rnic_run(),
    }


# --------------------------------------------------------------------- blob_load ---
# The store (POLLUX_FUZZ_DEBUG=1 prints it): page 0 super block, 1-2 masks, metadata pages
# 3-26; blob 1 (thick, 3 clusters, the super blob) on page 3, 2 (thin clone) 8, 3 (its
# snapshot) 9, 4 (a clone of the snapshot) 10, 5 (xattrs over three pages) 12-14, 6 (resized) 16.
# In a metadata page: header 32 bytes, the flags descriptor (parent at 60), then the extents
# (the first run's device cluster at 88); the CRC in the last 4 bytes.
def edit(page, offset, data, seal=True):
    return bytes([0 | (4 if seal else 0), page]) + struct.pack("<HB", offset, len(data)) + data


def copy_page(page, src, seal=False):
    return bytes([1 | (4 if seal else 0), page, src])


def zero_page(page):
    return bytes([2, page])


def blob_load():
    u64 = lambda v: struct.pack("<Q", v)
    return {
        "clean": bytes([0]),
        "dirty": bytes([1]),
        "bad_crc": bytes([0]) + edit(3, 200, b"\x01", seal=False),
        "unknown_descriptor": bytes([0]) + edit(3, 68, bytes([77])),
        "chain_broken": bytes([0]) + zero_page(13),
        "version_copied": bytes([1]) + copy_page(20, 8) + copy_page(21, 12),
        "cluster_two_owners": bytes([0]) + edit(12, 88, u64(7)),
        "cluster_out_of_range": bytes([0]) + edit(3, 88, u64(1000)),
        "parent_loop": bytes([0]) + edit(9, 60, u64(4)),
        "parent_missing": bytes([1]) + zero_page(9),
        "super_total_clusters": bytes([0]) + edit(0, 32, u64(1 << 40)),
        "super_clean_flag": bytes([0]) + edit(0, 12, struct.pack("<I", 5)),
        "super_blob_gone": bytes([0]) + edit(0, 96, u64(0x99)),
        "super_md_pages": bytes([0]) + edit(0, 80, u64(1 << 30)),
        "masks_scribbled": bytes([0]) + edit(1, 0, bytes(range(64)), seal=False)
                           + edit(2, 0, b"\xff" * 32, seal=False),
        "header_count": bytes([0]) + edit(12, 24, struct.pack("<I", 7)),
    }


# ------------------------------------------------------------------- nvmf_config ---
def tgt_config(bdev, nvmf, extra=()):
    import json
    subs = [{"subsystem": "bdev", "config": bdev}, {"subsystem": "nvmf", "config": nvmf}]
    subs += list(extra)
    return json.dumps({"subsystems": subs}, indent=1).encode()


def m(method, **params):
    return {"method": method, "params": params}


def nvmf_config():
    nqn = "nqn.2026-11.io.pollux:cnode1"
    malloc = [m("bdev_malloc_create", name="Malloc0", num_blocks=2048, block_size=512),
              m("bdev_null_create", name="Null0", num_blocks=1 << 20, block_size=4096)]
    layered = malloc + [
        m("bdev_passthru_create", name="PT0", base_bdev_name="Malloc0"),
        m("bdev_error_create", base_name="Null0"),
        m("bdev_delay_create", name="D0", base_bdev_name="Null0_err", avg_read_latency=10,
          p99_read_latency=20, avg_write_latency=10, p99_write_latency=30),
        m("bdev_split_create", base_bdev="PT0", split_count=2),
        m("bdev_set_qos_limit", name="D0", rw_ios_per_sec=10000, rw_mbytes_per_sec=0),
        m("bdev_wait_for_examine")]
    listen = {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "4420"}
    full = [
        m("nvmf_create_transport", trtype="TCP", max_queue_depth=64, max_io_qpairs_per_ctrlr=4,
          in_capsule_data_size=8192, max_io_size=65536, io_unit_size=65536, max_aq_depth=32,
          num_shared_buffers=32, buf_cache_size=8, c2h_success=False, max_h2c_data_size=32768,
          dif_insert_or_strip=False, zcopy=False, abort_timeout_sec=1, acceptor_poll_rate=10000),
        m("nvmf_create_subsystem", nqn=nqn, allow_any_host=False, serial_number="POLLUX0001",
          model_number="Pollux fuzz", max_namespaces=8, min_cntlid=5, max_cntlid=100),
        m("nvmf_subsystem_add_ns", nqn=nqn, namespace={
            "nsid": 3, "bdev_name": "Malloc0", "uuid": "12345678-9abc-def0-1234-56789abcdef0",
            "nguid": "00112233445566778899aabbccddeeff", "eui64": "0011223344556677"}),
        m("nvmf_subsystem_add_ns", nqn=nqn, namespace={"bdev_name": "Null0"}),
        m("nvmf_subsystem_add_host", nqn=nqn, host="nqn.2026-11.io.pollux:host1"),
        m("nvmf_subsystem_add_listener", nqn=nqn, listen_address=listen),
        m("nvmf_subsystem_add_listener", nqn="nqn.2014-08.org.nvmexpress.discovery",
          listen_address=dict(listen, trsvcid="8009")),
    ]
    churn = full + [
        m("nvmf_subsystem_remove_ns", nqn=nqn, nsid=3),
        m("nvmf_subsystem_remove_host", nqn=nqn, host="nqn.2026-11.io.pollux:host1"),
        m("nvmf_subsystem_allow_any_host", nqn=nqn, allow_any_host=True),
        m("nvmf_subsystem_remove_listener", nqn=nqn, listen_address=listen),
        m("nvmf_create_subsystem", nqn="nqn.2026-11.io.pollux:cnode2"),
        m("nvmf_delete_subsystem", nqn="nqn.2026-11.io.pollux:cnode2"),
    ]
    return {
        "example_malloc_tcp.json": open(os.path.join(HERE, "..", "..", "fabric", "tgt", "examples",
                                                     "malloc_tcp.json"), "rb").read(),
        "full.json": tgt_config(malloc, full),
        "layered_bdevs.json": tgt_config(layered, full[:2] + [
            m("nvmf_subsystem_add_ns", nqn=nqn, namespace={"bdev_name": "PT0p1"}),
            m("nvmf_subsystem_add_ns", nqn=nqn, namespace={"bdev_name": "D0"})]),
        "churn.json": tgt_config(malloc, churn),
        "rdma_transport.json": tgt_config(malloc, [
            m("nvmf_create_transport", trtype="RDMA", num_cqe=1024,
              rdma_device="vfio-user:/tmp/rnic0.sock"),
            m("nvmf_create_transport", trtype="rdma", rdma_device="mlx5_0")]),
        "errors.json": tgt_config(malloc, [
            m("nvmf_create_transport", trtype="TCP", max_qpairs_per_ctrlr=1),
            m("nvmf_create_transport", trtype="TCP", sock_priority=1)]),
        "other_layers.json": tgt_config(malloc, full[:2], extra=[
            {"subsystem": "scheduler", "config": [m("framework_set_scheduler", name="static")]},
            {"subsystem": "iobuf"}]),
        "old_spdk_names.json": tgt_config(malloc, [
            m("nvmf_create_transport", trtype="tcp", max_qpairs_per_ctrlr=8),
            m("nvmf_create_subsystem", nqn=nqn, ana_reporting=False),
            m("nvmf_subsystem_add_listener", nqn=nqn, secure_channel=False, listen_address={
                "trtype": "tcp", "adrfam": "ipv4", "traddr": "::1", "trsvcid": "0"})]),
    }


# ----------------------------------------------------------------------- jsonrpc ---
def rpc(method, params=None, rid=1, version="2.0"):
    import json
    r = {"jsonrpc": version, "method": method, "id": rid}
    if params is not None:
        r["params"] = params
    return json.dumps(r).encode()


def jsonrpc():
    nqn = "nqn.2026-11.io.pollux:cnode1"
    listen = {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "4420"}
    build = b"\0".join([
        rpc("bdev_malloc_create", {"name": "Malloc0", "num_blocks": 2048, "block_size": 512}, 1),
        rpc("bdev_null_create", {"name": "Null0", "num_blocks": 4096, "block_size": 4096}, 2),
        rpc("nvmf_create_transport", {"trtype": "TCP", "num_shared_buffers": 16}, 3),
        rpc("nvmf_create_subsystem", {"nqn": nqn, "allow_any_host": True}, 4),
        rpc("nvmf_subsystem_add_ns", {"nqn": nqn, "namespace": {"bdev_name": "Malloc0"}}, 5),
        rpc("nvmf_subsystem_add_listener", {"nqn": nqn, "listen_address": listen}, 6),
    ])
    queries = b"\n".join([
        rpc("rpc_get_methods", rid=10), rpc("bdev_get_bdevs", {"name": "Malloc0"}, 11),
        rpc("bdev_get_iostat", rid=12), rpc("nvmf_get_subsystems", rid=13),
        rpc("nvmf_get_stats", rid=14), rpc("framework_get_reactors", rid=15),
        rpc("thread_get_pollers", rid=16), rpc("thread_get_stats", rid=17),
        rpc("save_config", rid=18)])
    lvol = b"\0".join([  # NUL: the client waits for the answers so far
        rpc("bdev_malloc_create", {"name": "Malloc1", "num_blocks": 8192, "block_size": 512}, 1),
        rpc("bdev_lvol_create_lvstore", {"bdev_name": "Malloc1", "lvs_name": "lvs0",
                                         "cluster_sz": 65536}, 2),
        rpc("bdev_lvol_create", {"lvol_name": "v0", "size_in_mib": 1, "lvs_name": "lvs0",
                                 "thin_provision": True}, 3),
        rpc("bdev_lvol_snapshot", {"lvol_name": "lvs0/v0", "snapshot_name": "s0"}, 4),
        rpc("bdev_lvol_clone", {"snapshot_name": "lvs0/s0", "clone_name": "c0"}, 5),
        rpc("bdev_lvol_resize", {"name": "lvs0/v0", "size_in_mib": 2}, 6),
        rpc("bdev_lvol_rename", {"old_name": "lvs0/c0", "new_name": "c1"}, 7),
        rpc("bdev_lvol_inflate", {"name": "lvs0/c1"}, 8),
        rpc("bdev_lvol_delete", {"name": "lvs0/v0"}, 9),
        rpc("save_config", rid=10)])
    return {
        "build_target": build + rpc("save_config", rid=7),
        "queries": build + queries,
        "lvol": lvol,
        "delete_under_namespace": build + rpc("bdev_malloc_delete", {"name": "Malloc0"}, 20)
                                  + rpc("nvmf_get_subsystems", {"nqn": nqn}, 21)
                                  + rpc("nvmf_delete_subsystem", {"nqn": nqn}, 22),
        "wrong_shapes": b"".join([
            rpc("bdev_get_bdevs", [1, 2], 1), rpc("bdev_get_bdevs", {"name": 5}, 2),
            rpc("nosuch_method", rid=3), rpc("rpc_get_methods", rid=4, version="1.0"),
            b'{"jsonrpc":"2.0","method":7,"id":5}', b'{"jsonrpc":"2.0","method":"x","id":[1]}',
            b'{"jsonrpc":"2.0","method":"rpc_get_methods","id":null,"params":null}',
            b'{"jsonrpc":"2.0","method":"rpc_get_methods"}',
            rpc("nvmf_create_subsystem", {"nqn": 12}, 6),
            rpc("bdev_malloc_create", {"name": "M", "num_blocks": -1, "block_size": 512}, 7),
            rpc("bdev_malloc_create", {"name": "M", "num_blocks": 1.5, "block_size": "x"}, 8)]),
        "batch": b'[' + rpc("rpc_get_methods", rid=1) + b',' + rpc("save_config", rid=2) + b']',
        "split_and_nested": b'  {"jsonrpc":"2.0","id":"a\\"}","method":"rpc_g\0et_methods",'
                            b'"params":{"x":[{"y":"}"}]}}\n\n{"jsonrpc"',
        "parse_error": rpc("rpc_get_methods", rid=1) + b'{"jsonrpc": 2.0, nope}' + rpc(
            "rpc_get_methods", rid=2),
        "not_an_object": b'"just a string"' + rpc("rpc_get_methods", rid=1),
        "outside_refused": rpc("bdev_nvme_attach_controller", {
            "name": "N0", "trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "4420",
            "subnqn": nqn}, 1) + rpc("bdev_uring_create", {"name": "U0", "filename": "/tmp/x"}, 2),
    }


# ------------------------------------------------------------------ nvmf_rdma ---
RDMA_NQN = b"nqn.2026-11.io.pollux:rdma-fuzz"
KEYED = 1  # command record modes (opcode bits 3-4): keyed SGL with the host's key,
BAD_KEY = 2  # ... with a wrong key,
IN_CAPSULE = 3  # ... in-capsule data from the input


def rdma_connect(h, qid, size=32):
    return bytes([1, h]) + struct.pack("<HH", qid, size)


def rdma_connect_raw(h, private_data):
    return bytes([0, h, len(private_data)]) + private_data


def rdma_capsule(h, b):
    return bytes([2, h]) + struct.pack("<H", len(b)) + b


def rdma_cmd(h, sqe, mode=0, data=b""):
    return bytes([3 | mode << 3, h]) + sqe + struct.pack("<H", len(data)) + data


def rdma_turn(n=32):
    return bytes([4, n])


def rdma_leave(h, qp_error=False):
    return bytes([6 | (8 if qp_error else 0), h])


def rdma_reposting(h, on):
    return bytes([7 | (8 if on else 0), h])


def rdma_admin_up(h=0):
    """An admin queue: the CM exchange, Connect (in-capsule data), CC.EN = 1."""
    return (rdma_connect(h, 0) + rdma_turn()
            + rdma_cmd(h, connect_sqe(1, 0, 31), IN_CAPSULE,
                       connect_data(subnqn=RDMA_NQN)) + rdma_turn()
            + rdma_cmd(h, property_set(2, 0x14, CC_ENABLE), IN_CAPSULE) + rdma_turn())


def rdma_io_up(h=1, qid=1, cntlid=1):
    return (rdma_connect(h, qid) + rdma_turn()
            + rdma_cmd(h, connect_sqe(3, qid, 31), IN_CAPSULE,
                       connect_data(cntlid=cntlid, subnqn=RDMA_NQN)) + rdma_turn())


def nvmf_rdma():
    up = rdma_admin_up() + rdma_io_up()
    block = bytes(range(256)) * 16  # 4 KiB
    io = (rdma_cmd(1, nvme_sqe(0x01, 10, nsid=1, cdw12=7, sgl_len=4096, sgl_addr=0), KEYED)
          + rdma_cmd(1, nvme_sqe(0x02, 11, nsid=1, cdw12=7, sgl_len=4096, sgl_addr=8192), KEYED)
          + rdma_cmd(1, nvme_sqe(0x01, 12, nsid=1, cdw10=8, cdw12=7), IN_CAPSULE, block)
          + rdma_cmd(1, nvme_sqe(0x02, 13, nsid=1, cdw10=8, cdw12=255, sgl_len=131072,
                                 sgl_addr=65536), KEYED)
          + rdma_turn(200))
    identify = rdma_cmd(0, nvme_sqe(0x06, 5, cdw10=1, sgl_len=4096, sgl_addr=16384), KEYED)
    bad_recfmt = bytearray(32)
    bad_recfmt[0:10] = struct.pack("<HHHHH", 1, 0, 32, 31, 0xffff)
    return {
        "admin_identify": bytes([0]) + rdma_admin_up() + identify + rdma_turn(100),
        "io_keyed_and_in_capsule": bytes([0]) + up + io,
        "io_no_srq": bytes([1]) + up + io,
        "io_no_in_capsule_data": bytes([2]) + up + io,
        "io_pool_runs_dry": bytes([5]) + up + b"".join(
            rdma_cmd(1, nvme_sqe(0x02, 40 + i, nsid=1, cdw12=255, sgl_len=131072,
                                 sgl_addr=i * 4096), KEYED) for i in range(8)) + rdma_turn(255),
        "bad_private_data": bytes([0]) + rdma_connect_raw(0, bytes(8)) + rdma_turn()
                            + rdma_connect_raw(1, bytes(bad_recfmt)) + rdma_turn()
                            + rdma_connect(2, 128) + rdma_turn() + rdma_connect(2, 1, 0)
                            + rdma_turn(),
        "regression_short_capsule_kept_its_srq_buffer": bytes([0]) + rdma_admin_up()
                                                        + rdma_capsule(0, bytes(40)) + rdma_turn(),
        "wrong_key": bytes([0]) + up + rdma_cmd(
            1, nvme_sqe(0x01, 20, nsid=1, cdw12=7, sgl_len=4096), BAD_KEY) + rdma_turn(255),
        "qp_error_in_flight": bytes([0]) + up + rdma_cmd(
            1, nvme_sqe(0x01, 21, nsid=1, cdw12=255, sgl_len=131072), KEYED)
            + rdma_leave(1, qp_error=True) + rdma_turn(255) + bytes([5, 27]),
        "disconnect_in_flight": bytes([0]) + up + rdma_cmd(
            1, nvme_sqe(0x02, 22, nsid=1, cdw12=255, sgl_len=131072), KEYED) + rdma_leave(1)
            + rdma_leave(0) + rdma_turn(255),
        "receives_not_reposted": bytes([8]) + rdma_admin_up() + rdma_reposting(0, False)
                                 + b"".join(rdma_cmd(0, property_get(50 + i, 0x1c), IN_CAPSULE)
                                            for i in range(40))
                                 + rdma_turn(255) + rdma_reposting(0, True) + rdma_turn(255),
        "in_capsule_too_long": bytes([0]) + up + rdma_cmd(
            1, nvme_sqe(0x01, 30, nsid=1, cdw12=15), IN_CAPSULE, bytes(8000)) + rdma_turn(),
    }


# ------------------------------------------------------------------ nvmf_tcp_host ---
def mitm_pass(n=1):
    return bytes([0]) * n


def nvmf_tcp_host():
    """The man in the middle: PDUs passed as they are, then one changed, dropped, cut..."""
    seeds = {
        "pass_through": bytes([0]),
        "pass_through_digests": bytes([3]),
        "pass_through_r2t_no_c2h_success": bytes([4 | 8]),
    }
    for k in (0, 1, 2, 4, 7, 11, 16, 22, 25, 28, 31, 34):
        seeds[f"flip_pdu{k}_header"] = bytes([0]) + mitm_pass(k) + bytes([1]) + struct.pack(
            "<HB", 2 + k, 0x40)
        seeds[f"flip_pdu{k}_body"] = bytes([1]) + mitm_pass(k) + bytes([1]) + struct.pack(
            "<HB", 30 + 3 * k, 0)
        seeds[f"drop_pdu{k}"] = bytes([0]) + mitm_pass(k) + bytes([3])
        seeds[f"close_after_pdu{k}"] = bytes([0]) + mitm_pass(k) + bytes([5])
        seeds[f"plen_pdu{k}"] = bytes([0]) + mitm_pass(k) + bytes([7]) + struct.pack(
            "<I", 0xffffffff if k % 2 else 9)
    seeds["garbage_first"] = bytes([0, 4, 8]) + bytes(range(8))
    seeds["desync"] = bytes([0]) + mitm_pass(3) + bytes([2]) + struct.pack("<H", 5)
    seeds["late"] = bytes([0]) + mitm_pass(5) + bytes([6, 26]) + mitm_pass(2) + bytes([6, 29])
    return seeds


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


TARGETS = {
    "vfio_user_nvme": vfio_user_nvme,
    "nvmf_tcp": nvmf_tcp,
    "nvmf_commands": nvmf_commands,
    "nvmf_rdma": nvmf_rdma,
    "nvmf_tcp_host": nvmf_tcp_host,
    "nvme_qpair": nvme_qpair,
    "rnic": rnic,
    "blob_load": blob_load,
    "nvmf_config": nvmf_config,
    "jsonrpc": jsonrpc,
}

if __name__ == "__main__":
    for name in sys.argv[1:] or TARGETS:
        write_corpus(name, TARGETS[name]())
