#!/usr/bin/env bash
# Beyond the suite: drgpu's read commands and a 6-refresh watch on the real driver while
# a torch process loads the GPU, against an engine that runs no container.
export PYTHONPATH=$PWD:/tmp/site
out=/tmp/hw/extra; mkdir -p "$out"
python3 - <<'PY' &
import time
from pathlib import Path
from tests.gpu.empty_engine import serving_no_containers
with serving_no_containers(Path("/tmp/engine.sock")):
    time.sleep(60)
PY
sleep 1
export DOCKER_HOST=unix:///tmp/engine.sock
python3 -c '
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 25
while time.time() < end:
    b = a @ a
torch.cuda.synchronize()' &
load=$!
sleep 6
for c in "gpus" "gpus --json" "status" "status --json" "doctor --json"; do
    echo "== drgpu $c"; timeout 30 python3 -m drgpu $c; echo "rc=$?"
done >"$out/commands.txt" 2>&1
timeout 30 python3 -m drgpu status --watch --json --count 6 --interval 1 >"$out/watch.jsonl" 2>"$out/watch.stderr"
echo "watch rc=$?" >>"$out/watch.stderr"
cd /tmp && timeout 20 python3 -m drgpu report --json >"$out/report.json" 2>&1; echo "report rc=$?" >>"$out/report.json"
wait $load
