// Versioned manifests in the shared directory: what a name (a tenant's task id) stands for, and
// which KV files that needs. Each (tenant, id) has a directory of immutable version files
// v00000000000000000001, v...02, ...; a new version is published with link() under the next number,
// so of two writers racing for one number exactly one wins, without locks, on NFS and CephFS
// alike. The newest version is the current one; a delete is a tombstone version. A version names
// only KV files that were durable before it was published (the caller's order of writes).
//
// Readers find the newest version by listing the directory and then probing the following
// numbers by name (a listing may be stale on NFS; a lookup by name is not, with the mount option
// lookupcache=positive). IsCurrent() is the cheap per-batch revalidation: one lookup.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/shared/shared_directory.h"

namespace manyshot::shared {

struct Manifest {
  std::string tenant;
  std::string id;
  uint64_t version = 0;  // 1, 2, ... per (tenant, id); never reused
  bool tombstone = false;
  int64_t written_unix_ms = 0;
  std::string writer;                // the replica that published it (SharedDirectory::writer())
  std::vector<std::string> kv_keys;  // the KV files this version needs
  std::string body;                  // opaque here: the server's task record
};

// The manifest's file bytes (checksummed) and back; DATA_LOSS for damaged bytes.
std::string SerializeManifest(const Manifest& manifest);
absl::StatusOr<Manifest> ParseManifest(std::string_view bytes);

class ManifestStore {
 public:
  explicit ManifestStore(const SharedDirectory* dir) : dir_(dir) {}

  // The newest version of (tenant, id); NOT_FOUND when none was ever published (a tombstone is
  // returned as such: the caller decides what a deleted name means).
  absl::StatusOr<Manifest> Latest(const std::string& tenant, const std::string& id) const;

  // True while `version` is the newest: the next number does not exist.
  absl::StatusOr<bool> IsCurrent(const std::string& tenant, const std::string& id,
                                 uint64_t version) const;

  // Publishes `manifest` under manifest.version, which must be 1 + the newest the caller saw (1
  // for a new name). ABORTED when another writer published that number first: re-read Latest()
  // and decide again. Fills written_unix_ms and writer.
  absl::Status Publish(Manifest manifest) const;

  // The newest version of every id of `tenant` (tombstones included).
  absl::StatusOr<std::vector<Manifest>> ListTenant(const std::string& tenant) const;
  // Every version file of every name: the garbage collector's view.
  struct VersionFile {
    std::filesystem::path path;
    uint64_t version = 0;
  };
  struct NameVersions {
    std::filesystem::path dir;
    std::vector<VersionFile> versions;  // ascending
  };
  absl::StatusOr<std::vector<NameVersions>> ListAll() const;

  std::filesystem::path DirOf(const std::string& tenant, const std::string& id) const;
  std::filesystem::path root() const { return dir_->root() / "manifests"; }

 private:
  absl::StatusOr<Manifest> Read(const std::filesystem::path& path) const;
  absl::StatusOr<uint64_t> NewestNumber(const std::filesystem::path& dir) const;

  const SharedDirectory* dir_;
};

// "v" and the version as 20 digits, so names sort by version; 0 when `name` is not one.
std::string VersionFileName(uint64_t version);
uint64_t VersionOfFileName(std::string_view name);

}  // namespace manyshot::shared
