#!/usr/bin/env bash
# Start or stop Ray on one node of a multi-node DFPO run, the way the recipes need it: token
# authentication on (Ray 2.60), the interpreter that has dfpo installed (so every Ray worker loads
# dfpo's verl plugin), GPUS_PER_NODE GPUs (logical ones on CPU nodes), the dashboard reachable for
# `ray job submit`. Run it on every node; the recipe then runs on the head (docs/recipes.md,
# "Multi-node").
#
#   bash scripts/launch/ray_cluster.sh head [--block] [ray start options...]             # node 0
#   bash scripts/launch/ray_cluster.sh worker <head-ip>:<port> [--block] [ray start options...]
#   bash scripts/launch/ray_cluster.sh wait <head-ip>:<port> <nodes>                     # until <nodes> are up
#   bash scripts/launch/ray_cluster.sh stop                                              # this node's Ray only
#   bash scripts/launch/ray_cluster.sh token                                             # create the token file
#   bash scripts/launch/ray_cluster.sh check                                             # this node's sandbox check
#
# The code-reward sandbox: on a GPU node (nvidia-smi lists a GPU, and VERL_PLATFORM is not cpu)
# head/worker (and `check`) first run `python -m reward.sandbox --check --require-strong`: a node
# where only a weak level works (no bubblewrap, no user namespaces) stops here, naming the node and
# the fix, unless REWARD_SANDBOX_ALLOW_WEAK=1 (said loudly); the node's Ray then runs with
# REWARD_SANDBOX_REQUIRE_STRONG=1, so its reward workers never fall back in silence (docs/rewards.md,
# "Sandbox isolation").
#
# head/worker start `ray start --block` in the background (its own session) and return once the
# node is up; with --block they stay in the foreground instead (for srun, see slurm_dfpo.sbatch).
# Options after the role go to `ray start` last, so they win (--temp-dir, --num-cpus, ports...).
# `stop` ends only the Ray started here, by the process id it recorded (never `ray stop`, which
# ends every Ray process of the user on the machine).
#
# The token: Ray 2.60 refuses a node or client without the cluster's token once the head has one.
# It is read from the file RAY_AUTH_TOKEN_PATH (default ~/.ray/auth_token, Ray's own default);
# `head` (or `token`) creates it when missing, 256 random bits, mode 0600. Every node and every
# client (the recipe's driver, `ray job submit`, `ray status`) needs the same file and
# RAY_AUTH_MODE=token. Without shared home directories, copy it (scp -p, then chmod 600) or put it
# on shared storage readable only by you and export RAY_AUTH_TOKEN_PATH on every node. The token
# itself is never printed, never put in a process's arguments or environment (only the path is).
#
# Environment: PYTHON (default python3; the interpreter with dfpo installed), GPUS_PER_NODE (GPUs
# this node offers; unset: Ray counts them), CPUS_PER_NODE (CPUs this node offers; unset: the ones
# this process may run on, `nproc`), DFPO_RAY_NODE_IP (this node's address; unset: Ray
# picks it), DFPO_RAY_PORT (head's port, 6379), DFPO_RAY_DASHBOARD_PORT (8265),
# DFPO_RAY_DASHBOARD_HOST (DFPO_RAY_NODE_IP, else 0.0.0.0), DFPO_RAY_DIR (this node's pid file and
# `ray start` log; default /tmp/dfpo-ray-<uid>, node-local), DFPO_RAY_START_TIMEOUT_S (120),
# DFPO_RAY_JOIN_TIMEOUT_S (300), DFPO_RAY_POLL_S (5, between two looks of `wait`),
# DFPO_RAY_STOP_TIMEOUT_S (90), RAY (a `ray` command to use instead of "$PYTHON -m ray.scripts.scripts").
set -euo pipefail

usage() {
    sed -n '8,13p' "${BASH_SOURCE[0]}" | sed 's/^#  *//' >&2
    exit 2
}

die() {
    echo "dfpo ray_cluster error: $*" >&2
    exit 1
}

note() {
    echo "dfpo ray_cluster: $*" >&2
}

python="${PYTHON:-python3}"
if [[ -n "${RAY:-}" ]]; then
    read -r -a ray <<<"$RAY"
else
    ray=("$python" -m ray.scripts.scripts)
