#!/bin/bash
# Reward 1 when the answer is right, the command started in the image's WORKDIR as the task's
# verifier user, and the image's RUN step happened.
expected="$(tr a-z A-Z < /app/seed.txt; echo hello)"
if [ "$(pwd)" = /app ] && [ "$(id -un)" = nobody ] && [ -f /app/built.txt ] && [ "$(cat /app/answer.txt 2>/dev/null)" = "$expected" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
