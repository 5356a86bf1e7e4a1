"""The R side of mizu's R workers: building its R package on first use.

R workers are ``Rscript`` processes running an R package, also named
``mizu``, whose C++ compiles the same core sources (``csrc/``) as this
package's extension modules. The R package's sources ship inside mizu
(``mizu/_r/rpackage``, with the core under ``rpackage/src/core`` in an
installed mizu). `ensure_installed` builds them once with ``R CMD INSTALL``
into a private R library, one per R version and mizu version, and
rebuilds only when the sources differ from those the library was built
from. Processes that race to build take turns on a lock, and each build
goes to a staging library that replaces the old one in one rename.

To build ahead of time, for instance in a container image::

    python -m mizu._r.package

To write the R package's sources as its build sees them, tests included,
for ``R CMD build`` and ``R CMD check`` (``.ci/r-check`` runs both, from a
checkout)::

    python -m mizu._r.package --source DIR
"""

import argparse
import contextlib
import fcntl
import functools
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

__all__ = ["RPackageBuildError", "ensure_installed", "find_rscript", "library_dir"]

_MIZU = pathlib.Path(__file__).resolve().parents[1]
_SOURCES = pathlib.Path(__file__).resolve().parent / "rpackage"
_PACKAGE = "mizu"
_STAMP_FIELD = "MizuBuild"
_INSTALL_R = ("install R: on Debian or Ubuntu `apt-get install r-base-core r-base-dev`, on macOS `brew install r`, "
              "elsewhere see https://cloud.r-project.org")


class RPackageBuildError(RuntimeError):
    """``R CMD INSTALL`` failed to build mizu's R package; the message ends with R's output."""


def find_rscript(rscript=None):
    """find_rscript(rscript=None)

    The ``Rscript`` executable that R workers run: `rscript` if given, else
    the first on ``PATH``.

    Parameters
    ----------
    rscript : os.PathLike or str, optional
        The path of an ``Rscript``.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    FileNotFoundError
        `rscript` is not an executable file; or, without it, R is not
        installed, or not on ``PATH``: the message says how to install it.
    """
    if rscript is not None:
        path = pathlib.Path(os.path.expanduser(rscript))
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise FileNotFoundError(f"rscript={os.fspath(rscript)!r} is not an executable file: pass the path of R's "
                                    "Rscript, or None for the first on PATH")
        return path
    found = shutil.which("Rscript")
    if found is None:
        raise FileNotFoundError(f"mizu's R workers run Rscript, which is not on PATH: {_INSTALL_R}; or put the "
                                "directory that holds Rscript on PATH")
    return pathlib.Path(found)


@functools.lru_cache(maxsize=None)
def _r_version(rscript):
    out = subprocess.run([str(rscript), "--version"], capture_output=True, text=True)
    match = re.search(r"version (\d+\.\d+\.\d+)", out.stdout + out.stderr)
    if match is None:
        raise RuntimeError(f"cannot tell the version of R from `{rscript} --version`: {out.stdout + out.stderr!r}")
    return match[1]


def library_dir(rscript=None):
    """library_dir(rscript=None)

    The R library that holds mizu's R package for this R (`rscript`'s, by
    default the first ``Rscript`` on ``PATH``'s) and this mizu.

    ``$MIZU_R_LIBRARY`` if set, else
    ``${XDG_CACHE_HOME:-~/.cache}/mizu/R-<R version>-mizu-<mizu version>``.
    R workers find the package there through ``R_LIBS``.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    FileNotFoundError
        R is not installed (its version names the default directory), or
        `rscript` is not an executable file.
    """
    override = os.environ.get("MIZU_R_LIBRARY")
    if override:
        return pathlib.Path(override)
    # Imported here: .ci/r-check runs this file as a script, from a checkout where mizu cannot be imported.
    from mizu._version import __version__

    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(cache) / "mizu" / f"R-{_r_version(find_rscript(rscript))}-mizu-{__version__}"


def _core_dir():
    """The C++ core the R package compiles: the checkout's csrc/ when run from a source tree, else the installed copy."""
    checkout = _MIZU.parent / "csrc"
    if (checkout / "wire.hpp").is_file() and (_MIZU.parent / "meson.build").is_file():
        return checkout
    installed = _SOURCES / "src" / "core"
    if (installed / "wire.hpp").is_file():
        return installed
    raise FileNotFoundError(f"mizu's C++ core is missing: neither {installed} (an installed mizu) nor {checkout} (a "
                            "source checkout) holds it; reinstall mizu")


def _source_files(tests=False):
    """(path in the R package, file) for every file the build uses, and the tests if asked, in a fixed order."""
    # The core comes from _core_dir(), and the R tests run from the sources.
    skipped = {("src", "core")} if tests else {("src", "core"), ("tests",)}
    files = [(path.relative_to(_SOURCES).as_posix(), path) for path in sorted(_SOURCES.rglob("*"))
             if path.is_file() and path.suffix not in (".o", ".so", ".pyc")
             and not any(path.relative_to(_SOURCES).parts[:len(skip)] == skip for skip in skipped)]
    core = _core_dir()
    files += [(f"src/core/{path.name}", path) for path in sorted(core.iterdir())
              if path.is_file() and path.suffix in (".hpp", ".cpp")]
    return files


