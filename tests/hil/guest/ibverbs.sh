#!/bin/sh
# In the guest: soft-RoCE (rxe.sh), then pollux-ibverbs-test (ibverbs_test.cc): driver/rdma's
# libibverbs provider and fabric/rdma's rdma_cm on rxe0 — the verbs' and the CM's semantics as
# a real verbs stack gives them.
set -eu
echo  # ends the firmware's escape sequences' line: the first "hil:" line starts a line
rxe.sh setup
rc=0
RXE_ADDR=${RXE_ADDR:-10.99.0.1} pollux-ibverbs-test >/tmp/test.log 2>&1 || rc=$?
sed 's/^/hil:   /' /tmp/test.log
[ $rc = 0 ] || { echo "hil: FAILED: pollux-ibverbs-test (exit status $rc)"; rxe.sh status; exit 1; }
echo "hil: PASS"
