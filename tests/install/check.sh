#!/bin/sh
# Installs the build in $1 into a scratch prefix under $2, then builds tests/install's consumer
# against it as an engine would, through the CMake package (C on the shared library, C++ on the
# static one) and through pkg-config (C), and runs the three programs on the CPU backend.
set -eu
build=$1 work=$2 here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$here" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/cmake" >/dev/null
"$work/cmake/consumer_c"
"$work/cmake/consumer_cxx"
pc=$(find "$work/prefix" -name qfuse.pc)
export PKG_CONFIG_PATH="$(dirname "$pc")"
cc -std=c11 -Wall -Wextra -Werror -pedantic "$here/consumer.c" -o "$work/consumer_pc" $(pkg-config --cflags --libs qfuse) -lm
LD_LIBRARY_PATH="$(pkg-config --variable=libdir qfuse)" "$work/consumer_pc"
