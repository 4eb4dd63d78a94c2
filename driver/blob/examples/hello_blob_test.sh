#!/bin/bash
# hello_blob runs to the end and reads back what it wrote.
set -euo pipefail
out=$("$1")
echo "$out"
grep -q 'read back: "Hello blob!" (match)' <<<"$out"
grep -q 'blobstore unloaded' <<<"$out"
