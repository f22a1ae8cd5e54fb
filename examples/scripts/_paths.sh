# Shared by the example scripts (sourced after they `cd` to the repository root, never run). One rule for paths: a
# relative path in any variable is read from the repository root, and every path a script hands on is absolute, so a
# `ray job submit` (which runs the job in its own copy of the working dir, without what .gitignore leaves out: data/,
# checkpoints/) and a script run from any folder read and write the same files.
copo_abspath() {
  case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac
}

# Where prepare_data.sh writes the prepared data and the training and evaluation scripts read it.
DATA_DIR=$(copo_abspath "${DATA_DIR:-data}")

copo_local() {  # copo_local "a,b,...": each entry that is a local file or folder made absolute; hub names stay as given
  local out="" entry
  local IFS=,
  for entry in $1; do
    [ -e "$entry" ] && entry=$(copo_abspath "$entry")
    out="${out:+$out,}$entry"
  done
  printf '%s\n' "$out"
}

copo_switch() {  # copo_switch NAME VALUE: succeeds for an on value (1, true, yes, on), fails for an off one (unset, empty,
  # 0, false, no, off), refuses anything else in one line. A bare [ -n "$VALUE" ] took WITH_GSM8K=0 for on.
  case "$(printf '%s' "$2" | tr '[:upper:]' '[:lower:]')" in
    1 | true | yes | on) return 0 ;;
    "" | 0 | false | no | off) return 1 ;;
    *) echo "error: $1=$2: expected 1 (on) or 0 (off)" >&2; exit 2 ;;
  esac
}

copo_require_python() {  # the scripts run `python3` and `ray` from PATH: the environment must be activated first
  python3 -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("openrlhf_copo", "openrlhf", "ray"))))' \
    2>/dev/null || {
    echo "error: python3 on PATH ($(command -v python3 || echo none)) cannot import openrlhf_copo, openrlhf and ray:" \
      "activate the environment first (source .venv/bin/activate)" >&2
    exit 2
  }
}

copo_run() {  # copo_run COMMAND...: run it, or with COPO_PRINT_ARGS=1 print it as one line to paste instead
  if copo_switch COPO_PRINT_ARGS "${COPO_PRINT_ARGS:-0}"; then
    local word line=""
    for word in "$@"; do
      [[ $word =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]] || word=${word@Q}  # single-quoted where the shell needs it
      line+="${line:+ }$word"
    done
    printf '%s\n' "$line"
    return 0
  fi
  "$@"
}

copo_require_python
