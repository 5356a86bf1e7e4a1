"""Check recipe/recipe.yaml and the sdist without conda channels, as far as that goes.

1. rattler-build renders the recipe (no solve) for linux-64, osx-64,
   osx-arm64 (cross-compiled from osx-64, as conda-forge builds it) and
   win-64 with the global pinning's values in .ci/recipe-variants.yaml: every
   Python from python_min up is built and the rest skipped, Windows too.
2. The rendered recipe is held to pyproject.toml (build requirements, runtime
   dependencies, test extra, python_min, license) and to the conda-forge
   linter's rules that can be read from the recipe alone.
3. The sdist holds what the build and the tests need and nothing else.
4. The recipe's build script runs on the unpacked sdist as rattler-build runs
   it: in a clean host environment (a virtual environment with the recipe's
   host requirements from PyPI) with the variables the compiler activation
   sets. The files it adds to that environment, which are what the conda
   package would hold, are copied into a second clean environment with the
   run and test requirements, where the recipe's tests run in a folder that
   holds only the files they list.

Usage: python .ci/recipe_check.py SDIST WORKDIR
"""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import venv
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipe" / "recipe.yaml"
VARIANTS = ROOT / ".ci" / "recipe-variants.yaml"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The global pinning's choice for a package that a recipe lists unpinned.
PINS = {key: values[0] for key, values in yaml.safe_load(VARIANTS.read_text()).items()
        if key != "zip_keys" and isinstance(values[0], str)}

# Top-level entries of the sdist: the build's files, the tests and the
# benchmark scripts they run, the license and the readme the metadata names.
SDIST_TOP = {"PKG-INFO", "LICENSE", "README.rst", "pyproject.toml", "meson.build", "meson.options",
             "csrc", "mizu", "tests", "benchmarks"}
SDIST_NEVER = {".git", "build", "dist", "__pycache__", "results", ".hypothesis", ".pytest_cache"}
SDIST_NEVER_SUFFIXES = (".so", ".o", ".pyc", ".json", ".whl", ".tar.gz")


def fail(message):
    sys.exit(f"recipe check: {message}")


def render(target, build):
    """rattler-build's --render-only output for one platform: one entry per variant it would build."""
    code = ("import sys\nfrom rattler_build.cli_api import build_recipes\n"
            "build_recipes([sys.argv[1]], render_only=True, target_platform=sys.argv[2], build_platform=sys.argv[3], "
            "host_platform=sys.argv[2], variant_config=[sys.argv[4]], ignore_recipe_variants=True)")
    out = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code,
                          str(RECIPE), target, build, str(VARIANTS)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def spec_name(spec):
    return spec.split()[0]


def pip_requirement(spec, pins=PINS):
    """A conda match spec of the recipe as a pip requirement; an unpinned one takes the global pin, if any."""
    name, *version = spec.split(maxsplit=1)
    if version:
        return name + version[0].replace(" ", "")
    return f"{name}=={pins[name]}.*" if name in pins else name


def recipe_tests(recipe):
    """The recipe's python test (imports, pip check) and its script test."""
    tests = recipe["tests"]
    return next(t["python"] for t in tests if "python" in t), next(t for t in tests if "script" in t)


def check_against_pyproject(raw, variants):
    recipe = variants["linux-64"][0]["recipe"]
    host = recipe["requirements"]["host"]
    run = recipe["requirements"]["run"]
    host_names = [canonicalize_name(spec_name(s)) for s in host]
    for requirement in map(Requirement, PYPROJECT["build-system"]["requires"]):
        name = canonicalize_name(requirement.name)
        if name not in host_names:
            fail(f"pyproject.toml builds with {requirement}, which the recipe's host requirements lack")
        spec = host[host_names.index(name)]
        if name in PINS:
            if spec != name:
                fail(f"host pins {spec}: conda-forge leaves {name} to the global pinning")
            if not requirement.specifier.contains(f"{PINS[name]}.0"):
                fail(f"the global pinning's {name} {PINS[name]} does not meet pyproject.toml's {requirement}")
        elif Requirement(pip_requirement(spec, {})).specifier != requirement.specifier:
            fail(f"host has {spec} where pyproject.toml requires {requirement}")
    for section, wanted in (("run", PYPROJECT["project"]["dependencies"]),
                            ("tests", PYPROJECT["project"]["optional-dependencies"]["test"])):
        specs = run if section == "run" else recipe_tests(recipe)[1]["requirements"]["run"]
        have = {Requirement(pip_requirement(s, {})) for s in specs if spec_name(s) != "python"}
        if have != set(map(Requirement, wanted)):
            fail(f"the recipe's {section} requirements {sorted(map(str, have))} differ from pyproject.toml's "
                 f"{sorted(wanted)}")
    floor = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    if raw["context"]["python_min"] != floor:
        fail(f"python_min is {raw['context']['python_min']}, pyproject.toml's requires-python {floor}")
    if recipe["about"]["license"] != PYPROJECT["project"]["license"]:
        fail("the recipe's license is not pyproject.toml's")
    if recipe["about"]["license_file"] != PYPROJECT["project"]["license-files"]:
        fail("the recipe's license_file is not pyproject.toml's license-files")


