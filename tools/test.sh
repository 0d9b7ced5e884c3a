#!/usr/bin/env bash
# `make test`: the images build in the background while the fast tier runs, then the live tier runs on them.
#
# The fast tier (`make test-fast`) needs no engine, no image and no network; the live tier (tests marked `docker`)
# starts real containers on the images, which the session's fixtures find up to date. Building first and testing
# after would put the whole build before the first test; side by side, the fast tier and the manual's strict build
# take the build's waits for the network and the engine; so the fast tier fuzzes the spec in full here
# (ORCH_FUZZ=thorough), four times the examples `make test-fast` tries.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
PROCESSES=${TEST_PROCESSES:-2}
log=$(mktemp -t orch-build.XXXXXX)
( "$BIN/orch" build --bootstrap-base && "$BIN/orch" build --framework torch ) >"$log" 2>&1 &
build=$!
trap 'kill "$build" 2>/dev/null' INT TERM
status=0
started=$(date +%s)
DOCKER_HOST=unix:///nonexistent ORCH_FUZZ=thorough "$BIN/pytest" -m "not docker and not network" -n "$PROCESSES" \
    || status=1
echo "test.sh: the fast tier took $(( $(date +%s) - started )) s"
NO_MKDOCS_2_WARNING=1 "$BIN/mkdocs" build --strict || status=1
if ! wait "$build"; then
    echo "test.sh: building the images failed; its last lines:" >&2
    tail -n 30 "$log" >&2
    docker info >/dev/null 2>&1 \
        || echo "test.sh: the Docker engine does not answer now; dockerd: $(pgrep -a dockerd || echo 'not running')" >&2
    exit 1
fi
echo "test.sh: the images were ready $(( $(date +%s) - started )) s in"
# The CPU the machine spent while the live tier ran (/proc/stat: busy and all jiffies): how many of its cores the
# tier kept busy. Near all of them, only less work shortens the tier; well below, tests wait and could overlap.
cpu() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
read -r busy0 all0 < <(cpu)
live=$(date +%s)
"$BIN/pytest" -m "docker or network" -n "$PROCESSES" --dist loadfile || status=1
read -r busy1 all1 < <(cpu)
awk -v b=$((busy1 - busy0)) -v a=$((all1 - all0)) -v n="$(nproc)" -v s=$(( $(date +%s) - live )) -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "test.sh: the live tier kept %.2f of %d cores busy (%.0f CPU-seconds in %d s)\n", n * b / a, n, b / hz, s }'
echo "test.sh: $(( $(date +%s) - started )) s in all"
exit $status
