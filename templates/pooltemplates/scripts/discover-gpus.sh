#!/bin/sh
# Spark GPU discovery script: prints the GPUs this machine offers as ResourceInformation JSON,
# e.g. {"name": "gpu", "addresses": ["0", "1"]}.
# TRAINSTACK_GPU_ADDRESSES (comma-separated, e.g. "0,1") wins over real GPUs: CPU-only pools
# advertise placeholder GPUs through it so Spark's GPU scheduling runs without GPU hardware.
set -eu

if [ -n "${TRAINSTACK_GPU_ADDRESSES:-}" ]; then
    addresses=$(printf '%s' "$TRAINSTACK_GPU_ADDRESSES" | tr ',' ' ')
elif command -v nvidia-smi >/dev/null 2>&1; then
    addresses=$(nvidia-smi --query-gpu=index --format=csv,noheader)
else
    addresses=""
fi

quoted=""
for address in $addresses; do
    quoted="${quoted:+$quoted, }\"$address\""
done
printf '{"name": "gpu", "addresses": [%s]}\n' "$quoted"
