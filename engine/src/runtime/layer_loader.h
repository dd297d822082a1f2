// LayerLoader: brings each stream unit (a transformer block, or the output
// head) from the WeightSource into memory just before the math needs it.
//
//   sync mode: the compute thread reads and prepares each unit itself into a
//     single buffer; exactly one streamed unit is in memory at a time.
//   ring mode (default): worker threads owned by the loader (`load_threads`,
//     each loading a different unit) read and prepare the next units into a
//     ring of `n_buffers` buffers while the current one computes, so per-unit
//     time approaches max(I/O, compute).
//
// Which units stay resident (loaded once, never evicted) and which stream on
// every pass, the ring's size and the units' layout come from the MemoryPlan;
// as the KV cache grows, resident units give way (claim). A mixture of
// experts whose experts the budget cannot all hold keeps some by use
// instead: buffers for the experts used most lately (ExpertUse), which an
// expert streamed in takes over from a less used one.
//
// The compute thread announces the sequence of units it is about to need
// (announce), then takes each in turn (acquire ... release). The worker loads
// ahead along that sequence; when it runs out and a continuation is expected
// (the next decode step), it assumes a full pass from block 0 follows.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sipllm/engine_probe.h"

#include "model/model_description.h"
#include "runtime/expert_use.h"
#include "runtime/memory_plan.h"
#include "runtime/recent_rows.h"
#include "model/unit_weights.h"
#include "sipllm/error.h"
#include "sipllm/options.h"
#include "sipllm/stats.h"
#include "sipllm/weight_source.h"

namespace sipllm {

class LayerLoader {
 public:
  // Keeps resident, streams and lays out the units as `plan` says (made
  // from the same options); `options` gives the loading itself: the mode,
  // the threads, the read size, the prefetch on open.
  // The probe, when given, is told which unit the compute thread waits for
  // and of every load.
  LayerLoader(WeightSource& source, const ModelDescription& model, const MemoryPlan& plan,
              const LoaderOptions& options, EngineProbe* probe = nullptr);
  ~LayerLoader();
  LayerLoader(const LayerLoader&) = delete;
  LayerLoader& operator=(const LayerLoader&) = delete;

  int n_units() const { return static_cast<int>(plans_.size()); }
  bool is_resident(int unit) const { return plans_[static_cast<size_t>(unit)].resident; }

  // Takes `bytes` more of the memory budget for working memory (the KV cache
  // as the conversation grows): resident weights stream instead, the
  // embedding table first, then units in reverse stream order, until it
  // fits. Throws Error(kOutOfBudget) when even streaming everything leaves
  // too little. From the compute thread, between units.
  void claim(uint64_t bytes);
  // Gives back working memory claimed for something now freed.
  void unclaim(uint64_t bytes);

  // Appends units the compute thread will acquire next, in order.
  void announce(const std::vector<int>& units);
  // Puts the experts a layer's positions chose (known once it has routed)
  // before the units announced: the compute thread takes them first.
  // positions[i] positions chose units[i]; which experts stay kept goes by
  // these counts.
  void announce_experts(const std::vector<int>& units, const std::vector<int>& positions);
  // A pass over `positions` positions begins: the experts' earlier uses
  // count for less.
  void begin_pass(int positions);
  // Whether another pass over the model is expected after the announced units.
  void set_continuation(bool expected);

  // Blocks until `unit` is in memory, its weights ready for the kernels
  // (vectors as floats, matrices in their file type); throws Error naming the
  // unit on a read failure, kAborted after cancel(). The weights stay valid
  // until release().
  const UnitWeights& acquire(int unit);
  void release(int unit);

  // A small vector tensor outside the units (rope factors), read once, as floats.
  std::vector<float> read_vector(const GgufTensorInfo& tensor);

  // The tables read by row, a row per token: token_embd, and Gemma 4's
  // per_layer_token_embd (ModelDescription::per_layer_token_embd), which is
  // never in memory whole nor counted in the budget.
  enum class RowTable { kTokens, kPerLayer };
  // Writes the rows of tokens[0..n) in `table` as floats, n rows of its row
  // length (dim for token_embd): from memory when resident (token_embd
  // only), else with one small read per distinct row, issued together so
  // that a network source has them in flight at once.
  // The last per-layer rows read are kept (RecentRows), so that a token seen
  // again is not read again.
  void embed(const int32_t* tokens, int n, float* out, RowTable table = RowTable::kTokens);

  // Makes acquire() throw kAborted promptly and stops prefetching, until
  // clear_cancel(). Safe from any thread.
  void cancel();
  void clear_cancel();
  // Forgets announced units and discards streamed buffers (after an error or
  // cancellation), so the next request starts clean.
  void reset();

  LoaderStats stats() const;
  void reset_counters();  // zeroes counters and the timeline, keeps memory

