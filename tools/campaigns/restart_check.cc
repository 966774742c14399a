#include "tools/campaigns/restart_check.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"

namespace manyshot::campaign {
namespace {

std::string Describe(Version v) { return v ? absl::StrCat("variant ", *v) : "absent"; }

std::string DescribeSet(const std::set<Version>& versions) {
  std::string out;
  for (Version v : versions) absl::StrAppend(&out, out.empty() ? "" : " or ", Describe(v));
  return out;
}

// Every task the server lists (all pages).
std::map<std::string, v1::Task> ListAll(v1::ManyShot::Stub& stub, Findings& findings) {
  std::map<std::string, v1::Task> tasks;
  std::string token;
  do {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::ListTasksRequest request;
    request.set_page_size(2);  // small pages: pagination is exercised too
    request.set_page_token(token);
    v1::ListTasksResponse response;
    grpc::Status s = stub.ListTasks(&context, request, &response);
    if (!s.ok()) {
      findings.Add("restart_failure", "ListTasks after restart: " + s.error_message());
      break;
    }
    for (const auto& t : response.tasks()) tasks[t.task_id()] = t;
    token = response.next_page_token();
  } while (!token.empty());
  return tasks;
}

}  // namespace

CheckFigures CheckAfterRestart(v1::ManyShot::Stub& stub, ExpectedState& state,
                               const ReferenceScores& reference, Findings& findings,
                               const std::filesystem::path& kv_files,
                               uint64_t other_tenants_kv_entries) {
  CheckFigures figures;
  const std::map<std::string, v1::Task> listed = ListAll(stub, findings);
  std::set<std::string> known(state.ids().begin(), state.ids().end());
  for (const auto& [id, task] : listed) {
    if (!known.count(id)) findings.Add("unexpected_task", "ListTasks shows unknown task " + id);
  }

  std::map<int, uint64_t> kv_bytes;  // distinct variants present -> their KV bytes
  for (const std::string& id : state.ids()) {
    ++figures.tasks_checked;
    const std::set<Version> acceptable = state.Acceptable(id);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::GetTaskRequest request;
    request.set_task_id(id);
    v1::Task task;
    grpc::Status s = stub.GetTask(&context, request, &task);
    Version found;
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
      if (listed.count(id)) findings.Add("partial", id + ": listed but GetTask is NOT_FOUND");
    } else if (!s.ok()) {
      findings.Add("restart_failure", id + ": GetTask: " + s.error_message());
      continue;
    } else {
      if (!listed.count(id)) findings.Add("partial", id + ": GetTask finds it, ListTasks not");
      if (task.state() != v1::TASK_STATE_READY) {
        // A kill must never leave ENCODING behind, and a killed create stores nothing (a FAILED
        // task after a restart is a quarantined, damaged record).
        findings.Add(task.state() == v1::TASK_STATE_ENCODING ? "partial" : "failed_after_restart",
                     absl::StrCat(id, ": state ", v1::TaskState_Name(task.state()), " (error \"",
                                  task.error(), "\"), expected ", DescribeSet(acceptable)));
        // Remove it so that the campaign can go on from a known state.
        grpc::ClientContext del_context;
        v1::DeleteTaskRequest del;
        del.set_task_id(id);
        v1::DeleteTaskResponse del_response;
        stub.DeleteTask(&del_context, del, &del_response);
        state.Resolve(id, std::nullopt);
        continue;
      }
      if (task.replacing()) findings.Add("partial", id + ": still `replacing` after a restart");
      found = reference.VariantOfHash(task.content_hash());
      if (!found) {
        findings.Add("partial", id + ": content hash " + task.content_hash() +
                                    " is none the campaign ever sent");
        continue;
      }
      kv_bytes[*found] = task.stats().cache_bytes();
    }
    if (!acceptable.count(found)) {
      const Version acked = state.Acked(id);
      const char* kind =
          !found ? "lost" : (!acked && acceptable.size() == 1 ? "resurrected" : "wrong_version");
      findings.Add(kind, absl::StrCat(id, ": found ", Describe(found), ", expected ",
                                      DescribeSet(acceptable)));
    }
    if (state.Pending(id) && acceptable.count(found)) {
      ++(found == state.Acked(id) ? figures.interrupted_kept_previous
                                  : figures.interrupted_took_effect);
    }
    state.Resolve(id, found);
    if (!found) continue;
    ++figures.tasks_present;
    v1::ClassifyResponse response;
    grpc::Status c = ClassifyTexts(stub, id, CheckInputs(), &response);
    if (!c.ok()) {
      findings.Add("score_mismatch", id + ": Classify after restart: " + c.error_message());
      continue;
    }
    std::string diff;
    if (!reference.Matches(*found, CheckInputs(), response, &diff)) {
      findings.Add("score_mismatch", absl::StrCat(id, " (", Describe(found), "): ", diff));
    }
    figures.scores_checked += static_cast<int>(CheckInputs().size());
  }

  // The store holds one KV entry per distinct content present (tasks share equal content), and
  // nothing of an interrupted create, replace or delete.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::ServerInfo info;
  grpc::Status s = stub.GetServerInfo(&context, v1::GetServerInfoRequest(), &info);
  if (!s.ok()) {
    findings.Add("restart_failure", "GetServerInfo: " + s.error_message());
    return figures;
  }
  uint64_t expected_bytes = 0;
  for (const auto& [variant, bytes] : kv_bytes) expected_bytes += bytes;
  if (info.tasks() != static_cast<uint64_t>(figures.tasks_present) ||
      info.cache().disk_entries() != kv_bytes.size() ||
      info.cache().disk_bytes() != expected_bytes) {
    findings.Add(
        "kv_accounting",
        absl::StrCat("the server reports ", info.tasks(), " tasks, ", info.cache().disk_entries(),
                     " KV entries, ", info.cache().disk_bytes(),
                     " KV bytes on disk; the tasks present need ", figures.tasks_present, ", ",
                     kv_bytes.size(), ", ", expected_bytes));
  }
  // The payload files: one per entry (Open removes temporaries and files no header names).
  std::error_code ec;
  uint64_t payloads = 0;
  std::vector<std::string> others;
  for (const auto& entry : std::filesystem::directory_iterator(kv_files, ec)) {
    if (entry.path().extension() == ".kv") {
      ++payloads;
    } else {
      others.push_back(entry.path().filename().string());
    }
  }
  if (ec && info.cache().disk_entries() > 0) {
    findings.Add("kv_accounting", "cannot list " + kv_files.string() + ": " + ec.message() +
                                      " (has the KV file layout changed?)");
  } else if (!ec && (payloads != info.cache().disk_entries() + other_tenants_kv_entries ||
                     !others.empty())) {
    findings.Add("kv_accounting",
                 absl::StrCat(kv_files.string(), " holds ", payloads, " .kv files for ",
                              info.cache().disk_entries() + other_tenants_kv_entries,
                              " KV entries, and ", others.size(), " other files",
                              others.empty() ? "" : " (" + others.front() + ")"));
  }
  return figures;
}

}  // namespace manyshot::campaign
