/* version.c - tshard_version(): the project version CMake passes as TSHARD_VERSION (the one
 * version source, also written into the Python package's _version.py). */
#include "tshard.h"

#ifndef TSHARD_VERSION
#error "TSHARD_VERSION must be defined by the build (CMake's project version)"
#endif

const char *tshard_version(void) { return TSHARD_VERSION; }
