// RocksDB's informational LOG, written so that a full disk cannot abort the process.
//
// RocksDB's own file logger shares its file writer with the data path: once one append fails
// (ENOSPC), every later log line trips an assertion in builds that keep assertions, as Debian's
// does, and a flush or a shutdown after a full disk aborts the server. This logger writes each
// line with one write(2) and drops the lines the disk has no room for. Warnings and errors also
// go to the cache's log hook, so operators see them beside the server's own lines.
#pragma once

#include <rocksdb/env.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "cache/cache_log.h"

namespace manyshot {

class TolerantInfoLog : public rocksdb::Logger {
 public:
  // Appends to `file` (created if missing). A file past `rotate_bytes` is renamed to
  // `<file>.old` first, so restarts never grow it without bound. A file that cannot be opened
  // drops every line (counted) rather than failing RocksDB's open.
  static std::shared_ptr<TolerantInfoLog> Open(const std::filesystem::path& file, LogFn forward,
                                               uint64_t rotate_bytes = kDefaultRotateBytes);
  ~TolerantInfoLog() override;

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override;
  void Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) override;
  void LogHeader(const char* format, va_list ap) override;

  // Lines the file did not take (a full disk, an I/O error).
  uint64_t dropped_lines() const { return dropped_.load(std::memory_order_relaxed); }

  static constexpr uint64_t kDefaultRotateBytes = 16ull << 20;

 private:
  TolerantInfoLog(int fd, LogFn forward);
  void Write(rocksdb::InfoLogLevel level, const char* format, va_list ap);
  rocksdb::Status CloseImpl() override;

  int fd_;
  LogFn forward_;
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace manyshot
