#!/bin/bash
# Hangs: a process in a session of its own, and one in the foreground (the test looks for both
# on the host by their marker, 1017 seconds).
setsid sleep 1017 </dev/null >/dev/null 2>&1 &
sleep 1017
echo 1 > /logs/verifier/reward.txt
