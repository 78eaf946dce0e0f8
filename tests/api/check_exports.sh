#!/bin/sh
# Fails if libzrt.so exports any defined symbol that is not part of the C API (zrt_*).
nm_tool=$1
library=$2
leaked=$("$nm_tool" -D --defined-only "$library" | awk '{print $3}' | grep -v '^zrt_' | grep -v '^$')
count=$("$nm_tool" -D --defined-only "$library" | awk '{print $3}' | grep -c '^zrt_')
if [ -n "$leaked" ]; then
  echo "symbols other than zrt_* exported by $library:"
  echo "$leaked"
  exit 1
fi
echo "$count zrt_* symbols exported, nothing else"
