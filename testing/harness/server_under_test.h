// The real manyshot-server binary on 127.0.0.1 with ephemeral gRPC and metrics ports.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grpcpp/channel.h"
#include "testing/harness/subprocess.h"

namespace manyshot::testing {

// build/server/manyshot-server and build/client/manyshot, or $MANYSHOT_TEST_BIN_DIR/manyshot-server
// and .../manyshot where the environment sets it (tools/gpu's bundles).
std::string ServerBinary();
std::string CliBinary();

// How long a test waits for the server to exit after SIGTERM: a hang detector far above the
// --shutdown_grace_seconds default (10 s), not a timing claim (loaded machines are slow).
inline constexpr std::chrono::seconds kExitLimit{60};

class ServerUnderTest {
 public:
  // Starts the server with --data_dir=data_dir and extra flags; waits until it has written its
  // port file (fails the test after `startup_timeout`).
  ServerUnderTest(const std::filesystem::path& data_dir,
                  const std::vector<std::string>& extra_flags,
                  std::chrono::seconds startup_timeout = std::chrono::seconds(60));

  bool started() const { return grpc_port_ > 0; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(grpc_port_); }
  std::shared_ptr<grpc::Channel> Channel() const;
  Subprocess& process() { return *process_; }
  std::string Stderr() const { return ReadFile(stderr_path_); }
  // SIGTERM, then expects a clean exit (status 0) within kExitLimit.
  void StopCleanly();

 private:
  std::filesystem::path stderr_path_;
  std::unique_ptr<Subprocess> process_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
};

// A plain HTTP/1.0 GET to 127.0.0.1:port; returns the body ("" on failure) and the status code.
struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};
HttpResponse HttpGet(int port, const std::string& path);

// Sends `raw` bytes to 127.0.0.1:port and returns everything the server answered until it closed
// the connection (at most `limit` for the whole exchange). With `half_close` the sending side is
// closed after `raw`, so an incomplete request ends at once instead of at the server's read
// timeout; the metrics server then drops the connection without an answer, as it may. nullopt
// when nothing could connect or the server did not close in time (then `why`, when given, says
// which).
std::optional<std::string> HttpExchange(int port, std::string_view raw, bool half_close,
                                        std::chrono::milliseconds limit = std::chrono::seconds(30),
                                        std::string* why = nullptr);

}  // namespace manyshot::testing
