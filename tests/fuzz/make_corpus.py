#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (each input in the record format its target's
header describes): what an honest peer sends, and what a hostile one would.
  tests/fuzz/make_corpus.py [TARGET...]     (default: every target below)
The generators live in seeds_*.py, one module per kind of boundary."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def write_corpus(target, seeds):
    # POLLUX_CORPUS_OUT: somewhere else than the repository's corpora (corpus_test compares).
    out = os.path.join(os.environ.get("POLLUX_CORPUS_OUT", os.path.join(HERE, "corpus")), target)
    os.makedirs(out, exist_ok=True)
    for name, blob in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)
    print(f"{len(seeds)} inputs in {out}", file=sys.stderr)


# One module per boundary; each generator returns {input name: bytes}.
from seeds_config import blob_load, jsonrpc, nvmf_config  # noqa: E402
from seeds_device import nvme_qpair, vfio_user_nvme  # noqa: E402
from seeds_nvmf import nvmf_commands, nvmf_rdma, nvmf_tcp, nvmf_tcp_host  # noqa: E402
from seeds_rnic import rnic  # noqa: E402

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
