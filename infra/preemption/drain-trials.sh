#!/bin/sh
# Give this node's linc trials their preemption grace before the node goes (infra/README.md,
# "Preemption"): SIGTERM every Ray Tune trial process (ray::ResourceTrainable... as linc's
# sweeps run them, ray::ImplicitFunc... without resources of their own) and Ray Train worker
# (ray::RayTrainWorker...) of this node, then wait until they have exited, at most GRACE seconds
# (default 60). DRAIN_LIST_ONLY=1 prints the pids it would signal and signals none. Each trial checkpoints its current step within cluster.preemption_grace_s and
# exits; Tune retries it elsewhere from that checkpoint. Run it before `ray stop` (which stops
# the raylet first, and the raylet takes its workers down without their grace):
#   Kubernetes: the worker containers' preStop hook (infra/kuberay/*.yaml);
#   EC2 spot:   when the instance metadata announces the interruption (infra/README.md).
grace="${1:-60}"
pids=""
for dir in /proc/[0-9]*; do
  command=$(tr '\0' ' ' < "$dir/cmdline" 2>/dev/null) || continue
  case "$command" in
    "ray::ResourceTrainable"* | "ray::ImplicitFunc"* | "ray::RayTrainWorker"*)
      pids="$pids ${dir#/proc/}" ;;
  esac
done
if [ -n "${DRAIN_LIST_ONLY:-}" ]; then
  echo $pids
  exit 0
fi
[ -n "$pids" ] || exit 0
# shellcheck disable=SC2086  # one argument per pid
kill -TERM $pids 2>/dev/null
while [ "$grace" -gt 0 ]; do
  alive=""
  for pid in $pids; do
    [ -d "/proc/$pid" ] && alive="yes"
  done
  [ -n "$alive" ] || exit 0
  sleep 1
  grace=$((grace - 1))
done
