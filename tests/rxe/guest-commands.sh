#!/bin/sh
# Guest hook for tests/rxe/run.sh: SmallBank with two txbed processes over rxe0, once with
# every stage over RPC and once with every stage one-sided, then TPC-C's full mix over RPC
# (messages over rxe's 1024 B MTU go as RPC fragments), then the lock table on TPC-C with
# mailboxes over WRITE_WITH_IMM and votes by FAA. Each run's history is checked at
# rank 0; the hook fails unless every run prints "serializable: yes" with commits in the window.
# First `txbed selftest`: WRITE, WRITE_WITH_IMM and RC SEND between two nodes on rxe0.
set -u
status=0
echo "guest: selftest over $RXE_DEVICE (gid $RXE_GID_INDEX)"
if ! $TXBED selftest --backend verbs --device "$RXE_DEVICE" --gid-index "$RXE_GID_INDEX"; then
    echo "guest: selftest failed"
    status=1
fi
port=7821
for s in smallbank-rpc smallbank-onesided tpcc-rpc locktable-tpcc; do
    port=$((port + 1))
    echo "guest: $s over $RXE_DEVICE (gid $RXE_GID_INDEX)"
    $TXBED run "scenarios/rxe/$s.ron" --backend verbs --device "$RXE_DEVICE" --gid-index "$RXE_GID_INDEX" \
        --rank 1 --size 2 --coordinator "127.0.0.1:$port" > "/tmp/$s.r1" 2>&1 &
    r1=$!
    out=$($TXBED run "scenarios/rxe/$s.ron" --backend verbs --device "$RXE_DEVICE" --gid-index "$RXE_GID_INDEX" \
        --rank 0 --size 2 --coordinator "127.0.0.1:$port" 2>&1)
    rc=$?
    wait $r1
    rc1=$?
    echo "$out"
    echo "guest: $s rank 0 exit=$rc rank 1 exit=$rc1"
    [ $rc1 -eq 0 ] || status=1
    sed 's/^/rank 1: /' "/tmp/$s.r1"
    if [ $rc -ne 0 ] || ! echo "$out" | grep -q "serializable: yes, nothing lost"; then
        status=1
    fi
    if echo "$out" | grep -q " 0 committed in the window"; then
        echo "guest: $s committed nothing"
        status=1
    fi
done
dmesg | grep -i -E 'rxe|rdma|infiniband' | tail -20
exit $status
