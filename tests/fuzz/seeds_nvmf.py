"""Seed inputs of the NVMe-oF targets and host: NVMe/TCP PDUs (nvmf_tcp), the target core's
commands (nvmf_commands), NVMe/RDMA capsules from verbs hosts (nvmf_rdma) and a man in the
middle to the TCP host (nvmf_tcp_host)."""
import struct


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
