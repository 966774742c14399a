#include "cache/shared/encoding_markers.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"

namespace manyshot::shared {
namespace {

using Clock = std::chrono::system_clock;

// The path's modification time; nullopt when it cannot be read (gone meanwhile).
std::optional<Clock::time_point> ModifiedAt(const std::filesystem::path& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  const auto since_epoch =
      std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec);
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(since_epoch));
}

// Removes `dir` when it is empty and unchanged since `cutoff`; true when it is gone.
bool RemoveSettledEmptyDir(const std::filesystem::path& dir, Clock::time_point cutoff,
                           bool dry_run) {
  const auto modified = ModifiedAt(dir);
  if (!modified || *modified >= cutoff) return false;
  auto names = SharedDirectory::ListNames(dir);
  if (!names.ok() || !names->empty()) return false;
  return dry_run || rmdir(dir.c_str()) == 0;  // ENOTEMPTY: a marker arrived meanwhile
}

}  // namespace

std::filesystem::path EncodingMarkers::PathOf(const std::string& tenant,
                                              const std::string& id) const {
  return root() / PathComponentFor(tenant) / PathComponentFor(id) /
         PathComponentFor(dir_->writer());
}

void EncodingMarkers::Mark(const std::string& tenant, const std::string& id) const {
  dir_->Publish(PathOf(tenant, id), PublishMode::kReplace,
                [&](FileSink& sink) { return sink.Append(dir_->writer()); })
      .IgnoreError();
}

void EncodingMarkers::Clear(const std::string& tenant, const std::string& id) const {
  std::error_code ec;
  std::filesystem::remove(PathOf(tenant, id), ec);
}

bool EncodingMarkers::AnyLive(const std::string& tenant, const std::string& id) const {
  const std::filesystem::path dir = PathOf(tenant, id).parent_path();
  auto names = SharedDirectory::ListNames(dir);
  if (!names.ok()) return false;
  const Clock::time_point cutoff = Clock::now() - kEncodingMarkerLife;
  for (const std::string& name : *names) {
    const auto modified = ModifiedAt(dir / name);
    if (modified && *modified >= cutoff) return true;
  }
  return false;
}

EncodingMarkers::SweepReport EncodingMarkers::Sweep(Clock::time_point cutoff, bool dry_run) const {
  SweepReport report;
  auto tenants = SharedDirectory::ListNames(root());
  if (!tenants.ok()) {
    report.problems.push_back(std::string(tenants.status().message()));
    return report;
  }
  for (const std::string& tenant : *tenants) {
    auto ids = SharedDirectory::ListNames(root() / tenant);
    if (!ids.ok()) continue;  // not a directory, or gone
    for (const std::string& id : *ids) {
      const std::filesystem::path id_dir = root() / tenant / id;
      auto markers = SharedDirectory::ListNames(id_dir);
      if (!markers.ok()) continue;
      for (const std::string& marker : *markers) {
        const auto modified = ModifiedAt(id_dir / marker);
        if (!modified || *modified >= cutoff) continue;
        if (dry_run || unlink((id_dir / marker).c_str()) == 0 || errno == ENOENT) {
          ++report.markers_removed;
        } else {
          report.problems.push_back(
              absl::StrCat("remove ", (id_dir / marker).string(), ": ", std::strerror(errno)));
        }
      }
      RemoveSettledEmptyDir(id_dir, cutoff, dry_run);
    }
    RemoveSettledEmptyDir(root() / tenant, cutoff, dry_run);
  }
  return report;
}

}  // namespace manyshot::shared
