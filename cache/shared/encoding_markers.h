// Encoding markers: ROOT/encoding/<tenant>/<id>/<writer>, an empty-bodied file present while a
// replica's CreateTask of that id encodes (nothing is published before the encode ends), so that
// other replicas answer UNAVAILABLE (retry) rather than NOT_FOUND meanwhile. A replica that dies
// mid-encode leaves its marker behind: one older than kEncodingMarkerLife is ignored by readers
// (an encode running longer than that reads as absent elsewhere until it publishes) and removed
// by the garbage collector, which also removes the directories such markers leave empty.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "cache/shared/shared_directory.h"

namespace manyshot::shared {

inline constexpr std::chrono::minutes kEncodingMarkerLife{15};

class EncodingMarkers {
 public:
  explicit EncodingMarkers(const SharedDirectory* dir) : dir_(dir) {}

  // Best effort: without a marker other replicas answer NOT_FOUND meanwhile, as for any unknown
  // task.
  void Mark(const std::string& tenant, const std::string& id) const;
  void Clear(const std::string& tenant, const std::string& id) const;
  // Whether some replica's marker of the id is younger than kEncodingMarkerLife.
  bool AnyLive(const std::string& tenant, const std::string& id) const;

  struct SweepReport {
    uint64_t markers_removed = 0;
    std::vector<std::string> problems;
  };
  // Removes the markers last written before `cutoff` and the tenant and id directories that are
  // empty and unchanged since `cutoff` (one emptied now goes at a later sweep, so a replica
  // about to write a marker into it does not lose it). `dry_run`: counts, removes nothing.
  SweepReport Sweep(std::chrono::system_clock::time_point cutoff, bool dry_run) const;

  std::filesystem::path root() const { return dir_->root() / "encoding"; }

 private:
  std::filesystem::path PathOf(const std::string& tenant, const std::string& id) const;
  const SharedDirectory* dir_;
};

}  // namespace manyshot::shared