 private:
  enum class SlotState { kFree, kLoading, kReady, kFailed, kInUse };
  struct AlignedFree {
    void operator()(uint8_t* p) const;
  };
  struct Buffer {
    std::unique_ptr<uint8_t[], AlignedFree> data;  // null for a part of kept_arena_
    uint8_t* part = nullptr;                       // that part
    size_t capacity = 0;
    uint8_t* bytes() const { return data != nullptr ? data.get() : part; }
  };
  struct Slot {
    SlotState state = SlotState::kFree;
    int unit = -1;
    Buffer buffer;
    UnitWeights view;
    std::string error;
    ErrorKind error_kind = ErrorKind::kIo;
    double io_start = 0, io_end = 0, prepare_end = 0;
    bool load_reported = true;  // whether a timeline event carries this load
    bool kept = false;          // a buffer of kept experts (kept_experts_)
    uint64_t generation = 0;  // bumps on reset, so a stale load is discarded
  };

  void create_ring();
  // Under mutex_: bytes of weights held or planned (resident units, the
  // ring, the embedding table), and whether any unit streams.
  uint64_t planned_weight_bytes() const;
  bool any_streamed() const;
  // Under mutex_: `unit` streams from now on; its resident buffer is freed.
  void demote(int unit);
  // Reads and prepares `unit` into `slot` (which the caller owns meanwhile).
  void load_into(int unit, Slot& slot);
  // Under mutex_: `slot` now holds `unit`, ready; adds its load to the stats.
  void mark_loaded(int unit, Slot& slot);
  void worker_loop();
  void stop_workers();
  // Under mutex_: the next (unit, slot) a worker should load, or false.
  bool next_job(int* unit, Slot** slot);
  // Under mutex_: the units to load next, in the order they will be needed.
  std::vector<int> lookahead() const;
  // Under mutex_: the ring's or the kept experts' slot holding or loading `unit`.
  Slot* find_slot(int unit) const;
  // Under mutex_: a kept experts' buffer for loading expert `unit` now: a
  // free one, or the least used of those `unit` outweighs
  // (ExpertUse::outweighs) and the lookahead does not want (`wanted`, its
  // units sorted); null when it should stream through the ring.
  Slot* kept_slot_for(int unit, const std::vector<int>& wanted);
  // Under mutex_: `slot` starts loading `unit` (what it kept, if anything, is gone).
  void begin_load(int unit, Slot& slot);
  // Under mutex_: a kept slot's expert is no longer in memory.
  void forget_kept(Slot& slot);
  // Under mutex_: frees one kept experts' buffer not in use (the least
  // used), for claim(); false when none is.
  bool drop_kept_buffer();
  double now() const;
  static double wall_clock_ms();
  void ensure_capacity(Buffer& buffer, size_t bytes);

  WeightSource& source_;
  EngineProbe* const probe_;
  const ModelDescription& model_;
  const LoaderMode mode_;
  const uint64_t budget_;
  uint64_t reserved_;            // working memory claimed within the budget
  const size_t largest_unit_;    // a ring buffer's bytes
  const size_t read_chunk_bytes_;
  const bool unpack_5bit_;       // MemoryPlan::unpack_5bit
  std::vector<UnitPlan> plans_;  // the plan's, a unit demoted as the KV cache grows (claim)
  std::vector<std::unique_ptr<Slot>> resident_;  // per unit; null when streamed
  std::vector<std::unique_ptr<Slot>> ring_;
  int ring_buffers_;  // what the budget allows of the ring asked for
  std::vector<std::unique_ptr<Slot>> kept_experts_;  // MemoryPlan::kept_expert_buffers
  const size_t kept_expert_bytes_;
  // Per expert unit (- first_expert), the kept buffer holding or loading
  // it (while that buffer is not free), or null.
  std::vector<Slot*> kept_holder_;
  // Natively, the kept buffers are parts of this one allocation (see the constructor).
  Buffer kept_arena_;
  ExpertUse expert_use_;  // by expert unit - model_.first_expert
  bool embedding_resident_;
  std::unique_ptr<Slot> embedding_;  // the whole token_embd when resident and untied
  std::unique_ptr<RecentRows> recent_per_layer_rows_;  // made on first use (compute thread only)

  mutable std::mutex mutex_;
  // The compute thread waits on changed_ (for a unit, for room in the
  // budget), the prefetch workers on work_: the compute thread's acquire and
  // release, twice per unit and token, wake the workers only when there is
  // something to load (each wake is a system call and a context switch, for
  // nothing once every unit is resident).
  std::condition_variable changed_;
  std::condition_variable work_;
  void wake_all();
  void wake_workers_if_work();  // with mutex_ held
  std::deque<int> announced_;
  int in_use_ = -1;
  bool continuation_ = false;
  bool stopping_ = false;
  bool halted_ = false;  // a load failed: prefetch nothing until asked again
  std::atomic<bool> cancelled_{false};
  uint64_t generation_ = 0;
  std::vector<std::thread> workers_;

  // Counters, under mutex_.
  LoaderStats stats_;
  uint64_t allocated_bytes_ = 0;
  int current_timeline_ = -1;
  double compute_start_ = 0;
  std::chrono::steady_clock::time_point epoch_;
};

}  // namespace sipllm