fi
state_dir="${DFPO_RAY_DIR:-/tmp/dfpo-ray-$(id -u)}"
pid_file="$state_dir/ray.pid"
log_file="$state_dir/ray_start.log"
port="${DFPO_RAY_PORT:-6379}"
dashboard_port="${DFPO_RAY_DASHBOARD_PORT:-8265}"
node_ip="${DFPO_RAY_NODE_IP:-}"

# token_file: RAY_AUTH_TOKEN_PATH as an absolute path (a leading ~/ expanded), else Ray's default.
token_file() {
    local path="${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}"
    # shellcheck disable=SC2088  # the literal ~/ prefix is what is tested
    [[ "$path" != "~/"* ]] || path="$HOME/${path#\~/}"
    [[ "$path" == /* ]] || path="$PWD/$path"
    printf '%s' "$path"
}

# setup_auth CREATE: token authentication for this process and what it starts. CREATE=1 makes a
# token file when there is none (the head); 0 requires one (a joining node). Exports RAY_AUTH_MODE
# and RAY_AUTH_TOKEN_PATH only: Ray reads the token from the file.
setup_auth() {
    local create="$1" file mode owner
    if [[ "${RAY_AUTH_MODE:-token}" == disabled ]]; then
        note "RAY_AUTH_MODE=disabled: token authentication is off; anyone who can reach this node's Ray ports can run code as you"
        return 0
    fi
    [[ "${RAY_AUTH_MODE:-token}" == token ]] || die "RAY_AUTH_MODE=$RAY_AUTH_MODE: expected token (the default here) or disabled"
    [[ -z "${RAY_AUTH_TOKEN:-}" ]] ||
        die "RAY_AUTH_TOKEN is set: every process Ray starts would inherit the token in its environment. Put the token in a file readable only by you (chmod 600), export RAY_AUTH_TOKEN_PATH=<that file> and unset RAY_AUTH_TOKEN"
    file="$(token_file)"
    if [[ ! -e "$file" ]]; then
        if [[ "$create" != 1 ]]; then
            die "no Ray token file at $file. Every node needs the head's token: copy the head's file here (scp -p <head>:$file $file && chmod 600 $file), or put it on shared storage readable only by you and export RAY_AUTH_TOKEN_PATH=<that file> on every node"
        fi
        mkdir -p "$(dirname "$file")"
        # 32 random bytes as 64 hex characters (what `ray get-auth-token --generate` makes),
        # written with umask 077 and renamed into place, so no one else can ever read it
        (
            umask 077
            head -c 32 /dev/urandom | od -An -v -tx1 | tr -d ' \n' >"$file.tmp.$$"
            mv "$file.tmp.$$" "$file"
        )
        note "created a new Ray token at $file (mode 0600); every node and client needs this file"
    fi
    [[ -f "$file" && -r "$file" && -s "$file" ]] || die "the Ray token file $file is not a readable, non-empty file"
    owner="$(stat -c %u "$file")"
    [[ "$owner" == "$(id -u)" ]] || die "the Ray token file $file belongs to uid $owner, not to you: use a token file of your own"
    mode="$(stat -c %a "$file")"
    if (((8#$mode & 8#077) != 0)); then
        chmod go-rwx "$file"
        note "$file was readable by others (mode $mode); made it 0600"
    fi
    export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$file"
}

# check_python: Ray starts its workers with the interpreter that runs `ray start`; that one must
# have verl and dfpo (verl loads dfpo's plugin through the verl.plugins entry point).
check_python() {
    [[ -n "${RAY:-}" ]] && return 0
    "$python" - <<'PY' || die "'$python' cannot run Ray workers for DFPO (see above): activate the environment with the project installed (pip install -e <repo>) or set PYTHON to its interpreter"
import importlib.metadata, importlib.util, sys
missing = [name for name in ("ray", "verl", "dfpo") if importlib.util.find_spec(name) is None]
if missing:
    sys.exit(f"missing modules: {', '.join(missing)}")
if "dfpo" not in {ep.name for ep in importlib.metadata.entry_points(group="verl.plugins")}:
    sys.exit("dfpo's verl plugin (entry point verl.plugins: dfpo) is not installed")
PY
}

# gpu_node: this node has an NVIDIA GPU (nvidia-smi lists one) and is not set up for verl's CPU
# platform; a CPU node's logical GPUS_PER_NODE do not count.
gpu_node() {
    [[ "${VERL_PLATFORM:-}" != cpu ]] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

# check_sandbox: on a GPU node, the strong code-reward sandbox (or the explicit opt-in), before Ray.
check_sandbox() {
    if ! gpu_node; then
        note "$(hostname): no GPU (or VERL_PLATFORM=cpu): the code-reward sandbox is not required here"
        return 0
    fi
    local here
    here="$(hostname)"
    # reward.sandbox is found from the repository root too, where the project is not installed
    (cd "$(dirname "${BASH_SOURCE[0]}")/../.." && "$python" -m reward.sandbox --check --require-strong) >&2 ||
        die "node $here: the code-reward sandbox is not strong here (see above), so this GPU node does not join. Fix it on $here (bash scripts/install_system_deps.sh; unprivileged user namespaces), or export REWARD_SANDBOX_ALLOW_WEAK=1 on every node to run model-written code with the weak level"
    if [[ "${REWARD_SANDBOX_ALLOW_WEAK:-}" =~ ^(1|true|yes|on)$ ]]; then
        note "################ node $here: REWARD_SANDBOX_ALLOW_WEAK is set: code rewards may run in a WEAK sandbox here (see the warning above) ################"
    fi
    export REWARD_SANDBOX_REQUIRE_STRONG=1
}

# alive PID: the process exists and is not a zombie (an ended process its parent has not reaped).
alive() {
    local state
    state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
    [[ -n "$state" && "$state" != Z ]]
}

# running_pid: the recorded `ray start` process id if that process is still a ray start.
running_pid() {
    local pid
    [[ -f "$pid_file" ]] || return 1
    pid="$(<"$pid_file")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'ray.* start' || return 1
    printf '%s' "$pid"
}

# start ROLE ARGS...: `ray start ARGS... --block`, in the foreground with --block among the
# launcher's options, else in the background until the node is up.
start() {
    local role="$1" block=0 args=() extra=() pid
    shift
    args=("$@")
    if [[ ${#args[@]} -gt 0 && "${args[0]}" == --block ]]; then
        block=1
        args=("${args[@]:1}")
    fi
    mkdir -p "$state_dir"
    chmod 700 "$state_dir"
    if pid="$(running_pid)"; then
        die "Ray started by this launcher is already running here (pid $pid, $pid_file): run 'bash scripts/launch/ray_cluster.sh stop' first, or set DFPO_RAY_DIR for a second node on this machine"
    fi
    check_python
    check_sandbox
    # SLURM's GRES sets both for the step's GPUs; verl's workers refuse both at once ("Please don't set
    # ROCR_VISIBLE_DEVICES when HIP/CUDA_VISIBLE_DEVICES is set"), and HIP honours CUDA_VISIBLE_DEVICES
    if [[ -n "${CUDA_VISIBLE_DEVICES:-}" && -n "${ROCR_VISIBLE_DEVICES:-}" ]]; then
        note "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES=$ROCR_VISIBLE_DEVICES both set (SLURM sets both): Ray starts with CUDA_VISIBLE_DEVICES only"
        unset ROCR_VISIBLE_DEVICES
    fi
    if [[ -n "${GPUS_PER_NODE:-}" ]]; then
        [[ "$GPUS_PER_NODE" =~ ^[0-9]+$ ]] || die "GPUS_PER_NODE must be a number of GPUs, got '$GPUS_PER_NODE'"
        extra+=("--num-gpus=$GPUS_PER_NODE")
    fi
    # Ray counts the host's CPUs, not the ones this process may run on (ray-project/ray#28586): under
    # a scheduler that binds this step to fewer, Ray would schedule more work than the node has
    local cpus="${CPUS_PER_NODE:-$(nproc)}"
    [[ "$cpus" =~ ^[1-9][0-9]*$ ]] || die "CPUS_PER_NODE must be a number of CPUs, got '$cpus'"
    extra+=("--num-cpus=$cpus")
    [[ -z "$node_ip" ]] || extra+=("--node-ip-address=$node_ip")
    extra+=(--disable-usage-stats)
    if [[ "$role" == head ]]; then
        setup_auth 1
        extra=(--head "--port=$port" "--dashboard-host=${DFPO_RAY_DASHBOARD_HOST:-${node_ip:-0.0.0.0}}"
            "--dashboard-port=$dashboard_port" "${extra[@]}")
    else
        setup_auth 0
        extra=("--address=$role" "${extra[@]}")
    fi
    local cmd=("${ray[@]}" start "${extra[@]}" "${args[@]}" --block)
    remember_address "$role" "${args[@]}"
    if ((block)); then
        note "starting Ray ($([[ $role == head ]] && echo head || echo "worker of $role")) in the foreground: ${cmd[*]}"
        # in a session of its own, as in the background: what Ray leaves behind is found by it
        setsid "${cmd[@]}" &
        pid=$!
        echo "$pid" >"$pid_file"
        # a SIGTERM to this script (or `ray_cluster.sh stop`'s to ray start) stops the node; then what
        # is left of its session ends, and the address it left for ray.init() on this machine is forgotten
        trap 'kill -TERM "$pid" 2>/dev/null || true' TERM INT HUP
        local status=0
        while kill -0 "$pid" 2>/dev/null; do
            wait "$pid" && status=0 || status=$?
        done
        end_session "$pid"
        forget_address
        rm -f "$pid_file"
        exit "$status"
    fi
    : >"$log_file"
    chmod 600 "$log_file"
    setsid nohup "${cmd[@]}" >"$log_file" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$pid_file"
    local deadline=$((SECONDS + ${DFPO_RAY_START_TIMEOUT_S:-120}))
    until grep -q "Ray runtime started" "$log_file"; do
        if ! alive "$pid"; then
            rm -f "$pid_file"
            tail -n 30 "$log_file" >&2
            die "ray start exited before the node was up (log above: $log_file)"
        fi
        if ((SECONDS > deadline)); then
            tail -n 30 "$log_file" >&2
            stop_node
            die "the Ray node was not up within ${DFPO_RAY_START_TIMEOUT_S:-120} s (log above: $log_file); stopped it"
        fi
        sleep 1
    done
    if [[ "$role" == head ]]; then
        local shown_ip="${node_ip:-<this-node-ip>}"
        note "Ray head up (pid $pid, log $log_file, token file ${RAY_AUTH_TOKEN_PATH:-none})"
        cat <<EOF
Ray head at $shown_ip:$port, dashboard http://$shown_ip:$dashboard_port
  on every other node:  bash scripts/launch/ray_cluster.sh worker $shown_ip:$port
  then, on this node:   bash scripts/launch/ray_cluster.sh wait $shown_ip:$port <nodes>
  recipes and ray CLI:  export RAY_ADDRESS=$shown_ip:$port RAY_AUTH_MODE=token${RAY_AUTH_TOKEN_PATH:+ RAY_AUTH_TOKEN_PATH=$RAY_AUTH_TOKEN_PATH}
EOF
    else
        note "Ray worker up, joined $role (pid $pid, log $log_file)"
    fi
}

# live_nodes ADDRESS: the number of live nodes `ray status` lists (one "node_<id>" line each).
live_nodes() {
    local status
    status="$("${ray[@]}" status --address="$1" 2>/dev/null)" || {
        echo 0
        return 0
    }
    # the "Active:" block (indented lines up to the next header, "Pending:") holds one
    # " 1 node_<id>" line per live node; "Recent failures:" may list dead ones
    awk '/^Active:/ {active = 1; next} /^[^[:space:]]/ {active = 0} active && / node_/ {n++} END {print n + 0}' <<<"$status"
}

wait_nodes() {
    local address="$1" nodes="$2" live=0
    [[ "$nodes" =~ ^[1-9][0-9]*$ ]] || die "wait: the number of nodes must be a positive integer, got '$nodes'"
    setup_auth 0
    local deadline=$((SECONDS + ${DFPO_RAY_JOIN_TIMEOUT_S:-300}))
    while true; do
        live="$(live_nodes "$address")"
        ((live < nodes)) || break
        if ((SECONDS > deadline)); then
            die "only $live of $nodes nodes joined the Ray cluster at $address within ${DFPO_RAY_JOIN_TIMEOUT_S:-300} s; see each node's log (\$DFPO_RAY_DIR/ray_start.log, default /tmp/dfpo-ray-\$(id -u)/ray_start.log)"
        fi
        sleep "${DFPO_RAY_POLL_S:-5}"
    done
    note "$live node(s) in the Ray cluster at $address"
}

# remember_address ROLE [ray start options...]: where `ray start` will write the address that a
# plain ray.init() on this machine then joins (<temp dir>/ray_current_cluster, --temp-dir or
# $RAY_TMPDIR/ray or /tmp/ray), and which address it will be (the head's port, the head a worker
# joins); Ray removes that file only in `ray stop`, never when a node ends otherwise.
remember_address() {
    local role="$1" temp_dir="${RAY_TMPDIR:-/tmp}/ray" arg
    shift
    for arg in "$@"; do
        [[ "$arg" != --temp-dir=* ]] || temp_dir="${arg#--temp-dir=}"
    done
    if [[ "$role" == head ]]; then
        printf '%s\n%s\n' "$temp_dir/ray_current_cluster" "*:$port" >"$state_dir/address"
    else
        printf '%s\n%s\n' "$temp_dir/ray_current_cluster" "$role" >"$state_dir/address"
    fi
}

# forget_address: once this node's Ray has stopped, remove the address file it left if it still names
# this node's cluster: else a later plain ray.init() on this machine (the next job's driver, a test)
# would try to join the stopped cluster instead of starting its own
forget_address() {
    local file pattern content
    [[ -f "$state_dir/address" ]] || return 0
    { read -r file && read -r pattern; } <"$state_dir/address" || true
    rm -f "$state_dir/address"
    [[ -n "${file:-}" && -f "$file" ]] || return 0
    content="$(<"$file")"
    # shellcheck disable=SC2053  # the pattern is a glob on purpose (the head's address: any host, its port)
    if [[ "$content" == $pattern ]]; then
        rm -f "$file"
        note "removed $file (it named the stopped cluster $content)"
    fi
}

# end_session PID: anything left in the session the launcher gave `ray start` (its process group id
# is its pid), such as the dashboard's forkserver, which outlives a stopped node
end_session() {
    local left
    left="$(pgrep -g "$1" 2>/dev/null | tr '\n' ' ' || true)"
    if [[ -n "${left// /}" ]]; then
        # shellcheck disable=SC2086  # a list of process ids
        kill -KILL $left 2>/dev/null || true
    fi
}

# stop_node: SIGTERM to the recorded `ray start --block` (Ray then ends this node's raylet, GCS,
# dashboard and workers itself), SIGKILL to its process group past DFPO_RAY_STOP_TIMEOUT_S.
stop_node() {
    local pid deadline
    if ! pid="$(running_pid)"; then
        rm -f "$pid_file"
        note "no Ray started by this launcher is running here ($pid_file)"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + ${DFPO_RAY_STOP_TIMEOUT_S:-90}))
    while alive "$pid" && ((SECONDS < deadline)); do
        sleep 1
    done
    if alive "$pid"; then
        note "Ray (pid $pid) did not stop within ${DFPO_RAY_STOP_TIMEOUT_S:-90} s; killing its process group"
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    end_session "$pid"
    rm -f "$pid_file"
    forget_address
    note "stopped Ray (pid $pid)"
}

[[ $# -ge 1 ]] || usage
command="$1"
shift
case "$command" in
    head)
        start head "$@" ;;
    worker)
        [[ $# -ge 1 && "$1" == *:* ]] || die "worker needs the head's address: bash scripts/launch/ray_cluster.sh worker <head-ip>:<port>"
        address="$1"
        shift
        start "$address" "$@" ;;
    wait)
        [[ $# -eq 2 ]] || die "usage: bash scripts/launch/ray_cluster.sh wait <head-ip>:<port> <nodes>"
        wait_nodes "$1" "$2" ;;
    stop)
        [[ $# -eq 0 ]] || die "stop takes no arguments (it stops the Ray recorded in \$DFPO_RAY_DIR, default /tmp/dfpo-ray-\$(id -u))"
        stop_node ;;
    check)
        [[ $# -eq 0 ]] || die "check takes no arguments"
        check_sandbox ;;
    token)
        [[ $# -eq 0 ]] || die "token takes no arguments"
        setup_auth 1
        echo "${RAY_AUTH_TOKEN_PATH:-}" ;;
    *)
        usage ;;
esac