def check_conda_forge_rules(raw, text, variants):
    """The linter's rules (conda-smithy's R-numbers) that the recipe alone decides."""
    if not text.startswith("# yaml-language-server: $schema="):
        fail("the recipe opens with the schema header")
    if not text.endswith("\n") or text.endswith("\n\n"):
        fail("the recipe ends with exactly one newline (R-011, R-012)")
    if list(raw["requirements"]) != ["build", "host", "run"]:
        fail("requirement sections come in the order build, host, run (R-009)")
    for key in ("homepage", "license", "license_file", "summary"):
        if not raw["about"].get(key):
            fail(f"about.{key} is required (R-002, R-013)")
    if "number" not in raw["build"]:
        fail("build.number is required (R-008)")
    if not raw.get("tests"):
        fail("the recipe needs tests (R-005)")
    if any((RECIPE.parent / name).exists() for name in ("meta.yaml", "bld.bat")):
        fail("a v1 recipe has no meta.yaml beside it and uses build.bat, not bld.bat (R-051, R1-003)")
    for platform, rendered in variants.items():
        for variant in rendered:
            requirements = variant["recipe"]["requirements"]
            build = [spec_name(s) for s in requirements["build"]]
            stdlib = "sysroot" if platform.startswith("linux") else "macosx_deployment_target"
            if not any(name.startswith(stdlib + "_") for name in build):
                fail(f"{platform}: the compilers come with ${{{{ stdlib('c') }}}} (R-033)")
            for section in ("host", "run"):
                if "python" not in requirements[section]:
                    fail(f"{platform}: python, unpinned, belongs in {section} (R-023, R-024)")
            if "meson-python" not in [spec_name(s) for s in requirements["host"]]:
                fail("the build backend, meson-python, belongs in host (R-046)")


def check_variants(variants):
    floor = tuple(int(p) for p in PYPROJECT["project"]["requires-python"].removeprefix(">=").split("."))
    pythons = [p for p in yaml.safe_load(VARIANTS.read_text())["python"]]
    expected = sorted(p for p in pythons if tuple(int(x) for x in p.split(".")[:2]) >= floor)
    for platform, rendered in variants.items():
        built = sorted(v["build_configuration"]["variant"]["python"] for v in rendered)
        if platform.startswith("win"):
            if built:
                fail(f"win-64 must be skipped, but renders {built}")
        elif built != expected:
            fail(f"{platform} builds for {built}, expected {expected}")
    cross = variants["osx-arm64"][0]["recipe"]["requirements"]["build"]
    if "cross-python_osx-arm64" not in cross:
        fail("osx-arm64, cross-compiled from osx-64, needs cross-python in build")


def check_sdist(sdist):
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        info = tar.extractfile(next(n for n in names if n.endswith("/PKG-INFO"))).read().decode()
    top = names[0].split("/")[0]
    files = {name.removeprefix(top + "/") for name in names if name != top}
    for name in sorted(files):
        parts = name.split("/")
        if parts[0] not in SDIST_TOP or SDIST_NEVER.intersection(parts) or name.endswith(SDIST_NEVER_SUFFIXES):
            fail(f"the sdist holds {name}, which neither the build nor the tests need (.gitattributes leaves "
                 "such paths out)")
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "LICENSE", "README.rst", "mizu", "csrc", "tests",
                              "benchmarks/*.py"], capture_output=True, text=True, check=True).stdout.split()
    # What .gitattributes leaves out (export-ignore) is not expected.
    attributes = subprocess.run(["git", "-C", str(ROOT), "check-attr", "--stdin", "export-ignore"],
                                input="\n".join(tracked), capture_output=True, text=True, check=True).stdout
    ignored = {line.split(": ")[0] for line in attributes.splitlines() if line.endswith(": export-ignore: set")}
    missing = sorted(set(tracked) - ignored - files)
    if missing:
        fail(f"the sdist lacks {missing}")
    for line in ("License-Expression: BSD-3-Clause", "License-File: LICENSE"):
        if line not in info.splitlines():
            fail(f"the sdist's PKG-INFO lacks '{line}'")
    print(f"sdist: {len(files)} files, tests, benchmark scripts and LICENSE included, nothing else")


