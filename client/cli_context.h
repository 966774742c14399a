// What every `manyshot` subcommand gets: a channel to the server, output preferences, positional
// arguments. Subcommands return a process exit code.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace manyshot::client {

struct CliContext {
  std::shared_ptr<grpc::Channel> channel;
  std::string server;  // host:port, for messages
  bool json = false;   // --json: one JSON document on stdout instead of human text
  int timeout_seconds = 30;
  // True when --timeout was given: streaming calls (create, classify --stream, generate) then get
  // it as their deadline too; by default they run without one, as encoding 100k demonstrations may
  // take longer than any sensible per-call deadline.
  bool timeout_explicit = false;
  std::vector<std::string> args;  // after the subcommand name
  // Repeatable flags (--candidate, --stop, --field): every value, in order.
  std::map<std::string, std::vector<std::string>> repeated;

  // A ClientContext with the --timeout deadline applied.
  std::unique_ptr<grpc::ClientContext> NewCall() const;
  // A ClientContext for a streaming call: the deadline only when --timeout was given.
  std::unique_ptr<grpc::ClientContext> NewStreamingCall() const;
  // Values of a repeatable flag (empty when not given).
  const std::vector<std::string>& Repeated(const std::string& name) const;
};

// Prints "manyshot: <command>: <message>" on stderr; returns exit code 2 (a usage error).
int ReportUsageError(const std::string& command, const std::string& message);

// Prints a failed call as "manyshot: <command>: <CODE>: <message>" on stderr; returns exit code 1.
int ReportRpcError(const std::string& command, const grpc::Status& status);

// A message as JSON (proto field names), on one line.
std::string ToJson(const google::protobuf::Message& message);

}  // namespace manyshot::client
