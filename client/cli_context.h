// What every `manyshot` subcommand gets: a channel to the server, output preferences, positional
// arguments. Subcommands return a process exit code.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace manyshot::client {

struct CliContext {
  std::shared_ptr<grpc::Channel> channel;
  std::string server;  // host:port, for messages
  bool json = false;   // --json: one JSON document on stdout instead of human text
  int timeout_seconds = 30;
  std::vector<std::string> args;  // after the subcommand name

  // A ClientContext with the --timeout deadline applied.
  std::unique_ptr<grpc::ClientContext> NewCall() const;
};

// Prints a failed call as "manyshot: <command>: <CODE>: <message>" on stderr; returns exit code 1.
int ReportRpcError(const std::string& command, const grpc::Status& status);

}  // namespace manyshot::client
