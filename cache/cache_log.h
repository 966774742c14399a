// The cache's logging hook: the server routes it to its own logger (the cache does not depend on
// one). Corruption, recovery and eviction events are reported through it.
#pragma once

#include <functional>
#include <string>

namespace manyshot {

enum class LogLevel { kInfo = 0, kWarning = 1, kError = 2 };
using LogFn = std::function<void(LogLevel, const std::string&)>;

}  // namespace manyshot
