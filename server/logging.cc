#include "server/logging.h"

#include <grpc/support/log.h>

#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {
namespace {

// %j: the log message escaped for a JSON string, so every JSON log line parses.
class JsonEscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr char kHex[] = "0123456789abcdef";
    for (char c : std::string_view(msg.payload.data(), msg.payload.size())) {
      switch (c) {
        case '"':
          dest.append(std::string_view("\\\""));
          break;
        case '\\':
          dest.append(std::string_view("\\\\"));
          break;
        case '\n':
          dest.append(std::string_view("\\n"));
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            const char esc[] = {'\\', 'u', '0', '0', kHex[(c >> 4) & 0xf], kHex[c & 0xf]};
            dest.append(esc, esc + sizeof(esc));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

constexpr char kRequestLogger[] = "manyshot.request";
std::atomic<bool> json_logs{false};

bool IsClientError(const std::string& code) {
  for (const char* c :
       {"INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "FAILED_PRECONDITION", "OUT_OF_RANGE",
        "UNAUTHENTICATED", "PERMISSION_DENIED", "CANCELLED", "ABORTED"}) {
    if (code == c) return true;
  }
  return false;
}

// gRPC core's gpr_log, which would write its own line format to stderr.
void GrpcCoreLog(gpr_log_func_args* args) {
  const spdlog::level::level_enum level =
      args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::err
      : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                : spdlog::level::debug;
  spdlog::log(level, "grpc: {}:{} {}", args->file != nullptr ? args->file : "?", args->line,
              args->message != nullptr ? args->message : "");
}

}  // namespace

void LogRequest(const RequestLogLine& line) {
  const spdlog::level::level_enum level =
      line.code == "OK" || IsClientError(line.code) ? spdlog::level::info : spdlog::level::warn;
  if (json_logs.load()) {
    nlohmann::ordered_json j;
    j["msg"] = "request";
    j["request_id"] = line.request_id;
    j["method"] = line.method;
    j["tenant"] = line.tenant;
    j["task"] = line.task;
    j["code"] = line.code;
    j["seconds"] = line.seconds;
    if (line.code != "OK") j["error"] = line.error;
    // The request logger's pattern wraps the fields in the line's object (time, level, thread).
    std::string fields = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    fields = fields.substr(1, fields.size() - 2);
    if (auto logger = spdlog::get(kRequestLogger)) logger->log(level, fields);
    return;
  }
  std::string text = absl::StrFormat(
      "request_id=%s method=%s tenant=%s task=%s code=%s seconds=%.6f", line.request_id,
      line.method, line.tenant, line.task, line.code, line.seconds);
  if (line.code != "OK") absl::StrAppend(&text, " error=", line.error);
  spdlog::log(level, "{}", text);
}

absl::Status ConfigureLogging(const std::string& level, const std::string& format) {
  spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  // from_str maps unknown names to "off"; only accept "off" when it was asked for.
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log_level=", level, " is not one of trace, debug, info, warn, error, critical, off"));
  }
  // A sink each (a sink holds the formatter); both write whole lines to stderr with one fwrite,
  // which stdio keeps whole.
  auto logger = std::make_shared<spdlog::logger>("manyshot",
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  auto request_logger = std::make_shared<spdlog::logger>(
      kRequestLogger, std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (format == "json") {
    // One JSON object per line.
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonEscapedMessage>('j').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","thread":%t,"msg":"%j"})");
    logger->set_formatter(std::move(formatter));
    // Its payload is already JSON fields (LogRequest).
    request_logger->set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","thread":%t,%v})",
                                spdlog::pattern_time_type::utc);
    json_logs = true;
  } else if (format == "text") {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ [%t] %v", spdlog::pattern_time_type::utc);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_format=", format, " is not one of text, json"));
  }
  for (auto* l : {&logger, &request_logger}) {
    (*l)->set_level(parsed);
    (*l)->flush_on(spdlog::level::info);
  }
  spdlog::drop(kRequestLogger);
  spdlog::register_logger(request_logger);
  spdlog::set_default_logger(std::move(logger));
  gpr_set_log_function(GrpcCoreLog);
  return absl::OkStatus();
}

}  // namespace manyshot::server
