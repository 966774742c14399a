// manyshot: the command-line client for manyshot-server.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "client/commands.h"
#include "grpcpp/create_channel.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "manyshot-server address host:port");
ABSL_FLAG(bool, json, false, "Print one JSON document instead of human-readable text");
ABSL_FLAG(int, timeout, 30, "Per-call deadline in seconds");

namespace {

constexpr char kUsage[] =
    "manyshot: command-line client for manyshot-server\n"
    "usage: manyshot [--server=HOST:PORT] [--json] [--timeout=SECONDS] COMMAND [ARGS]\n"
    "commands:\n"
    "  health [SERVICE]   health check; exit status 0 when SERVING\n"
    "  info               model, backend, cache and limits of the server\n";

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  manyshot::client::CliContext cli;
  cli.server = absl::GetFlag(FLAGS_server);
  cli.json = absl::GetFlag(FLAGS_json);
  cli.timeout_seconds = absl::GetFlag(FLAGS_timeout);
  cli.channel = grpc::CreateChannel(cli.server, grpc::InsecureChannelCredentials());
  std::string command = positional[1];
  cli.args.assign(positional.begin() + 2, positional.end());
  if (command == "health") return manyshot::client::RunHealth(cli);
  if (command == "info") return manyshot::client::RunInfo(cli);
  std::fprintf(stderr, "manyshot: unknown command '%s'\n%s", command.c_str(), kUsage);
  return 2;
}
