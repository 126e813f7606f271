#!/bin/bash
# Withdrawal saga, TCP and socket alternately (ABBA), one run each at a time.
cd /work/wt-pgsock
SOCK='postgresql:///?host=/var/run/postgresql&port=5432'
for side in sock tcp tcp sock; do
  if [ $side = sock ]; then export HIWALLET_DATABASE_URL="$SOCK"; else export HIWALLET_DATABASE_URL=postgresql://localhost:5432; fi
  echo "== $side $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  timeout 400 .venv/bin/python bench/withdrawal_bench.py --duration 20 --latency-duration 5 --py-spy none 2>&1 | grep -v '^{"timestamp' | tail -25
done
echo done
