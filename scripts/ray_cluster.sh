#!/usr/bin/env bash
# A two-node Ray cluster on this one machine, both nodes on 127.0.0.1, for running COPO the way a
# cluster runs it (`ray job submit`) without a cluster. Each node has its own raylet, object store and
# logical GPU slots (Ray's GPU resource is a counter here: the CPU path touches no CUDA), each node marking them
# with the custom resource `logical_gpu` (as many as its GPU slots), from which `--copo.device auto` decides the
# CPU path (openrlhf_copo/openrlhf_ext/device.py).
#
#   scripts/ray_cluster.sh start     # head (3 GPU slots) + a second node (2 GPU slots); prints RAY_ADDRESS
#   scripts/ray_cluster.sh status    # `ray status` of this cluster
#   scripts/ray_cluster.sh stop      # stops this cluster only (`ray stop` would kill every Ray on the machine)
#
# Then, from the repository root:
#
#   RAY_ADDRESS=http://127.0.0.1:8265 ray job submit --working-dir . -- \
#       python -m openrlhf_copo.cli.train_ppo_ray --advantage_estimator copo ...
#
# The slot counts decide OpenRLHF's placement (docs/multi-node-and-gpu.md): the two vLLM engines
# (one placement group, PACK) take two of the head's three slots; with `--actor.num_nodes 2
# --actor.num_gpus_per_node 1` DeepSpeed rank 0 takes the head's last slot and rank 1 goes to the second
# node, where the reference model takes the other slot.
#
# Settings (environment): COPO_RAY_DIR (Ray's temp dir, default /tmp/copo-ray), COPO_RAY_PORT (GCS port,
# 6390), COPO_RAY_DASHBOARD_PORT (the job API, 8265), COPO_RAY_HEAD_GPUS (3), COPO_RAY_WORKER_GPUS (2),
# COPO_RAY_CPUS (logical CPUs per node, 8), RAY (the ray executable, default: the one on PATH).
set -euo pipefail

DIR=${COPO_RAY_DIR:-/tmp/copo-ray}
PORT=${COPO_RAY_PORT:-6390}
DASHBOARD_PORT=${COPO_RAY_DASHBOARD_PORT:-8265}
HEAD_GPUS=${COPO_RAY_HEAD_GPUS:-3}
WORKER_GPUS=${COPO_RAY_WORKER_GPUS:-2}
CPUS=${COPO_RAY_CPUS:-8}
RAY=${RAY:-ray}
PGIDS="$DIR/process-groups"

# Each node is started in a session of its own; its process group (raylet, GCS, dashboard, workers and
# the processes vLLM spawns) is what `stop` ends.
start_node() {  # start_node <name> <ray start args...>
  local name=$1
  shift
  setsid bash -c 'echo $$ >> "$0"; exec "$@"' "$PGIDS" "$RAY" start "$@" \
    > "$DIR/$name.start.log" 2>&1 || {
    echo "ray_cluster.sh: starting the $name node failed; its output, $DIR/$name.start.log:" >&2
    tail -20 "$DIR/$name.start.log" >&2
    stop
    exit 1
  }
}

# A free TCP port on 127.0.0.1. Each node's dashboard agent gets one: Ray's default (52365) is taken by any other Ray
# on the machine (a local `train_ppo_ray` run, say), and the head's agent then cannot start, so `ray job submit`
# answers "No available agent to submit job".
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop() {
  [ -f "$PGIDS" ] || { echo "ray_cluster.sh: no cluster started from $DIR"; return 0; }
  local pgid
  # SIGTERM, then SIGKILL to what is left after 2 s: Ray's own shutdown gives each process 1 s, and a node's GCS server
  # and autoscaler monitor do not exit on SIGTERM at all (still there 21 s after it), so waiting longer only waits.
  for pgid in $(cat "$PGIDS"); do kill -TERM -- "-$pgid" 2>/dev/null || true; done
  for _ in $(seq 4); do
    local alive=0
    for pgid in $(cat "$PGIDS"); do kill -0 -- "-$pgid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.5
  done
  for pgid in $(cat "$PGIDS"); do kill -KILL -- "-$pgid" 2>/dev/null || true; done
  rm -f "$PGIDS"
  echo "ray_cluster.sh: stopped the cluster in $DIR"
}

case "${1:-}" in
  start)
    if [ -f "$PGIDS" ]; then
      echo "ray_cluster.sh: a cluster from $DIR is running (scripts/ray_cluster.sh stop first)" >&2
      exit 1
    fi
    mkdir -p "$DIR"
    # Multi-node needs Ray's cluster switch on (the CPU path's single-node runs turn it off).
    export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1
    # The dashboard (it serves `ray job submit`) gives each of its modules 30 s to start; on a loaded 2-core
    # machine one missed that and the head failed. Allow 3 minutes.
    export RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT=${RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT:-180}
    common=(--node-ip-address 127.0.0.1 --num-cpus "$CPUS" --disable-usage-stats --temp-dir "$DIR")
    start_node head --head --port "$PORT" --num-gpus "$HEAD_GPUS" --resources "{\"logical_gpu\": $HEAD_GPUS}" \
      --dashboard-agent-listen-port "$(free_port)" "${common[@]}" \
      --include-dashboard true --dashboard-host 127.0.0.1 --dashboard-port "$DASHBOARD_PORT"
    start_node worker --address "127.0.0.1:$PORT" --num-gpus "$WORKER_GPUS" --resources "{\"logical_gpu\": $WORKER_GPUS}" \
      --dashboard-agent-listen-port "$(free_port)" "${common[@]}"
    echo "ray_cluster.sh: 2 nodes on 127.0.0.1 ($HEAD_GPUS + $WORKER_GPUS GPU slots, $CPUS CPUs each), logs in $DIR"
    echo "export RAY_ADDRESS=http://127.0.0.1:$DASHBOARD_PORT"
    ;;
  stop) stop ;;
  status) "$RAY" status --address "127.0.0.1:$PORT" ;;
  *)
    echo "usage: scripts/ray_cluster.sh start|status|stop" >&2
    exit 2
    ;;
esac
