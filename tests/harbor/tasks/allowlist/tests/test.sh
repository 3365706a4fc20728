#!/bin/bash
# Reward 1 when, through the proxy (HTTP_PROXY), http://allowed.test/ answers and neither
# http://refused.test/ (a name not allowed) nor http://127.0.0.1/ (a raw IP: the same server) does.
fetch() {  # the body, or exit 1 with one line (the proxy's refusal: HTTP Error 403)
    python3 -c 'import sys, urllib.request
try: print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())
except OSError as exc: sys.exit(f"{sys.argv[1]}: {exc}")' "$1"
}
ok=1
[ "$(fetch http://allowed.test/)" = "hello allowed.test" ] || ok=0
fetch http://refused.test/ && ok=0
fetch http://127.0.0.1/ && ok=0
echo $ok > /logs/verifier/reward.txt
