#!/usr/bin/env bash
# Build the sdist and the wheel, install the wheel (with its declared dependencies only) in a fresh
# virtualenv, and smoke-test it there: what a user gets from `pip install rewardkit`.
# Usage: .ci/check_wheel.sh [DEV_PYTHON]   (run from the repository root; `make wheel-check` does)
set -euo pipefail

DEV_PYTHON=${1:-.venv/bin/python}  # has `build` and setuptools (the dev extra)
CHECK_VENV=.venv-wheelcheck
DIST=dist

rm -rf "$DIST" "$CHECK_VENV"
mkdir -p "$DIST"
# The wheel is built from the sdist (so the sdist must be complete, and no stale build/ leaks in);
# --no-isolation: with the dev venv's setuptools instead of downloading one per run.
"$DEV_PYTHON" -m build --no-isolation --outdir "$DIST" . >"$DIST/build.log" 2>&1 ||
  { cat "$DIST/build.log"; exit 1; }
rm -f "$DIST/build.log"
wheel=$(ls "$DIST"/rewardkit-*.whl)
sdist=$(ls "$DIST"/rewardkit-*.tar.gz)

# Every module and py.typed are in both archives.
"$DEV_PYTHON" - "$wheel" "$sdist" <<'PY'
import pathlib, sys, tarfile, zipfile

wheel, sdist = sys.argv[1:]
src = pathlib.Path("src")
want = {p.relative_to(src).as_posix() for p in (src / "rewardkit").rglob("*")
        if p.is_file() and p.suffix != ".pyc" and "__pycache__" not in p.parts}
assert "rewardkit/py.typed" in want
in_wheel = set(zipfile.ZipFile(wheel).namelist())
missing = sorted(want - in_wheel)
assert not missing, f"missing from the wheel: {missing}"
with tarfile.open(sdist) as t:
    root = t.getnames()[0].split("/")[0]
    in_sdist = {n.removeprefix(f"{root}/src/") for n in t.getnames()}
    names = {n.removeprefix(f"{root}/") for n in t.getnames()}
missing = sorted(want - in_sdist) + sorted({"pyproject.toml", "README.md", "LICENSE"} - names)
assert not missing, f"missing from the sdist: {missing}"
print(f"wheel-check: {len(want)} package files in {pathlib.Path(wheel).name} and {pathlib.Path(sdist).name}")
PY

# A clean venv: nothing from the dev venv, only the wheel and the dependencies it declares.
base_python=$("$DEV_PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable))')
"$base_python" -m venv "$CHECK_VENV"
"$CHECK_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel"

cd "$CHECK_VENV"  # away from ./src, so that only the installed package can be imported
bin=$PWD/bin
"$bin/python" - <<'PY'
import sys

import rewardkit

assert "/.venv-wheelcheck/" in rewardkit.__file__, rewardkit.__file__
heavy = sorted({"torch", "transformers", "ray", "numpy"} & set(sys.modules))
assert not heavy, f"import rewardkit loaded {heavy}"
res = rewardkit.compute([
    {"data_source": "openai/gsm8k", "response": "16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\nThe answer is 18.",
     "ground_truth": "18"},
    {"data_source": "openai/gsm8k", "response": "The answer is 7.", "ground_truth": "3"},
])
got = [(r.status, r.score) for r in res.samples]
assert got == [("ok", 1.0), ("ok", 0.0)], got
print(f"wheel-check: import and compute ok ({rewardkit.__file__})")
PY
"$bin/rewardkit" --help >/dev/null
"$bin/rewardkit" list-plugins --json >third_party.json  # nothing but the wheel: no third-party plugins
"$bin/rewardkit" list-plugins --json --all | "$bin/python" -c '
import json, sys
from importlib.metadata import entry_points

assert json.load(open("third_party.json")) == [], open("third_party.json").read()
plugins = json.load(sys.stdin)
assert plugins and all(p["builtin"] and p["error"] is None for p in plugins), plugins
assert any("gsm8k" in p["registered"].get("scorers", []) for p in plugins), plugins
verl = {e.name: e.value for e in entry_points(group="verl.plugins")}
assert verl == {"rewardkit": "rewardkit.integrations.verl_plugin"}, verl
print(f"wheel-check: rewardkit --help, list-plugins --json and entry points ok ({len(plugins)} built-in plugins)")
'
cd - >/dev/null
rm -rf "$CHECK_VENV"
