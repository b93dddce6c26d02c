#!/usr/bin/env bash
# curl with Azure Batch Shared Key signing, for trying the API by hand:
#
#   scripts/batch-curl.sh GET  /pools
#   scripts/batch-curl.sh POST /pools '{"id":"p1","vmSize":"standard_a1","targetDedicatedNodes":2}'
#   scripts/batch-curl.sh GET  '/jobs/j1/tasks?$filter=state%20eq%20%27completed%27'
#
# Environment: BATCH_URL (default http://127.0.0.1:8080), BATCH_ACCOUNT (default batchpool),
# BATCH_KEY (default: the key file batchpool-data/$BATCH_ACCOUNT.key). Extra arguments after the
# body go to curl (e.g. -i, -w '%{http_code}'). Only the headers this script sets are signed, so
# extra ocp-*, If-* or Range headers would be refused: use an SDK for those.
set -euo pipefail
method=${1:?usage: batch-curl.sh METHOD PATH [BODY] [curl args...]}
path=${2:?usage: batch-curl.sh METHOD PATH [BODY] [curl args...]}
shift 2
# A third argument that is not a curl option is the JSON body.
body=""
if [[ $# -gt 0 && "$1" != -* ]]; then
    body=$1
    shift
fi
url=${BATCH_URL:-http://127.0.0.1:8080}
account=${BATCH_ACCOUNT:-batchpool}
key=${BATCH_KEY:-$(cat "${BATCHPOOL_DATA_DIR:-batchpool-data}/$account.key")}

date=$(LC_ALL=C TZ=GMT date '+%a, %d %b %Y %H:%M:%S GMT')
length=""
type=""
if [[ -n "$body" ]]; then
    length=$(printf '%s' "$body" | wc -c | tr -d ' ')
    type="application/json; odata=minimalmetadata"
elif [[ "$method" != GET && "$method" != HEAD ]]; then
    length=0
fi
resource=${path%%\?*}
query=""
[[ "$path" == *\?* ]] && query=${path#*\?}

# Canonical string: verb, 11 standard headers, ocp-date, /account/path, then the decoded query
# parameters sorted by name, one "name:value" a line (see the Shared Key section of the README).
sts="$method"$'\n\n\n'"$length"$'\n\n'"$type"$'\n\n\n\n\n\n\n'"ocp-date:$date"$'\n'"/$account$resource"
if [[ -n "$query" ]]; then
    canonical=$(python3 -c '
import sys, urllib.parse
q = urllib.parse.parse_qs(sys.argv[1])
print("".join(f"\n{k}:{q[k][0]}" for k in sorted(q) if q[k][0]), end="")' "$query")
    sts+="$canonical"
fi
keyhex=$(printf '%s' "$key" | base64 -d | od -An -tx1 -v | tr -d ' \n')
signature=$(printf '%s' "$sts" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$keyhex" -binary | base64)

args=(-sS -X "$method" -H "ocp-date: $date" -H "Authorization: SharedKey $account:$signature")
if [[ -n "$body" ]]; then
    args+=(-H "Content-Type: $type" --data-binary "$body")
elif [[ "$method" != GET && "$method" != HEAD ]]; then
    args+=(-H "Content-Length: 0")
fi
[[ "$method" == HEAD ]] && args+=(-I)
exec curl "${args[@]}" "$@" "$url$path"
