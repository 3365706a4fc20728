#!/bin/bash
python3 -c 'import urllib.request; print(urllib.request.urlopen("http://allowed.test/", timeout=10).read().decode())' \
    > /tmp/agent-saw.txt
