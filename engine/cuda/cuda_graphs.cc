// CUDA graphs: the calling thread's stream records its ops (cudaStreamBeginCapture, thread-local
// mode, so other threads keep allocating and launching meanwhile) and the graph replays them in
// one launch. Temporaries the ops allocate and free while recording (attention's split-K partials
// and context state) become the graph's own allocation nodes; a GEMM recorded here uses a
// workspace of the graph's own too, since the replay may run on another thread's stream while
// this thread's workspace serves its next eager GEMM.
#include <memory>

#include "engine/cuda/cuda_backend_impl.h"

namespace manyshot {
namespace cuda_internal {
namespace {

class CudaGraph final : public CapturedWork {
 public:
  explicit CudaGraph(cudaGraphExec_t exec) : exec_(exec) {}
  ~CudaGraph() override {
    if (cudaGraphExecDestroy(exec_) != cudaSuccess) (void)cudaGetLastError();
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraphExec_t exec_;
};

}  // namespace

absl::StatusOr<void*> ThreadState::GemmWorkspace() {
  if (!capturing) return workspace;
  if (capture_workspace == nullptr) {
    void* ws = nullptr;
    absl::Status s = CudaCheck("cudaMallocAsync(captured cuBLASLt workspace)",
                               cudaMallocAsync(&ws, GemmPlan::kWorkspaceBytes, stream));
    if (!s.ok()) return s;
    capture_workspace = ws;
  }
  return capture_workspace;
}

}  // namespace cuda_internal

using cuda_internal::CudaCheck;

absl::Status CudaBackend::BeginCaptureImpl() {
  absl::StatusOr<cuda_internal::ThreadState*> state = context_->State();
  if (!state.ok()) return state.status();
  if ((*state)->capturing) return absl::FailedPreconditionError("a capture is already recording");
  absl::Status s =
      CudaCheck("cudaStreamBeginCapture",
                cudaStreamBeginCapture((*state)->stream, cudaStreamCaptureModeThreadLocal));
  if (s.ok()) (*state)->capturing = true;
  return s;
}

absl::StatusOr<std::unique_ptr<CapturedWork>> CudaBackend::EndCaptureImpl() {
  absl::StatusOr<cuda_internal::ThreadState*> state_or = context_->State();
  if (!state_or.ok()) return state_or.status();
  cuda_internal::ThreadState* state = *state_or;
  if (!state->capturing) return absl::FailedPreconditionError("no capture is recording");
  state->capturing = false;
  // The workspace's free node, so the graph owns it whole.
  absl::Status freed = absl::OkStatus();
  if (state->capture_workspace != nullptr) {
    freed = CudaCheck("cudaFreeAsync(captured cuBLASLt workspace)",
                      cudaFreeAsync(state->capture_workspace, state->stream));
    state->capture_workspace = nullptr;
  }
  cudaGraph_t graph = nullptr;
  absl::Status ended =
      CudaCheck("cudaStreamEndCapture", cudaStreamEndCapture(state->stream, &graph));
  if (!freed.ok() || !ended.ok()) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    return freed.ok() ? ended : freed;
  }
  cudaGraphExec_t exec = nullptr;
  absl::Status made = CudaCheck("cudaGraphInstantiate", cudaGraphInstantiate(&exec, graph, 0));
  (void)cudaGraphDestroy(graph);  // the instance is all a replay needs
  if (!made.ok()) return made;
  return std::unique_ptr<CapturedWork>(std::make_unique<cuda_internal::CudaGraph>(exec));
}

absl::Status CudaBackend::ReplayImpl(const CapturedWork& work) {
  const auto* graph = dynamic_cast<const cuda_internal::CudaGraph*>(&work);
  if (graph == nullptr) return absl::InvalidArgumentError("Replay: work another backend captured");
  absl::StatusOr<cuda_internal::ThreadState*> state = context_->State();
  if (!state.ok()) return state.status();
  return CudaCheck("cudaGraphLaunch", cudaGraphLaunch(graph->exec(), (*state)->stream));
}

}  // namespace manyshot
