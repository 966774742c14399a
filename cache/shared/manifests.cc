#include "cache/shared/manifests.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cache/byte_codec.h"

namespace manyshot::shared {
namespace {

constexpr char kMagic[] = "MSMANIF1";
constexpr size_t kMagicSize = 8;
// Bounds for a damaged length field: no manifest comes near them.
constexpr uint64_t kMaxKeys = 1 << 20;

bool Exists(const std::filesystem::path& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string VersionFileName(uint64_t version) { return absl::StrFormat("v%020d", version); }

uint64_t VersionOfFileName(std::string_view name) {
  uint64_t version = 0;
  if (name.size() != 21 || name[0] != 'v') return 0;
  if (!absl::SimpleAtoi(absl::string_view(name.data() + 1, name.size() - 1), &version)) return 0;
  return version;
}

std::string SerializeManifest(const Manifest& m) {
  std::string out(kMagic, kMagicSize);
  codec::PutStr(&out, m.tenant);
  codec::PutStr(&out, m.id);
  codec::PutU64(&out, m.version);
  codec::PutU64(&out, m.tombstone ? 1 : 0);
  codec::PutU64(&out, static_cast<uint64_t>(m.written_unix_ms));
  codec::PutStr(&out, m.writer);
  codec::PutU64(&out, m.kv_keys.size());
  for (const std::string& key : m.kv_keys) codec::PutStr(&out, key);
  codec::PutStr(&out, m.body);
  codec::PutU64(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

absl::StatusOr<Manifest> ParseManifest(std::string_view bytes) {
  const auto damaged = [](std::string_view what) {
    return absl::DataLossError(absl::StrCat("damaged manifest: ", std::string(what)));
  };
  if (bytes.size() < kMagicSize + 8 || bytes.substr(0, kMagicSize) != kMagic) {
    return damaged("no manifest magic");
  }
  const std::string_view content = bytes.substr(0, bytes.size() - 8);
  codec::Reader tail(bytes.substr(bytes.size() - 8));
  uint64_t checksum = 0;
  if (!tail.U64(&checksum) || checksum != XXH3_64bits(content.data(), content.size())) {
    return damaged("checksum mismatch");
  }
  codec::Reader in(content.substr(kMagicSize));
  Manifest m;
  uint64_t tombstone = 0, keys = 0;
  if (!in.Str(&m.tenant) || !in.Str(&m.id) || !in.U64(&m.version) || !in.U64(&tombstone) ||
      !in.I64(&m.written_unix_ms) || !in.Str(&m.writer) || !in.U64(&keys) || keys > kMaxKeys) {
    return damaged("truncated fields");
  }
  m.tombstone = tombstone != 0;
  m.kv_keys.resize(keys);
  for (std::string& key : m.kv_keys) {
    if (!in.Str(&key)) return damaged("truncated KV keys");
  }
  if (!in.Str(&m.body) || !in.done()) return damaged("truncated body");
  return m;
}

std::filesystem::path ManifestStore::DirOf(const std::string& tenant, const std::string& id) const {
  return root() / PathComponentFor(tenant) / PathComponentFor(id);
}

absl::StatusOr<Manifest> ManifestStore::Read(const std::filesystem::path& path) const {
  absl::StatusOr<std::string> bytes = SharedDirectory::ReadWhole(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<Manifest> manifest = ParseManifest(*bytes);
  if (!manifest.ok()) {
    return absl::DataLossError(absl::StrCat(path.string(), ": ", manifest.status().message()));
  }
  return manifest;
}

absl::StatusOr<uint64_t> ManifestStore::NewestNumber(const std::filesystem::path& dir) const {
  absl::StatusOr<std::vector<std::string>> names = SharedDirectory::ListNames(dir);
  if (!names.ok()) return names.status();
  uint64_t newest = 0;
  for (const std::string& name : *names) newest = std::max(newest, VersionOfFileName(name));
  // A listing may lag behind on a network filesystem; a lookup by name does not.
  while (Exists(dir / VersionFileName(newest + 1))) ++newest;
  return newest;
}

absl::StatusOr<Manifest> ManifestStore::Latest(const std::string& tenant,
                                               const std::string& id) const {
  const std::filesystem::path dir = DirOf(tenant, id);
  // Versions are never removed while newer ones are missing, but the garbage collector removes
  // older ones: a version listed and gone by the time it is read means a newer one exists.
  for (int attempt = 0; attempt < 8; ++attempt) {
    absl::StatusOr<uint64_t> newest = NewestNumber(dir);
    if (!newest.ok()) return newest.status();
    if (*newest == 0) return absl::NotFoundError(absl::StrCat("no manifest for ", id));
    absl::StatusOr<Manifest> manifest = Read(dir / VersionFileName(*newest));
    if (!absl::IsNotFound(manifest.status())) return manifest;
  }
  return absl::UnavailableError(absl::StrCat("manifest of ", id, " keeps changing; retry"));
}

absl::StatusOr<bool> ManifestStore::IsCurrent(const std::string& tenant, const std::string& id,
                                              uint64_t version) const {
  return !Exists(DirOf(tenant, id) / VersionFileName(version + 1));
}

absl::Status ManifestStore::Publish(Manifest manifest) const {
  if (manifest.version == 0) return absl::InvalidArgumentError("manifest version must be >= 1");
  manifest.written_unix_ms = NowUnixMs();
  manifest.writer = dir_->writer();
  const std::string bytes = SerializeManifest(manifest);
  const absl::Status status =
      dir_->Publish(DirOf(manifest.tenant, manifest.id) / VersionFileName(manifest.version),
                    PublishMode::kIfAbsent, [&](FileSink& sink) { return sink.Append(bytes); });
  if (absl::IsAlreadyExists(status)) {
    return absl::AbortedError(absl::StrCat("version ", manifest.version, " of ", manifest.id,
                                           " was published by another writer first"));
  }
  return status;
}

absl::StatusOr<std::vector<Manifest>> ManifestStore::ListTenant(const std::string& tenant) const {
  const std::filesystem::path tenant_dir = root() / PathComponentFor(tenant);
  absl::StatusOr<std::vector<std::string>> ids = SharedDirectory::ListNames(tenant_dir);
  if (!ids.ok()) return ids.status();
  std::vector<Manifest> out;
  for (const std::string& name : *ids) {
    absl::StatusOr<uint64_t> newest = NewestNumber(tenant_dir / name);
    if (!newest.ok()) return newest.status();
    if (*newest == 0) continue;
    absl::StatusOr<Manifest> manifest = Read(tenant_dir / name / VersionFileName(*newest));
    if (absl::IsNotFound(manifest.status())) continue;  // superseded meanwhile: skip this round
    if (!manifest.ok()) return manifest.status();
    out.push_back(*std::move(manifest));
  }
  std::sort(out.begin(), out.end(),
            [](const Manifest& a, const Manifest& b) { return a.id < b.id; });
  return out;
}

absl::StatusOr<std::vector<ManifestStore::NameVersions>> ManifestStore::ListAll() const {
  std::vector<NameVersions> out;
  absl::StatusOr<std::vector<std::string>> tenants = SharedDirectory::ListNames(root());
  if (!tenants.ok()) return tenants.status();
  for (const std::string& tenant : *tenants) {
    absl::StatusOr<std::vector<std::string>> ids = SharedDirectory::ListNames(root() / tenant);
    if (!ids.ok()) return ids.status();
    for (const std::string& id : *ids) {
      NameVersions name{root() / tenant / id, {}};
      absl::StatusOr<std::vector<std::string>> files = SharedDirectory::ListNames(name.dir);
      if (!files.ok()) return files.status();
      for (const std::string& file : *files) {
        if (const uint64_t v = VersionOfFileName(file); v > 0) {
          name.versions.push_back({name.dir / file, v});
        }
      }
      std::sort(name.versions.begin(), name.versions.end(),
                [](const VersionFile& a, const VersionFile& b) { return a.version < b.version; });
      out.push_back(std::move(name));
    }
  }
  return out;
}

}  // namespace manyshot::shared
