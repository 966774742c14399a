// "host:port" flag values (--listen_address, --metrics_address) read one way.
#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace manyshot::server {

// Splits "host:port" or "[v6]:port" into host (brackets removed; "" becomes 0.0.0.0, every
// interface) and port (0 to 65535; 0 picks a free port). An error names --<flag>=<value> and the
// expected form.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(absl::string_view flag,
                                                          absl::string_view address);

}  // namespace manyshot::server
