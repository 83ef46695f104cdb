#!/usr/bin/env bash
# Loom as a user gets it: `cmake --install` into a fresh prefix, then a tiny C
# program (a 1-rank all-reduce) built against that prefix only, once with a
# CMake project (find_package(Loom), target Loom::loom), once with pkg-config
# (loom.pc), and once statically (libloom.a with pkg-config's private libs).
# Each build must link and the program must run. Without pkg-config its two
# cases are skipped and the script exits 77 (ctest: SKIP_RETURN_CODE 77).
#   usage: test_install.sh BUILD_DIR [CMAKE]
set -u

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 BUILD_DIR [CMAKE]" >&2
  exit 2
fi
BUILD=$(realpath "$1")
CMAKE=${2:-cmake}
CC=${CC:-cc}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_install.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
PREFIX=$TMP/prefix

skipped=0

# shellcheck source=tests/tools/cases.sh
source "$(dirname "${BASH_SOURCE[0]}")/cases.sh"

# Runs a command with its output in $TMP/log; on failure sets why.
logged() { # WHAT COMMAND...
  local what=$1
  shift
  if timeout 300 "$@" >"$TMP/log" 2>&1; then return 0; fi
  why="$what failed: $(tail -c 1500 "$TMP/log")"
  return 1
}

# The consumer: plain C99, the public header only.
cat >"$TMP/consumer.c" <<'EOF'
#include <loom.h>
#include <stdio.h>

int main(void) {
  int version = 0;
  loomComm_t comm = NULL;
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  int i;
  if (loomGetVersion(&version) != loomSuccess || version != LOOM_VERSION_CODE) {
    fprintf(stderr, "loomGetVersion: %d, header says %d\n", version, LOOM_VERSION_CODE);
    return 1;
  }
  if (loomCommInitAll(&comm, 1, NULL) != loomSuccess) {
    fprintf(stderr, "loomCommInitAll: %s\n", loomGetLastError(NULL));
    return 1;
  }
  if (loomAllReduce(x, x, 4, loomFloat32, loomSum, comm, NULL) != loomSuccess) {
    fprintf(stderr, "loomAllReduce: %s\n", loomGetLastError(comm));
    return 1;
  }
  for (i = 0; i < 4; i++)
    if (x[i] != (float)(i + 1)) {
      fprintf(stderr, "x[%d] = %g after a 1-rank sum\n", i, (double)x[i]);
      return 1;
    }
  if (loomCommDestroy(comm) != loomSuccess) {
    fprintf(stderr, "loomCommDestroy: %s\n", loomGetLastError(NULL));
    return 1;
  }
  printf("consumer ok\n");
  return 0;
}
EOF

# The parallel layer's consumer: plain C99, loom_parallel.h, a 1-rank communicator.
cat >"$TMP/par_consumer.c" <<'EOF'
#include <loom_parallel.h>
#include <stdio.h>

int main(void) {
  loomComm_t comm = NULL;
  double x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {0};
  int64_t shape[2] = {2, 3}, numels[2] = {5, 7};
  loomTensor tx, ty;
  loomZeroLayout_t z;
  loomZeroLayoutInfo info;
  int i;
  if (loomCommInitAll(&comm, 1, NULL) != loomSuccess ||
      loomTensorMake(x, loomFloat64, 2, shape, &tx) != loomSuccess ||
      loomTensorMake(y, loomFloat64, 2, shape, &ty) != loomSuccess ||
      loomAllReduceTensor(&tx, &ty, loomSum, comm, NULL) != loomSuccess) {
    fprintf(stderr, "parallel calls: %s\n", loomGetLastError(comm));
    return 1;
  }
  for (i = 0; i < 6; i++)
    if (y[i] != x[i]) return 1;
  if (loomZeroLayoutCreate(numels, 2, 1, 8, 1, &z) != loomSuccess ||
      loomZeroLayoutGetInfo(z, &info) != loomSuccess || info.totalElems != 12 ||
      loomZeroLayoutDestroy(z) != loomSuccess)
    return 1;
  loomCommDestroy(comm);
  printf("consumer ok\n");
  return 0;
}
EOF

