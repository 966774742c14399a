#include "server/host_port.h"

#include <charconv>

#include "absl/strings/str_cat.h"

namespace manyshot::server {

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(absl::string_view flag,
                                                          absl::string_view address) {
  const size_t colon = address.rfind(':');
  std::string host(colon == absl::string_view::npos ? "" : address.substr(0, colon));
  const absl::string_view port_text =
      colon == absl::string_view::npos ? address : address.substr(colon + 1);
  int port = -1;
  auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (error != std::errc() || end != port_text.data() + port_text.size() || port < 0 ||
      port > 65535 || colon == absl::string_view::npos ||
      (host.find(':') != std::string::npos && !bracketed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", address,
                     ": expected host:port or [v6]:port with a port from 0 to 65535 (0 picks a "
                     "free port), e.g. 127.0.0.1:0"));
  }
  if (bracketed) host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  return std::make_pair(host, port);
}

}  // namespace manyshot::server
