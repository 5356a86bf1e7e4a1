#!/usr/bin/env bash
set -euxo pipefail

# The compiler activation's MESON_ARGS hold the prefix, the libdir, the build
# type and, when cross-compiling, the cross file. meson-python sets the build
# type itself, so the rest goes to `meson setup` through -Csetup-args.
setup_args=()
for arg in ${MESON_ARGS:-}; do
    case "$arg" in
        -Dbuildtype=*|--buildtype=*) ;;
        *) setup_args+=("-Csetup-args=$arg") ;;
    esac
done

if [[ "${CONDA_BUILD_CROSS_COMPILATION:-0}" == 1 ]]; then
    # Meson looks for the target's Python in the cross file's [binaries],
    # the file's last section.
    echo "python = '${PREFIX}/bin/python'" >> "${BUILD_PREFIX}/meson_cross_file.txt"
fi

"${PYTHON}" -m pip install . -vv --no-deps --no-build-isolation \
    -Cbuilddir=builddir "-Ccompile-args=-j${CPU_COUNT}" "${setup_args[@]}"
