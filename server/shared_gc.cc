#include "server/shared_gc.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "cache/shared/garbage_collector.h"
#include "cache/shared/shared_directory.h"
#include "nlohmann/json.hpp"

namespace manyshot::server {
namespace {

std::string GcWriterName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string("gc-") + host + "-" + std::to_string(getpid());
}

nlohmann::ordered_json ReportJson(const shared::GcReport& report, const SharedGcOptions& options) {
  return {{"shared_dir", options.shared_dir},
          {"dry_run", options.dry_run},
          {"grace_seconds", options.grace.count()},
          {"names", report.names},
          {"versions_removed", report.versions_removed},
          {"kv_files_kept", report.kv_files_kept},
          {"kv_files_removed", report.kv_files_removed},
          {"kv_bytes_removed", report.kv_bytes_removed},
          {"temp_files_removed", report.temp_files_removed},
          {"encoding_markers_removed", report.encoding_markers_removed},
          {"problems", report.problems}};
}

}  // namespace

int RunSharedGc(const SharedGcOptions& options, std::ostream& out, std::ostream& err) {
  if (options.shared_dir.empty()) {
    err << "manyshot-server: --gc needs --shared_dir=PATH (the directory the replicas share)\n";
    return 2;
  }
  if (options.grace.count() < 0) {
    err << "manyshot-server: --gc_grace_seconds must not be negative\n";
    return 2;
  }
  // A mistyped path must not look like an empty, clean directory: the collector creates nothing.
  std::error_code ec;
  if (!std::filesystem::is_directory(options.shared_dir, ec)) {
    err << "manyshot-server: --shared_dir=" << options.shared_dir << " is not a directory\n";
    return 1;
  }
  auto dir = shared::SharedDirectory::Open(options.shared_dir, GcWriterName());
  if (!dir.ok()) {
    err << "manyshot-server: --gc: " << dir.status().message() << "\n";
    return 1;
  }
  const shared::GcOptions gc{options.grace, options.dry_run};
  auto report = shared::CollectGarbage(*dir, gc, std::chrono::system_clock::now());
  if (!report.ok()) {
    err << "manyshot-server: --gc: " << report.status().message() << "\n";
    return 1;
  }
  out << ReportJson(*report, options).dump() << "\n";
  for (const std::string& problem : report->problems) {
    err << "manyshot-server: --gc skipped: " << problem << "\n";
  }
  return report->problems.empty() ? 0 : 1;
}

}  // namespace manyshot::server
