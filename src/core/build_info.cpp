#include "trainrun/core/build_info.h"

#include "build_commit.h"

#ifndef TRAINRUN_VERSION
#define TRAINRUN_VERSION "unknown"
#endif

namespace trainrun {

std::string_view trainrun_release() {
  return TRAINRUN_VERSION;
}

std::string_view source_commit() {
  return TRAINRUN_SOURCE_COMMIT;
}

std::string trainrun_version() {
  return std::string(trainrun_release()) + "+" + std::string(source_commit());
}

}  // namespace trainrun
