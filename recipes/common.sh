# shellcheck shell=bash
# DFPO recipes: what every run script in recipes/ shares. A run script is one line,
#
#     dfpo_launch dfpo_min_replace qwen3_32b "$@"
#
# which runs `python -m dfpo.launch.recipe METHOD MODEL [hydra overrides...]` (dfpo/launch/recipe.py): the method
# is dfpo/config/method/METHOD.yaml, the model dfpo/config/base_model/MODEL.yaml (every value of the
# recipe lives in those files and in dfpo/config/recipe_defaults.yaml), each environment knob that
# is set (docs/recipes.md, "Knobs") becomes one override of its key, and extra arguments are Hydra
# overrides appended last. The launcher then becomes `python -m dfpo.main ...` (exec: a scheduler's
# SIGTERM reaches the driver, whose exit status is the recipe's).
#
# DRY_RUN=1 prints that command instead of running it. dfpo.dry_run=true (an override) runs every
# check of the composed config before Ray (dfpo/launch/preflight.py) and prints it, starting nothing.

# The launcher's install check (Python source): exit 0 when the interpreter has this project's
# distribution (dfpo-verl) and finds the dfpo and verl packages (without importing them).
DFPO_INSTALL_CHECK='import importlib.metadata as m, importlib.util as u, sys; m.distribution("dfpo-verl"); sys.exit(u.find_spec("dfpo") is None or u.find_spec("verl") is None)'
DFPO_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

dfpo_die() {
    echo "dfpo recipe error: $*" >&2
    exit 1
}

# dfpo_check_int NAME VALUE [NAME VALUE...]: every VALUE must be a positive integer (NAME is the knob).
dfpo_check_int() {
    while [[ $# -ge 2 ]]; do
        [[ "$2" =~ ^[1-9][0-9]*$ ]] || dfpo_die "$1 must be a positive integer, got '$2'"
        shift 2
    done
}

# dfpo_launch METHOD MODEL [HYDRA_OVERRIDE...]: run (or with DRY_RUN=1 print) one training run.
dfpo_launch() {
    local python="${PYTHON:-python3}"
    "$python" -c "$DFPO_INSTALL_CHECK" 2>/dev/null ||
        dfpo_die "$python does not have this project and verl installed: install the project on every node (pip install -e $DFPO_REPO_ROOT) or set PYTHON to the environment's interpreter"
    PYTHON="$python" exec "$python" -m dfpo.launch.recipe --via "${0#"$DFPO_REPO_ROOT"/}" "$@"
}
