#!/usr/bin/env bash
# Downloads a public data set into data/.
#   scripts/get-data.sh tinyshakespeare   -> data/tinyshakespeare.txt (1.1 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data
case "${1:-}" in
  tinyshakespeare)
    url=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
    curl -fL --retry 3 -o data/tinyshakespeare.txt.part "$url"
    mv data/tinyshakespeare.txt.part data/tinyshakespeare.txt
    echo "data/tinyshakespeare.txt: $(wc -c < data/tinyshakespeare.txt) bytes"
    ;;
  *)
    echo "usage: scripts/get-data.sh tinyshakespeare" >&2
    exit 2
    ;;
esac
