#include "engine/backends/backend_factory.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_plugin.h"

namespace manyshot {
namespace {

// The CUDA plugin (engine/cuda/cuda_plugin.h), loaded once; never unloaded (its code owns the
// backends and tensors it made).
absl::StatusOr<const CudaPlugin*> LoadCudaPlugin() {
#if MANYSHOT_CUDA_ENABLED
  static const absl::StatusOr<const CudaPlugin*> plugin =
      []() -> absl::StatusOr<const CudaPlugin*> {
    std::string errors;
    // MANYSHOT_CUDA_PLUGIN names another build of the plugin to load instead (the tests' build
    // of the CUDA backend on the SIMT emulator, testing/simt); it is the only one tried then.
    const char* chosen = std::getenv("MANYSHOT_CUDA_PLUGIN");
    std::vector<const char*> paths = {MANYSHOT_CUDA_PLUGIN_PATH, "libmanyshot_cuda.so"};
    if (chosen != nullptr && *chosen != '\0') paths = {chosen};
    for (const char* path : paths) {
      void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* error = dlerror();
        absl::StrAppend(&errors, errors.empty() ? "" : "; ", error ? error : path);
        continue;
      }
      using Entry = const CudaPlugin* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(handle, "manyshot_cuda_plugin"));
      const CudaPlugin* p = entry ? entry() : nullptr;
      if (p == nullptr || p->abi_version != CudaPlugin::kAbiVersion) {
        return absl::FailedPreconditionError(
            absl::StrCat(path, " is not a manyshot CUDA plugin of this version"));
      }
      if (p->abi_hash == nullptr || std::string_view(p->abi_hash) != MANYSHOT_CUDA_PLUGIN_ABI) {
        return absl::FailedPreconditionError(absl::StrCat(
            path, " was built from other engine headers than this program (plugin ABI ",
            p->abi_hash ? p->abi_hash : "none", ", program ", MANYSHOT_CUDA_PLUGIN_ABI,
            "): use the libmanyshot_cuda.so built with this program"));
      }
      return p;
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load the CUDA backend plugin: ", errors));
  }();
  return plugin;
#else
  return absl::FailedPreconditionError(
      "this build has no CUDA backend (configure with nvcc available, MANYSHOT_CUDA=ON)");
#endif
}

// The plugin once it has created a backend: only then can a device fault (DeviceFault).
std::atomic<const CudaPlugin*> g_plugin_in_use{nullptr};

}  // namespace

absl::StatusOr<BackendKind> ParseBackendKind(const std::string& name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend \"", name, "\": expected cpu or cuda"));
}

const char* BackendKindName(BackendKind kind) {
  return kind == BackendKind::kCuda ? "cuda" : "cpu";
}

bool CudaBuilt() { return MANYSHOT_CUDA_ENABLED != 0; }

absl::StatusOr<int> CudaDevicesAvailable() {
  auto plugin = LoadCudaPlugin();
  if (!plugin.ok()) return plugin.status();
  return (*plugin)->device_count();
}

absl::StatusOr<void*> CudaPluginFunction(const char* name) {
  auto plugin = LoadCudaPlugin();
  if (!plugin.ok()) return plugin.status();
  void* function = (*plugin)->get_proc_address(name);
  if (function == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("the CUDA plugin has no function named \"", name ? name : "(null)", "\""));
  }
  return function;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, int device, int threads) {
  if (device < 0) return absl::InvalidArgumentError(absl::StrCat("device ", device, " < 0"));
  if (kind == BackendKind::kCpu) {
    if (device != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the cpu backend has one device (0), not ", device));
    }
    return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(threads));
  }
  auto count = CudaDevicesAvailable();
  if (!count.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the cuda backend cannot start: ", count.status().message()));
  }
  const CudaPlugin* plugin = *LoadCudaPlugin();
  absl::StatusOr<std::unique_ptr<Backend>> backend = plugin->create_backend(device);
  if (backend.ok()) g_plugin_in_use = plugin;
  return backend;
}

absl::Status SetGpuPoolReleaseThreshold(int device, uint64_t bytes) {
  const CudaPlugin* plugin = g_plugin_in_use.load();
  if (plugin == nullptr) {
    return absl::FailedPreconditionError("no CUDA backend has been created in this process");
  }
  return plugin->set_pool_release_threshold(device, bytes);
}

absl::Status DeviceFault() {
  const CudaPlugin* plugin = g_plugin_in_use.load();
  return plugin != nullptr ? plugin->device_fault() : absl::OkStatus();
}

BackendKind DefaultBackendKind(std::string* why) {
  auto count = CudaDevicesAvailable();
  if (count.ok() && *count > 0) {
    if (why) *why = absl::StrCat(*count, " CUDA device(s) found");
    return BackendKind::kCuda;
  }
  if (why) *why = absl::StrCat("no usable GPU: ", count.status().message());
  return BackendKind::kCpu;
}

}  // namespace manyshot
