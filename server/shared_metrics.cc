#include "server/shared_metrics.h"

#include <string>

namespace manyshot::server {
namespace {

prometheus::Counter& NewCounter(prometheus::Registry& registry, const std::string& name,
                                const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

}  // namespace

SharedMetrics::SharedMetrics(prometheus::Registry& registry)
    : restores(NewCounter(registry, "manyshot_shared_restores_total",
                          "Contexts restored from the shared tier instead of encoded.")),
      mapped_restores(NewCounter(
          registry, "manyshot_shared_mapped_restores_total",
          "Restores served straight from the shared KV file's pages (mapped), then copied into "
          "this replica's memory in the background.")),
      detach_failures(NewCounter(
          registry, "manyshot_shared_detach_failures_total",
          "Mapped restores whose file could no longer be read before its pages were copied: "
          "the context was dropped from memory.")),
      read_bytes(NewCounter(registry, "manyshot_shared_read_bytes_total",
                            "KV payload bytes read (and verified) from the shared tier.")),
      revalidations(NewCounter(registry, "manyshot_shared_revalidations_total",
                               "Checks that a served task version is still the newest.")),
      version_switches(NewCounter(
          registry, "manyshot_shared_version_switches_total",
          "Task versions this replica took from the shared catalog (created, replaced or deleted "
          "by another replica).")),
      corrupt_reencodes(
          NewCounter(registry, "manyshot_shared_corrupt_reencodes_total",
                     "Damaged shared KV files found, re-encoded and replaced by this replica.")) {}

}  // namespace manyshot::server
