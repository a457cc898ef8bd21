#!/bin/sh
# Example guest hook for tests/rxe/run.sh. Copy to tests/rxe/guest-commands.sh (or point
# TXBED_RXE_GUEST_COMMANDS at a file) and the harness copies it into the initramfs and
# runs it inside the guest after rxe0 is up and `txbed devices` was checked.
#
# Runs with busybox sh, cwd /txbed (holds txbed and scenarios/), and:
#   TXBED=/txbed/txbed  RXE_DEVICE=rxe0  RXE_IP=10.0.0.1  RXE_GID_INDEX=<RoCE v2 GID of 10.0.0.1>
# A non-zero exit makes the harness report FAIL.
#
# Later (once the verbs transport exists) this is where 2-3 txbed processes run over rxe0,
# e.g. in the background with --rank/--size and --coordinator 10.0.0.1:7821 --bind 10.0.0.1,
# then `wait` for all of them.
set -u
echo "guest-commands: txbed run --backend verbs on $RXE_DEVICE gid $RXE_GID_INDEX"
out=$($TXBED run scenarios/verbs-read.ron --backend verbs --device "$RXE_DEVICE" \
    --gid-index "$RXE_GID_INDEX" --rank 0 --size 1 --bind "$RXE_IP" 2>&1)
rc=$?
echo "$out"
echo "guest-commands: txbed run exit=$rc"
# Today the verbs backend probes the device, then exits 2 saying the transport is not
# implemented yet; accept exactly that, so the probe over rxe is exercised.
if [ $rc -eq 2 ] && echo "$out" | grep -q 'not implemented yet'; then
    exit 0
fi
exit $rc
