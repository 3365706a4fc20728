#!/bin/bash
# Runs where the image's WORKDIR is (/app), with the image's ENV.
set -euo pipefail
tr a-z A-Z < seed.txt > answer.txt
echo "$GREETING" >> answer.txt
