#include "server/metrics_http.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"
#include "server/host_port.h"

namespace manyshot::server {

namespace {

constexpr char kPrometheusTextType[] = "text/plain; version=0.0.4; charset=utf-8";
// Requests here are GETs: a body is never needed, so a large one is refused unread.
constexpr size_t kMaxRequestBodyBytes = 64 * 1024;

// The body of an error response that has none yet: short, and never echoing the request. The
// client is told to close; one that does not is dropped after kKeepAliveSeconds.
void DescribeError(const httplib::Request& /*request*/, httplib::Response& response) {
  response.set_header("Connection", "close");
  if (!response.body.empty()) return;
  if (response.status == 404) {
    response.set_content("not found: this port serves only /metrics\n", "text/plain");
  } else {
    response.set_content(absl::StrCat("HTTP ", response.status, "\n"), "text/plain");
  }
}

}  // namespace

MetricsHttpServer::MetricsHttpServer() : http_(std::make_unique<httplib::Server>()) {}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, Collect collect) {
  auto host_port = SplitHostPort("metrics_address", address);
  if (!host_port.ok()) return host_port.status();
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  httplib::Server& http = *server->http_;
  http.new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  http.set_read_timeout(kReadTimeoutSeconds, 0);
  http.set_keep_alive_timeout(kKeepAliveSeconds);
  http.set_write_timeout(kReadTimeoutSeconds, 0);
  http.set_payload_max_length(kMaxRequestBodyBytes);
  http.Get("/metrics", [collect = std::move(collect)](const httplib::Request&,
                                                      httplib::Response& response) {
    response.set_content(prometheus::TextSerializer().Serialize(collect()), kPrometheusTextType);
  });
  http.set_error_handler(DescribeError);
  // cpp-httplib's defaults add SO_REUSEPORT (a second server could share the port unnoticed) and
  // listen with a backlog of 5 (a burst of connections is dropped while the workers are busy):
  // SO_REUSEADDR only, and the listening socket's fd is kept to raise the backlog below.
  http.set_socket_options([s = server.get()](int fd) {
    int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    s->listening_fd_ = fd;
  });
  const auto& [host, port] = *host_port;
  server->port_ =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (server->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on --metrics_address=", address, ": cannot bind ", host,
                     ":", port, " (in use, or not an address of this machine)"));
  }
  // Linux takes a second listen() on a listening socket as a new backlog.
  if (listen(server->listening_fd_, SOMAXCONN) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve /metrics on --metrics_address=",
                                               address, ": listen: ", std::strerror(errno)));
  }
  server->listener_ = std::thread([s = server.get()] { s->Serve(); });
  // stop() is a no-op until the listener runs: wait for it, so the destructor can always stop it.
  while (!http.is_running() && !server->listener_finished_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return server;
}

void MetricsHttpServer::Serve() {
  http_->listen_after_bind();
  listener_finished_.store(true);
}

MetricsHttpServer::~MetricsHttpServer() {
  if (!listener_.joinable()) return;
  http_->stop();
  listener_.join();
}

}  // namespace manyshot::server
