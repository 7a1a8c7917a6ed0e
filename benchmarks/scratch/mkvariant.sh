#!/bin/bash
# mkvariant.sh NAME [CHECKOUT]: copy a checkout's package (with its migrations inside) to
# $HERMES_SCRATCH_VARIANTS/NAME (default /tmp/speed/variants), to run through PYTHONPATH
set -e
# (an optional second argument: the checkout to copy, default this one)
repo=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
d=${HERMES_SCRATCH_VARIANTS:-/tmp/speed/variants}/$1
rm -rf $d; mkdir -p $d
cp -r $repo/hermes_store $d/hermes_store
cp -r $repo/migrations $d/hermes_store/migrations
find $d -name __pycache__ -prune -exec rm -rf {} +
echo $d
