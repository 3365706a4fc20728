#!/bin/bash
# The fix travels as a file of the solution's tree (uploaded to /solution with its subdirectory).
set -euo pipefail
[ "$PROJECT_NAME" = calc ]
/solution/patches/apply.sh
