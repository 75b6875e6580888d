# shellcheck shell=bash
# torchft_extension CACHE_DIR WORK_DIR: sets TORCHFT_SO to torchft 0.2.0's Rust extension
# (torchft/_torchft*.so from its pinned cp311 wheel on PyPI, kept in CACHE_DIR/torchft-0.2.0;
# it loads without PyTorch). Exits 77 with one "SKIPPED: ..." line when python3 is not 3.11
# or PyPI cannot be reached; 1 when the wheel lacks the extension or it does not load.
TORCHFT_VERSION=0.2.0  # (also the transcript's title below)
torchft_extension() {
  local cache=$1 work=$2 so_dir
  [[ $(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) == 3.11 ]] || {
    echo "SKIPPED: torchft $TORCHFT_VERSION's wheel is for CPython 3.11; python3 here is $(python3 --version 2>&1)"
    exit 77
  }
  so_dir=$cache/torchft-$TORCHFT_VERSION
  TORCHFT_SO=$(ls "$so_dir"/_torchft*.so 2>/dev/null | head -n 1)
  if [[ -z $TORCHFT_SO ]]; then
    mkdir -p "$work/wheel" "$so_dir" || { echo "FAIL: cannot make $so_dir"; exit 1; }
    timeout 300 python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$work/wheel" \
      "torchft==$TORCHFT_VERSION" >"$work/pip.log" 2>&1 || {
      echo "SKIPPED: PyPI unreachable for torchft==$TORCHFT_VERSION: $(tail -n 1 "$work/pip.log")"
      exit 77
    }
    python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
name = next(n for n in z.namelist() if n.startswith("torchft/_torchft") and n.endswith(".so"))
open(sys.argv[2] + "/" + name.split("/")[-1], "wb").write(z.read(name))' "$work"/wheel/torchft-*.whl "$so_dir" || {
      echo "FAIL: no torchft/_torchft*.so in $(ls "$work"/wheel)"
      exit 1
    }
    TORCHFT_SO=$(ls "$so_dir"/_torchft*.so | head -n 1)
  fi
  python3 -c "import importlib.util as u; s = u.spec_from_file_location('_torchft', '$TORCHFT_SO'); m = u.module_from_spec(s); s.loader.exec_module(m); m.LighthouseClient" || {
    echo "FAIL: torchft's extension $TORCHFT_SO does not load"
    exit 1
  }
}
