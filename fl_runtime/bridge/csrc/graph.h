// torch.accelerator.Graph on fl: PyTorch's GraphImplInterface (ATen/core/GraphImplInterface.h,
// torch >= 2.13), each call forwarded to a CapturedGraph of fl_runtime/ops/graph/graph_capture.py,
// which records the captured stream's vendor launches and replays them (docs/users/graph-capture.md).
#pragma once

#include <Python.h>

#if __has_include(<ATen/core/GraphImplInterface.h>)
#define FL_BRIDGE_HAS_GRAPH_IMPL 1
#include <ATen/core/GraphImplInterface.h>

namespace fl_bridge {

class Graph final : public at::GraphImplInterface {
 public:
  explicit Graph(at::GraphImplArgs args);
  ~Graph() override;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void capture_begin(at::MempoolId_t pool, at::GraphCaptureMode capture_mode) override;
  void capture_end() override;
  void instantiate() override;
  void replay() override;
  void reset() override;
  at::MempoolId_t pool() const override;
  // Declared by 2.13's interface, absent from earlier development snapshots: without
  // `override` these compile against both (and override where the base declares them).
  virtual void enable_debug_mode();
  virtual void debug_dump(const std::string& path);

 private:
  PyObject* graph_;      // a strong reference to the CapturedGraph
};

} // namespace fl_bridge
#endif

namespace fl_bridge {
// Registers Graph for fl with PyTorch's GraphImplRegistry; false on a torch without it.
bool register_graph_impl();
} // namespace fl_bridge
