#include "cache/rocks_info_log.h"

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <string>
#include <system_error>

namespace manyshot {
namespace {

// Long enough for RocksDB's longest lines (option dumps, compaction summaries); longer ones are
// cut, which only the informational LOG sees.
constexpr size_t kLineBytes = 4096;

const char* LevelName(rocksdb::InfoLogLevel level) {
  switch (level) {
    case rocksdb::InfoLogLevel::DEBUG_LEVEL:
      return "DEBUG";
    case rocksdb::InfoLogLevel::WARN_LEVEL:
      return "WARN";
    case rocksdb::InfoLogLevel::ERROR_LEVEL:
      return "ERROR";
    case rocksdb::InfoLogLevel::FATAL_LEVEL:
      return "FATAL";
    default:
      return nullptr;  // INFO and HEADER lines carry no tag, as in RocksDB's own LOG
  }
}

// "2026/11/29-05:18:02.620123 " in local time, the prefix RocksDB's own LOG uses.
size_t FormatTimestamp(char* out, size_t size) {
  struct timeval now;
  gettimeofday(&now, nullptr);
  struct tm local;
  localtime_r(&now.tv_sec, &local);
  const int n = std::snprintf(out, size, "%04d/%02d/%02d-%02d:%02d:%02d.%06ld ",
                              local.tm_year + 1900, local.tm_mon + 1, local.tm_mday, local.tm_hour,
                              local.tm_min, local.tm_sec, static_cast<long>(now.tv_usec));
  return n > 0 ? std::min(static_cast<size_t>(n), size - 1) : 0;
}

}  // namespace

std::shared_ptr<TolerantInfoLog> TolerantInfoLog::Open(const std::filesystem::path& file,
                                                       LogFn forward, uint64_t rotate_bytes) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (!ec && size > rotate_bytes && std::filesystem::is_regular_file(file, ec)) {
    std::filesystem::rename(file, std::filesystem::path(file.string() + ".old"), ec);
  }
  // Without a file (fd -1) every line is dropped and counted; warnings are still forwarded.
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  return std::shared_ptr<TolerantInfoLog>(new TolerantInfoLog(fd, std::move(forward)));
}

TolerantInfoLog::TolerantInfoLog(int fd, LogFn forward)
    : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL), fd_(fd), forward_(std::move(forward)) {}

TolerantInfoLog::~TolerantInfoLog() {
  if (fd_ >= 0) ::close(fd_);
}

rocksdb::Status TolerantInfoLog::CloseImpl() {
  if (fd_ >= 0 && ::close(fd_) != 0) {
    fd_ = -1;
    return rocksdb::Status::IOError("closing RocksDB's LOG");
  }
  fd_ = -1;
  return rocksdb::Status::OK();
}

void TolerantInfoLog::Logv(const char* format, va_list ap) {
  Write(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
}

void TolerantInfoLog::Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) {
  if (level < GetInfoLogLevel()) return;
  Write(level, format, ap);
}

void TolerantInfoLog::LogHeader(const char* format, va_list ap) {
  Write(rocksdb::InfoLogLevel::HEADER_LEVEL, format, ap);
}

void TolerantInfoLog::Write(rocksdb::InfoLogLevel level, const char* format, va_list ap) {
  char line[kLineBytes];
  size_t used = FormatTimestamp(line, sizeof(line));
  if (const char* tag = LevelName(level)) {
    const int n = std::snprintf(line + used, sizeof(line) - used, "[%s] ", tag);
    if (n > 0) used = std::min(used + static_cast<size_t>(n), sizeof(line) - 1);
  }
  const size_t text_start = used;
  const int n = std::vsnprintf(line + used, sizeof(line) - used, format, ap);
  if (n > 0) used = std::min(used + static_cast<size_t>(n), sizeof(line) - 1);
  if (used == 0 || line[used - 1] != '\n') line[used++] = '\n';

  // One write per line: lines of concurrent threads do not interleave (O_APPEND), and a full
  // disk costs the line, never the process.
  if (fd_ < 0 || ::write(fd_, line, used) != static_cast<ssize_t>(used)) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }
  if (forward_ && level >= rocksdb::InfoLogLevel::WARN_LEVEL &&
      level != rocksdb::InfoLogLevel::HEADER_LEVEL) {
    const LogLevel ours =
        level == rocksdb::InfoLogLevel::WARN_LEVEL ? LogLevel::kWarning : LogLevel::kError;
    forward_(ours, "rocksdb: " + std::string(line + text_start, used - text_start - 1));
  }
}

}  // namespace manyshot
