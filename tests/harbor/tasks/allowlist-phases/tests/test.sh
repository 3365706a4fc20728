#!/bin/bash
# Reward 1 when the agent's phase reached allowed.test (its answer saved) and the verifier's phase
# (no-network) reaches nothing: allowed.test refused by the proxy, loopback the only interface.
fetch() {  # the body, or exit 1 with one line (the proxy's refusal: HTTP Error 403)
    python3 -c 'import sys, urllib.request
try: print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())
except OSError as exc: sys.exit(f"{sys.argv[1]}: {exc}")' "$1"
}
ok=1
[ "$(cat /tmp/agent-saw.txt)" = "hello allowed.test" ] || ok=0
fetch http://allowed.test/ && ok=0
[ "$(ls /sys/class/net)" = lo ] || ok=0
echo $ok > /logs/verifier/reward.txt
