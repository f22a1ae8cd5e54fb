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
