"""Seed inputs of the parsers of stored and sent configuration: blobstore metadata
(blob_load), the SPDK-shaped JSON config (nvmf_config) and JSON-RPC requests (jsonrpc)."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


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
