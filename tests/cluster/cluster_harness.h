// A cluster on loopback for tests: manyshot-server replicas that share one directory
// (--shared_dir), each with its own local data directory and port, and a real HAProxy running
// deploy/proxy/haproxy.cfg.template in front of them (rendered by render-haproxy-cfg.sh).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/channel.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/server_under_test.h"
#include "tests/cluster/task_classify.h"

namespace manyshot::testing {

// haproxy: $MANYSHOT_HAPROXY, else /usr/sbin/haproxy; "" when there is none.
std::string HaproxyBinary();

// HAProxy in master-worker mode (-W) in its own process group; Reload() renders the
// configuration for a new replica set and sends SIGUSR2 (what an operator does).
class HaproxyUnderTest {
 public:
  HaproxyUnderTest(const std::filesystem::path& dir, const std::vector<std::string>& replicas);
  ~HaproxyUnderTest();
  HaproxyUnderTest(const HaproxyUnderTest&) = delete;
  HaproxyUnderTest& operator=(const HaproxyUnderTest&) = delete;

  bool started() const { return port_ > 0; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // The replicas HAProxy's health checks hold UP (server name -> up), from its /metrics.
  std::map<std::string, bool> ServersUp() const;
  // Waits until exactly `up` servers are UP (false after `limit`); DOWN ones may be listed too.
  bool WaitForServersUp(size_t up, std::chrono::seconds limit = std::chrono::seconds(30)) const;
  // Requests HAProxy sent to each server (name -> count), from its /metrics.
  std::map<std::string, double> RequestsPerServer() const;
  bool Reload(const std::vector<std::string>& replicas);
  std::string Logs() const;

 private:
  bool Render(const std::vector<std::string>& replicas);
  bool Start();
  void Stop();

  std::filesystem::path dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  int metrics_port_ = 0;
};

// One replica: its own data directory, the cluster's shared directory, the cluster's model.
struct Replica {
  std::filesystem::path data_dir;
  std::vector<std::string> flags;
  std::unique_ptr<ServerUnderTest> server;

  bool Start();
  std::string address() const { return server ? server->address() : ""; }
  // A metric of its /metrics (0 when absent).
  double Metric(const std::string& name,
                const std::map<std::string, std::string>& labels = {}) const;
  std::unique_ptr<v1::ManyShot::Stub> Stub() const;
};

// N replicas sharing `root`/shared; the first generates the default model, which the others
// serve too (the same weights everywhere, so scores agree across replicas).
class Cluster {
 public:
  explicit Cluster(const std::filesystem::path& root) : root_(root) {}
  // Starts one more replica (empty local directory) with `extra_flags`; false when it did not
  // start.
  bool Add(const std::vector<std::string>& extra_flags = {});
  std::vector<Replica>& replicas() { return replicas_; }
  std::vector<std::string> Addresses() const;
  std::filesystem::path shared_dir() const { return root_ / "shared"; }
  // The sum of a metric over every running replica.
  double Sum(const std::string& name) const;

 private:
  std::filesystem::path root_;
  std::string model_dir_;
  std::vector<Replica> replicas_;
};

// The demonstrations of variant `i` (tsv): different variants differ in content.
std::string DemonstrationsTsv(int i);
// `manyshot create` of task `id` with variant `i` on `server`; the CLI's result.
CommandResult CreateWithCli(const std::string& server, const std::string& id, int variant,
                            const std::filesystem::path& work, bool replace = false);
// A channel with the documented retry policy (deploy/proxy/grpc_service_config.json).
std::shared_ptr<grpc::Channel> RetryingChannel(const std::string& address);
// True when the scores agree within `tolerance` each.
bool SameScores(const std::vector<double>& a, const std::vector<double>& b,
                double tolerance = 1e-6);

}  // namespace manyshot::testing
