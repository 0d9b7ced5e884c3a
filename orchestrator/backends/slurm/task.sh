# One task of an orch job on Slurm: runs its replica in orch's image, and records when it started and how it ended.
#
# The batch script writes this file, job.vars (what every task shares) and each task's own two files into the run's
# folder on the shared storage (its working folder), then runs this once per task with srun. Task SLURM_PROCID runs
# replica SLURM_PROCID: its variables (task-N.vars) and its environment (task-N.env), in which orch-task-T names the
# host of task T, known only now (the task writes it into the replica's /etc/hosts). Its output goes to NAME.out and NAME.err, each line
# after the time it was read; its start to NAME.started; its end to NAME.exit (exit code, time, 1 if it went over its
# memory). orch reads those files as it reads anything a run's folder holds: bounded, and checked.
set -uo pipefail
. ./job.vars
i=${SLURM_PROCID:?srun sets SLURM_PROCID}
. "./task-$i.vars"

fail() {
    printf '%s orch: %s\n' "$EPOCHREALTIME" "$1" >>"$name.err"
    printf '%s %s 0\n' "$2" "$EPOCHREALTIME" >"$name.exit.tmp" && mv "$name.exit.tmp" "$name.exit"
    exit "$2"
}

# Each task's host, as the name orch-task-T: its node's address as Slurm's own daemons reach it (NodeAddr, or the
# node's name where the cluster gives none), looked up here. The step's tasks lie in blocks over its nodes, as many on
# each as SLURM_STEP_TASKS_PER_NODE says ("2(x3),1": two on each of three nodes, then one). A name per task, not per
# node, so that a launcher that starts one process per host (Hydra's) sees one host per replica.
mapfile -t nodes < <(scontrol show hostnames "${SLURM_STEP_NODELIST:-${SLURM_JOB_NODELIST:?}}")
ips=()
for k in "${!nodes[@]}"; do
    addr=$(scontrol show node --oneliner "${nodes[$k]}" | sed -n 's/.* NodeAddr=\([^ ]*\).*/\1/p')
    ips[k]=$(getent ahostsv4 "${addr:-${nodes[$k]}}" | awk 'NR == 1 {print $1}')
    [[ ${ips[k]} =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "node ${nodes[$k]}'s address '${addr:-}' has no IPv4 address here" 2
done
hosts=()
k=0
IFS=, read -ra groups <<<"${SLURM_STEP_TASKS_PER_NODE:-${SLURM_TASKS_PER_NODE:?}}"
for g in "${groups[@]}"; do
    count=${g%%(*}
    times=1
    [[ $g == *"(x"* ]] && times=${g#*(x} && times=${times%)}
    for ((r = 0; r < times; r++)); do
        for ((c = 0; c < count; c++)); do hosts+=("${ips[k]}"); done
        k=$((k + 1))
    done
done
[[ ${#hosts[@]} -eq $SLURM_NTASKS ]] || fail "the step's tasks per node (${SLURM_STEP_TASKS_PER_NODE:-}) are not its $SLURM_NTASKS tasks" 2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/orch-task.XXXXXX") || fail "cannot make a folder under ${TMPDIR:-/tmp}" 2
child=""
container=""
cleanup() {
    [[ -n $container ]] && docker rm -f "$container" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
{
    cat /etc/hosts
    for t in "${!hosts[@]}"; do printf '%s orch-task-%s\n' "${hosts[t]}" "$t"; done
    printf '%s %s\n' "${hosts[i]}" "$(hostname)"  # a process may look its own host name up
} >"$tmp/hosts" || fail "cannot write this task's hosts file" 2

stamp() {
    local line
    while IFS= read -r line || [[ -n $line ]]; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done
}
mkfifo "$tmp/out" "$tmp/err"
stamp <"$tmp/out" >>"$name.out" &
out_pid=$!
stamp <"$tmp/err" >>"$name.err" &
err_pid=$!

binds=()
case $runtime in
charliecloud)
    export USER=${USER:-$(id -un)}  # ch-run will not start without it
    for b in "${mounts[@]}"; do binds+=(-b "${b%:ro}"); done
    argv=(ch-run --unset-env='*' --set-env="$image/ch/environment" --set-env="task-$i.env" --env-no-expand
          --private-tmp --no-passwd -b "$tmp/hosts:/etc/hosts" -c "${workdir:-/tmp}" "${binds[@]}" "$image" --
          "${command[@]}")
    ;;
docker)
    image_id=$(cat "$archive.id") || fail "$archive.id is missing; orch makes it with the archive" 2
    if [[ $(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null) != "$image_id" ]]; then
        # Once per node: the first task to find the image missing loads it, the others wait for it.
        flock "${TMPDIR:-/tmp}/orch-image-load.lock" sh -c \
            '[ "$(docker image inspect --format "{{.Id}}" "$1" 2>/dev/null)" = "$2" ] || docker load -q -i "$3"' \
            _ "$image" "$image_id" "$archive" >/dev/null 2>"$tmp/load" \
            || fail "docker load of $archive failed: $(tail -n 1 "$tmp/load")" 125
    fi
    for b in "${mounts[@]}"; do binds+=(-v "$b"); done
    for t in "${!hosts[@]}"; do binds+=(--add-host "orch-task-$t:${hosts[t]}"); done
    container="orch-$run-$name-$SLURM_JOB_ID"
    argv=(docker run --name "$container" --network host --ipc host --init --read-only --tmpfs /tmp:size=512m
          --cap-drop ALL --security-opt no-new-privileges:true --memory "${memory_mb}m"
          --pids-limit "$pids_limit" --user "$user" --env-file "task-$i.env" --label "orch.run=$run"
          --label "orch.role=$role" --label "orch.index=$index" "${binds[@]}")
    [[ -n $cpus ]] && argv+=(--cpus "$cpus")
    [[ $file_size_blocks -gt 0 ]] && argv+=(--ulimit "fsize=$((file_size_blocks * 1024))")
    [[ -n $workdir ]] && argv+=(-w "$workdir")
    [[ ${#command[@]} -gt 0 ]] && argv+=(--entrypoint "${command[0]}")
    argv+=("$image" "${command[@]:1}")
    ;;
*)
    fail "unknown container runtime '$runtime'" 2
    ;;
esac

printf "%s %s\n" "$EPOCHREALTIME" "${SLURM_NODEID:-0}" >"$name.started.tmp" && mv "$name.started.tmp" "$name.started"
# The replica in a session of its own: its processes' memory is summed by session, and a kill reaches them all.
(
    [[ $runtime == charliecloud && $file_size_blocks -gt 0 ]] && ulimit -f "$file_size_blocks"
    exec setsid "${argv[@]}"
) >"$tmp/out" 2>"$tmp/err" &
child=$!
# Slurm's SIGKILL follows its SIGTERM after KillWait: the container goes at once, before that.
trap '[[ -n $child ]] && kill -TERM -- "-$child" "$child" 2>/dev/null; [[ -n $container ]] && docker rm -f "$container" >/dev/null 2>&1' TERM INT

# Where the runtime sets no memory limit of its own (charliecloud), the task keeps the replica to --memory: its
# processes' resident memory, summed about once a second, ends it as the kernel's limit would, with 137.
oom=0
if [[ $runtime == charliecloud ]]; then
    limit_kb=$((memory_mb * 1024))
    while kill -0 "$child" 2>/dev/null; do
        used=$(ps -o rss= -s "$child" 2>/dev/null | awk '{s += $1} END {print s + 0}')
        if [[ ${used:-0} -gt $limit_kb ]]; then
            oom=1
            kill -KILL -- "-$child" 2>/dev/null
            break
        fi
        sleep 1
    done
fi
while true; do
    wait "$child"
    code=$?
    kill -0 "$child" 2>/dev/null || break  # a trapped signal ended the wait, not the replica
done
if [[ $runtime == docker && -n $container ]]; then
    [[ $(docker inspect --format '{{.State.OOMKilled}}' "$container" 2>/dev/null) == true ]] && oom=1
fi
[[ $oom == 1 ]] && code=137
wait "$out_pid" "$err_pid" 2>/dev/null
printf '%s %s %s\n' "$code" "$EPOCHREALTIME" "$oom" >"$name.exit.tmp" && mv "$name.exit.tmp" "$name.exit"
exit "$code"
