#include "server/metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "absl/strings/str_cat.h"
#include "prometheus/gauge.h"
#include "server/build_info.h"
#include "server/process_metrics.h"

namespace manyshot::server {

void Metrics::SetBackend(const std::string& backend, const std::string& device,
                         const std::string& compute_dtype, const std::string& kv_dtype) {
  prometheus::BuildGauge()
      .Name("manyshot_backend_info")
      .Help("Always 1; labels describe the compute backend this server runs on.")
      .Register(*registry_)
      .Add({{"backend", backend},
            {"device", device},
            {"compute_dtype", compute_dtype},
            {"kv_dtype", kv_dtype}})
      .Set(1);
}

void Metrics::SetModel(const std::string& model_type, const std::string& architecture) {
  prometheus::BuildGauge()
      .Name("manyshot_model_info")
      .Help(
          "Always 1; labels describe the served model (architecture: decoder-only or "
          "encoder-decoder).")
      .Register(*registry_)
      .Add({{"model_type", model_type}, {"architecture", architecture}})
      .Set(1);
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Start(const std::string& address) {
  std::unique_ptr<Metrics> metrics(new Metrics());
  metrics->registry_ = std::make_shared<prometheus::Registry>();
  metrics->process_ = std::make_shared<ProcessMetrics>();
  prometheus::BuildGauge()
      .Name("manyshot_build_info")
      .Help("Always 1; labels describe the build.")
      .Register(*metrics->registry_)
      .Add({{"version", kVersion},
            {"compiler", kCompiler},
            {"build_type", kBuildType},
            {"cuda_built", kCudaEnabled ? "true" : "false"}})
      .Set(1);
  if (address.empty()) return metrics;
  try {
    // civetweb takes "host:port"; a single thread is plenty for scrapes.
    metrics->exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on --metrics_address=", address, ": ", e.what()));
  }
  metrics->exposer_->RegisterCollectable(metrics->registry_);
  metrics->exposer_->RegisterCollectable(metrics->process_);
  metrics->address_ = address;
  auto ports = metrics->exposer_->GetListeningPorts();
  metrics->port_ = ports.empty() ? 0 : ports.front();
  return metrics;
}

void Metrics::Register(std::shared_ptr<prometheus::Collectable> collectable) {
  if (exposer_) exposer_->RegisterCollectable(collectable);
}

namespace {

// The host to connect to for reaching a server bound to `address` ("host:port", "[v6]:port").
std::string LocalHostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

// One TCP connection to host:port, closed at once; false when it could not connect.
bool Poke(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool connected = false;
  for (addrinfo* a = found; a != nullptr && !connected; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
  }
  freeaddrinfo(found);
  return connected;
}

}  // namespace

Metrics::~Metrics() {
  if (!exposer_) return;
  // civetweb's listener polls its socket for up to 2 s before it sees the stop flag, so stopping
  // the exposer of an idle server took up to 2 s. Connections wake the poll: they are made until
  // the exposer is gone (the first after the stop flag is set ends the listener at once).
  std::atomic<bool> stopped{false};
  std::thread waker([&stopped, host = LocalHostOf(address_), port = port_] {
    while (!stopped.load()) {
      if (!Poke(host, port)) return;  // nothing listens any more
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  exposer_.reset();
  stopped.store(true);
  waker.join();
}

}  // namespace manyshot::server
