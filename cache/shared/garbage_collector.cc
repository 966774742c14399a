#include "cache/shared/garbage_collector.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "cache/shared/encoding_markers.h"
#include "cache/shared/manifests.h"
#include "cache/shared/shared_kv.h"

namespace manyshot::shared {
namespace {

using Clock = std::chrono::system_clock;

struct FileAge {
  bool exists = false;
  Clock::time_point modified;
  uint64_t bytes = 0;
};

FileAge AgeOf(const std::filesystem::path& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  const auto since_epoch =
      std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec);
  return {true, Clock::time_point(std::chrono::duration_cast<Clock::duration>(since_epoch)),
          static_cast<uint64_t>(st.st_size)};
}

bool Remove(const std::filesystem::path& path, const GcOptions& options, GcReport& report) {
  if (options.dry_run) return true;
  if (unlink(path.c_str()) == 0 || errno == ENOENT) return true;
  report.problems.push_back(absl::StrCat("remove ", path.string(), ": ", std::strerror(errno)));
  return false;
}

// Removes the versions older than a newest one that is past the grace period; adds the KV keys
// of the versions that stay to `referenced`. False when a remaining version cannot be read.
bool SweepVersions(const ManifestStore::NameVersions& name, Clock::time_point cutoff,
                   const GcOptions& options, GcReport& report, std::set<std::string>& referenced) {
  const auto& versions = name.versions;
  if (versions.empty()) return true;
  const FileAge newest = AgeOf(versions.back().path);
  const bool settled = newest.exists && newest.modified < cutoff;
  bool readable = true;
  for (size_t i = 0; i < versions.size(); ++i) {
    const bool superseded = i + 1 < versions.size();
    if (superseded && settled) {
      if (Remove(versions[i].path, options, report)) ++report.versions_removed;
      continue;
    }
    absl::StatusOr<std::string> bytes = SharedDirectory::ReadWhole(versions[i].path);
    if (absl::IsNotFound(bytes.status())) continue;  // removed by another collector
    absl::StatusOr<Manifest> manifest =
        bytes.ok() ? ParseManifest(*bytes) : absl::StatusOr<Manifest>(bytes.status());
    if (!manifest.ok()) {
      report.problems.push_back(
          absl::StrCat(versions[i].path.string(), ": ", manifest.status().message()));
      readable = false;
      continue;
    }
    referenced.insert(manifest->kv_keys.begin(), manifest->kv_keys.end());
  }
  return readable;
}

void SweepKvFiles(const SharedKvFiles& kv, const std::set<std::string>& referenced,
                  Clock::time_point cutoff, const GcOptions& options, GcReport& report) {
  absl::StatusOr<std::vector<std::string>> names = SharedDirectory::ListNames(kv.dir());
  if (!names.ok()) {
    report.problems.push_back(std::string(names.status().message()));
    return;
  }
  for (const std::string& name : *names) {
    const std::string key = KeyOfKvFileName(name);
    if (key.empty()) continue;
    const FileAge age = AgeOf(kv.dir() / name);
    if (referenced.count(key) > 0 || !age.exists || age.modified >= cutoff) {
      ++report.kv_files_kept;
      continue;
    }
    if (Remove(kv.dir() / name, options, report)) {
      ++report.kv_files_removed;
      report.kv_bytes_removed += age.bytes;
    }
  }
}

void SweepTempFiles(const SharedDirectory& dir, Clock::time_point cutoff, const GcOptions& options,
                    GcReport& report) {
  absl::StatusOr<std::vector<std::string>> names = SharedDirectory::ListNames(dir.temp_dir());
  if (!names.ok()) return;
  for (const std::string& name : *names) {
    const FileAge age = AgeOf(dir.temp_dir() / name);
    if (age.exists && age.modified < cutoff && Remove(dir.temp_dir() / name, options, report)) {
      ++report.temp_files_removed;
    }
  }
}

}  // namespace

absl::StatusOr<GcReport> CollectGarbage(const SharedDirectory& dir, const GcOptions& options,
                                        Clock::time_point now) {
  const Clock::time_point cutoff = now - options.grace;
  const ManifestStore manifests(&dir);
  absl::StatusOr<std::vector<ManifestStore::NameVersions>> names = manifests.ListAll();
  if (!names.ok()) return names.status();
  GcReport report;
  report.names = names->size();
  std::set<std::string> referenced;
  bool all_readable = true;
  for (const auto& name : *names) {
    all_readable &= SweepVersions(name, cutoff, options, report, referenced);
  }
  if (all_readable) {
    SweepKvFiles(SharedKvFiles(&dir), referenced, cutoff, options, report);
  } else {
    report.problems.push_back("KV files not collected: a manifest could not be read");
  }
  SweepTempFiles(dir, cutoff, options, report);
  EncodingMarkers::SweepReport markers =
      EncodingMarkers(&dir).Sweep(now - kEncodingMarkerLife, options.dry_run);
  report.encoding_markers_removed = markers.markers_removed;
  report.problems.insert(report.problems.end(), markers.problems.begin(), markers.problems.end());
  return report;
}

}  // namespace manyshot::shared
