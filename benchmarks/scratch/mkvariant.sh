#!/bin/bash
# mkvariant.sh NAME : copy the worktree's package (with migrations inside) to /tmp/speed/variants/NAME
set -e
d=/tmp/speed/variants/$1
rm -rf $d; mkdir -p $d
cp -r /work/wt-speed/hermes_store $d/hermes_store
cp -r /work/wt-speed/migrations $d/hermes_store/migrations
find $d -name __pycache__ -prune -exec rm -rf {} +
echo $d