# Runs a built consumer and checks what it says; LD_LIBRARY_PATH as given.
run_consumer() { # BINARY
  logged "running $(basename "$1")" "$1" || return 1
  grep -q "^consumer ok$" "$TMP/log" || { why="$(basename "$1") printed: $(head -c 500 "$TMP/log")"; return 1; }
}

t_install() {
  logged "cmake --install" "$CMAKE" --install "$BUILD" --prefix "$PREFIX" || return 1
  [ -f "$PREFIX/include/loom.h" ] || { why="no include/loom.h under the prefix"; return 1; }
  LIBDIR=$(dirname "$(find "$PREFIX" -name 'libloom.so' | head -n 1)")
  [ -f "$LIBDIR/libloom.so" ] || { why="no libloom.so under the prefix"; return 1; }
  [ -f "$LIBDIR/libloom.a" ] || { why="no libloom.a beside libloom.so ($LIBDIR)"; return 1; }
  [ -f "$LIBDIR/cmake/Loom/LoomConfig.cmake" ] || { why="no $LIBDIR/cmake/Loom/LoomConfig.cmake"; return 1; }
  [ -f "$LIBDIR/pkgconfig/loom.pc" ] || { why="no $LIBDIR/pkgconfig/loom.pc"; return 1; }
}

t_cmake_consumer() {
  [ -n "${LIBDIR:-}" ] || { why="nothing installed"; return 1; }
  mkdir -p "$TMP/cm"
  cp "$TMP/consumer.c" "$TMP/cm/consumer.c"
  cat >"$TMP/cm/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(loom_consumer C)
find_package(Loom REQUIRED)
# The package must come from the prefix under test, not from elsewhere.
file(REAL_PATH "${Loom_DIR}" found)
file(REAL_PATH "${WANT_PREFIX}" want)
string(FIND "${found}" "${want}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "found Loom in ${found}, not under ${want}")
endif()
add_executable(consumer consumer.c)
set_target_properties(consumer PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_link_libraries(consumer PRIVATE Loom::loom)
EOF
  logged "configuring the CMake consumer" "$CMAKE" -S "$TMP/cm" -B "$TMP/cm/build" \
    -DCMAKE_PREFIX_PATH="$PREFIX" -DWANT_PREFIX="$PREFIX" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
    -DCMAKE_BUILD_TYPE=Release || return 1
  logged "building the CMake consumer" "$CMAKE" --build "$TMP/cm/build" || return 1
  # CMake's build-tree RPATH points at the installed library.
  run_consumer "$TMP/cm/build/consumer" || return 1
  ldd "$TMP/cm/build/consumer" >"$TMP/ldd" 2>&1
  grep -q "libloom.so.* => $(realpath "$LIBDIR")/" "$TMP/ldd" ||
    { why="the consumer does not load the installed libloom: $(grep loom "$TMP/ldd")"; return 1; }
}

t_pkgconfig_consumer() {
  [ -n "${LIBDIR:-}" ] || { why="nothing installed"; return 1; }
  export PKG_CONFIG_PATH="$LIBDIR/pkgconfig"
  local cflags libs libdir
  cflags=$(pkg-config --cflags loom) || { why="pkg-config --cflags loom failed"; return 1; }
  libs=$(pkg-config --libs loom) || { why="pkg-config --libs loom failed"; return 1; }
  libdir=$(pkg-config --variable=libdir loom)
  [ "$(realpath "$libdir")" = "$(realpath "$LIBDIR")" ] ||
    { why="loom.pc says libdir=$libdir, the library is in $LIBDIR"; return 1; }
  # shellcheck disable=SC2086 # the flags are lists
  logged "compiling with pkg-config" "$CC" -std=c99 -Wall -Wextra -pedantic -Werror $cflags \
    "$TMP/consumer.c" -o "$TMP/consumer_pc" $libs || return 1
  LD_LIBRARY_PATH="$libdir" run_consumer "$TMP/consumer_pc"
}

t_static_consumer() {
  [ -n "${LIBDIR:-}" ] || { why="nothing installed"; return 1; }
  export PKG_CONFIG_PATH="$LIBDIR/pkgconfig"
  local cflags libs
  cflags=$(pkg-config --cflags loom) || { why="pkg-config --cflags loom failed"; return 1; }
  libs=$(pkg-config --static --libs loom) || { why="pkg-config --static --libs loom failed"; return 1; }
  libs=${libs//-lloom/-Wl,-Bstatic -lloom -Wl,-Bdynamic}
  # shellcheck disable=SC2086
  logged "linking libloom.a" "$CC" -std=c99 $cflags "$TMP/consumer.c" -o "$TMP/consumer_static" \
    $libs || return 1
  readelf -d "$TMP/consumer_static" | grep -q 'NEEDED.*libloom' &&
    { why="the static consumer still needs libloom.so"; return 1; }
  run_consumer "$TMP/consumer_static"
}

have_pkgconfig() { command -v pkg-config >/dev/null 2>&1; }

# libloom_parallel as a user gets it: Loom::loom_parallel and loom_parallel.pc.
t_parallel_consumer() {
  [ -n "${LIBDIR:-}" ] || { why="nothing installed"; return 1; }
  [ -f "$PREFIX/include/loom_parallel.h" ] || { why="no include/loom_parallel.h under the prefix"; return 1; }
  mkdir -p "$TMP/pcm"
  cp "$TMP/par_consumer.c" "$TMP/pcm/consumer.c"
  cat >"$TMP/pcm/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(loom_parallel_consumer C)
find_package(Loom REQUIRED)
add_executable(consumer consumer.c)
set_target_properties(consumer PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_link_libraries(consumer PRIVATE Loom::loom_parallel)
EOF
  logged "configuring the parallel CMake consumer" "$CMAKE" -S "$TMP/pcm" -B "$TMP/pcm/build" \
    -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF || return 1
  logged "building the parallel CMake consumer" "$CMAKE" --build "$TMP/pcm/build" || return 1
  run_consumer "$TMP/pcm/build/consumer" || return 1
  have_pkgconfig || return 0
  export PKG_CONFIG_PATH="$LIBDIR/pkgconfig"
  local cflags libs
  cflags=$(pkg-config --cflags loom_parallel) || { why="pkg-config --cflags loom_parallel failed"; return 1; }
  libs=$(pkg-config --libs loom_parallel) || { why="pkg-config --libs loom_parallel failed"; return 1; }
  # shellcheck disable=SC2086 # the flags are lists
  logged "compiling with pkg-config loom_parallel" "$CC" -std=c99 -Wall -Wextra -pedantic -Werror \
    $cflags "$TMP/par_consumer.c" -o "$TMP/par_consumer_pc" $libs || return 1
  LD_LIBRARY_PATH="$LIBDIR" run_consumer "$TMP/par_consumer_pc"
}

run_case "cmake --install into a fresh prefix" t_install
run_case "CMake consumer: find_package(Loom), Loom::loom" t_cmake_consumer
run_case "parallel consumer: Loom::loom_parallel and loom_parallel.pc (C99 -pedantic)" t_parallel_consumer
if have_pkgconfig; then
  run_case "pkg-config consumer (loom.pc, C99 -pedantic)" t_pkgconfig_consumer
  run_case "static consumer (libloom.a, pkg-config --static)" t_static_consumer
else
  echo "SKIPPED: the pkg-config and static consumers: pkg-config is not installed"
  skipped=2
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] || exit 1
[ "$skipped" -eq 0 ] || exit 77
exit 0