def _build_stamp(rscript, files):
    digest = hashlib.sha256(_r_version(rscript).encode())
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _installed_stamp(library):
    try:
        description = (library / _PACKAGE / "DESCRIPTION").read_text(encoding="utf-8")
    except OSError:
        return None
    # R may fold the field onto the next line.
    match = re.search(rf"^{_STAMP_FIELD}:\s*([0-9a-f]+)", description, re.MULTILINE)
    return match[1] if match else None


@contextlib.contextmanager
def _locked(path):
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# What a shell, make or the compiler says when the toolchain or R's headers are missing.
_NO_TOOLCHAIN = re.compile(r"\b(?:g\+\+|c\+\+|clang\+\+|make)(?:: (?:command )?not found|: No such file or directory)"
                           r"|R\.h: No such file|\bError 127\b")


def _explain(output):
    tail = "\n".join(output.splitlines()[-40:])
    if _NO_TOOLCHAIN.search(output):
        hint = ("no C++ compiler, make or R headers were found: on Debian or Ubuntu `apt-get install r-base-dev` "
                "(or at least g++ and make), on macOS `xcode-select --install`")
    else:
        hint = "R's output ends"
    return f"building mizu's R package failed; {hint}:\n{tail}"


def _write_sources(source, files):
    for name, path in files:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, source / name)


def _build(rscript, library, stamp, files):
    r_command = rscript.with_name("R")
    if not r_command.exists():
        r_command = pathlib.Path(shutil.which("R") or "R")
    with tempfile.TemporaryDirectory(prefix=".mizu-build-", dir=library) as tmp:
        tmp = pathlib.Path(tmp)
        source = tmp / "source" / _PACKAGE
        _write_sources(source, files)
        description = source / "DESCRIPTION"
        description.write_text(description.read_text(encoding="utf-8").rstrip("\n") + f"\n{_STAMP_FIELD}: {stamp}\n",
                                encoding="utf-8")
        staging = tmp / "library"
        staging.mkdir()
        env = dict(os.environ)
        env.setdefault("MAKEFLAGS", f"-j{min(os.cpu_count() or 1, 4)}")
        try:
            done = subprocess.run([str(r_command), "CMD", "INSTALL", "--no-docs", "--no-html", "--no-multiarch",
                                   "-l", str(staging), str(source)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        except OSError as exc:
            raise RPackageBuildError(f"building mizu's R package failed: cannot run {r_command} ({exc}); "
                                     f"{_INSTALL_R}") from exc
        if done.returncode != 0:
            raise RPackageBuildError(_explain(done.stdout))
        target = library / _PACKAGE
        if target.exists():
            target.rename(tmp / "replaced")
        (staging / _PACKAGE).rename(target)


def ensure_installed(verbose=True, rscript=None):
    """ensure_installed(verbose=True, rscript=None)

    Build mizu's R package into `library_dir` unless it is there already,
    built from the same sources for the same R.

    Safe to call from several processes at once: one builds while the
    others wait for it.

    Parameters
    ----------
    verbose : bool, optional
        Say on stderr, once, that a build is starting (it takes a minute).
    rscript : os.PathLike or str, optional
        The ``Rscript`` of the R to build for; by default the first on
        ``PATH``.

    Returns
    -------
    pathlib.Path
        The library, for ``R_LIBS``.

    Raises
    ------
    FileNotFoundError
        R is not installed, `rscript` is not an executable file, or mizu's
        sources are incomplete.
    RPackageBuildError
        The build failed: the message names a missing compiler when that is
        the cause, and ends with R's output.
    """
    rscript = find_rscript(rscript)
    library = library_dir(rscript)
    files = _source_files()
    stamp = _build_stamp(rscript, files)
    if _installed_stamp(library) == stamp:
        return library
    library.mkdir(parents=True, exist_ok=True)
    with _locked(library / ".mizu-build.lock"):
        if _installed_stamp(library) != stamp:
            if verbose:
                print(f"mizu: building the R package into {library} (once)", file=sys.stderr, flush=True)
            _build(rscript, library, stamp, files)
    return library


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mizu._r.package",
                                     description="Build the R package that mizu's R workers run, if it is not built "
                                                 "yet, and print the R library that holds it.")
    parser.add_argument("-q", "--quiet", action="store_true", help="say nothing but the library's path")
    parser.add_argument("--source", metavar="DIR", type=pathlib.Path,
                        help="instead, write the package's sources, tests included, into DIR/mizu (which must not "
                             "exist yet) and print that path: what R CMD build and R CMD check take")
    args = parser.parse_args(argv)
    try:
        if args.source is not None:
            source = args.source / _PACKAGE
            if source.exists():
                raise FileExistsError(f"{source} exists already: remove it, or name another folder")
            _write_sources(source, _source_files(tests=True))
            print(source)
        else:
            print(ensure_installed(verbose=not args.quiet))
    except (OSError, RPackageBuildError) as exc:
        print(f"mizu: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
