#!/bin/bash
# Reward 1 when loopback is the only network interface (nothing is sent anywhere).
if [ "$(ls /sys/class/net)" = lo ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
