#include "engine/model/config_keys.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace manyshot::config_keys {

absl::StatusOr<Json> ReadJsonObject(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(file, ": cannot open"));
  std::stringstream buf;
  buf << in.rdbuf();
  Json j = Json::parse(buf.str(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(file, ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(file, ": not a JSON object"));
  return j;
}

double ShortestDecimal(float f) {
  for (int precision = 1; precision <= 9; ++precision) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) return std::strtod(buf, nullptr);
  }
  return f;
}

}  // namespace manyshot::config_keys
