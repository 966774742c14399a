#include "engine/serving/served_task_options.h"

namespace manyshot {

const char* ServedModeName(ServedMode mode) {
  switch (mode) {
    case ServedMode::kStructured:
      return "STRUCTURED";
    case ServedMode::kParallel:
      return "PARALLEL";
    case ServedMode::kConventional:
      return "CONVENTIONAL";
    case ServedMode::kSaicl:
      return "SAICL";
    case ServedMode::kFid:
      return "FID";
    case ServedMode::kEnsemble:
      return "ENSEMBLE";
    case ServedMode::kGroupFid:
      return "GROUP_FID";
  }
  return "UNKNOWN";
}

}  // namespace manyshot