def site_packages(env):
    return Path(subprocess.run([env / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())


def pip_install(env, requirements):
    print("+ pip install " + " ".join(requirements), flush=True)
    subprocess.run([env / "bin" / "python", "-m", "pip", "install", "--quiet", *requirements], check=True)


def replay(sdist, work, variant):
    recipe = variant["recipe"]
    work.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    src = next(work.iterdir())
    prefix, test_prefix = work / "host", work / "test"
    venv.create(prefix, with_pip=True)
    pip_install(prefix, [pip_requirement(s) for s in recipe["requirements"]["host"]
                         if spec_name(s) not in ("python", "pip")])
    before = {p for p in prefix.rglob("*")}
    env = dict(os.environ,
               PATH=f"{prefix / 'bin'}{os.pathsep}{os.environ['PATH']}",
               PREFIX=str(prefix), BUILD_PREFIX=str(prefix), PYTHON=str(prefix / "bin" / "python"),
               SRC_DIR=str(src), RECIPE_DIR=str(RECIPE.parent), CPU_COUNT=os.environ.get("CPU_COUNT", "2"),
               PKG_NAME=recipe["package"]["name"], PKG_VERSION=recipe["package"]["version"],
               CONDA_BUILD="1", CONDA_BUILD_CROSS_COMPILATION="0",
               target_platform="linux-64", build_platform="linux-64",
               MESON_ARGS=f"-Dbuildtype=release --prefix={prefix} -Dlibdir=lib")
    env.pop("VIRTUAL_ENV", None)
    log = work / "build.log"
    print(f"+ bash recipe/build.sh (in {src}, output in {log})", flush=True)
    with open(log, "w") as out:
        built = subprocess.run(["bash", RECIPE.parent / "build.sh"], cwd=src, env=env, stdout=out,
                               stderr=subprocess.STDOUT)
    if built.returncode:
        print("".join(log.read_text().splitlines(keepends=True)[-60:]))
        fail(f"recipe/build.sh exited with {built.returncode}")

    # The package: what the build added to the host prefix.
    added = [p for p in prefix.rglob("*") if p not in before and p.is_file() and "__pycache__" not in p.parts]
    venv.create(test_prefix, with_pip=True)
    host_site, test_site = site_packages(prefix), site_packages(test_prefix)
    for path in added:
        if not path.is_relative_to(host_site):
            fail(f"the build installed {path} outside site-packages")
        target = test_site / path.relative_to(host_site)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    print(f"package: {len(added)} files", flush=True)

    run = [pip_requirement(s, {}) for s in recipe["requirements"]["run"] if spec_name(s) != "python"]
    python_test, script_test = recipe_tests(recipe)
    pip_install(test_prefix, run + [pip_requirement(s, {}) for s in script_test["requirements"]["run"]])
    test_env = dict(os.environ, PATH=f"{test_prefix / 'bin'}{os.pathsep}{os.environ['PATH']}")
    test_env.pop("VIRTUAL_ENV", None)
    python = test_prefix / "bin" / "python"
    for module in python_test["imports"]:
        print(f"+ python -c 'import {module}'", flush=True)
        subprocess.run([python, "-c", f"import {module}"], cwd=work, env=test_env, check=True)
    if python_test.get("pip_check", True):
        print("+ pip check", flush=True)
        subprocess.run([python, "-m", "pip", "check"], cwd=work, env=test_env, check=True)
    test_dir = work / "test-files"
    test_dir.mkdir()
    for name in script_test["files"]["source"]:
        source = src / name
        if source.is_dir():
            shutil.copytree(source, test_dir / name)
        else:
            shutil.copy2(source, test_dir / name)
    script = script_test["script"]
    print(f"+ {script}", flush=True)
    subprocess.run(["bash", "-e", "-c", script], cwd=test_dir, env=test_env, check=True)


def main(argv):
    sdist, work = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    text = RECIPE.read_text()
    raw = yaml.safe_load(text)
    variants = {target: render(target, build) for target, build in
                (("linux-64", "linux-64"), ("osx-64", "osx-64"), ("osx-arm64", "osx-64"), ("win-64", "win-64"))}
    check_variants(variants)
    check_against_pyproject(raw, variants)
    check_conda_forge_rules(raw, text, variants)
    print("recipe: renders for " + ", ".join(f"{p} ({len(v)} variants)" for p, v in variants.items())
          + "; agrees with pyproject.toml and the linter's rules checked here")
    check_sdist(sdist)
    python = "{}.{}.".format(*sys.version_info[:2])
    replay(sdist, work, next(v for v in variants["linux-64"]
                             if v["build_configuration"]["variant"]["python"].startswith(python)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
