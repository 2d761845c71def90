// The whole public API of pagedkv in one include: the Engine (engine.h), the
// sampling parameters (sampling.h), Status/StatusOr (status.h) and the version
// (version.h). Build against the installed library with find_package(pagedkv)
// (target pagedkv::pagedkv) or pkg-config (pagedkv.pc); docs/library.md.
#pragma once

#include "pagedkv/engine.h"
#include "pagedkv/sampling.h"
#include "pagedkv/status.h"
#include "pagedkv/version.h"
