#include "runtime/layer_loader.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

#include "kernels/matmul.h"
#include "model/half.h"

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace sipllm {
namespace {

#if defined(__linux__)
// Buffers start on a huge page boundary and ask for huge pages: a first pass
// writes every page of them, and with 4 KiB pages the kernel's page faults
// took as long as the prefill's compute (natively, on a virtual machine).
constexpr size_t kAllocationAlignment = size_t{2} << 20;
#else
constexpr size_t kAllocationAlignment = 64;
#endif
constexpr size_t kMaxTimelineEvents = 1 << 14;

}  // namespace

// ---- Construction -------------------------------------------------------------

void LayerLoader::create_ring() {
  for (int i = 0; i < ring_buffers_; ++i) {
    ring_.push_back(std::make_unique<Slot>());
    ensure_capacity(ring_.back()->buffer, largest_unit_);
    stats_.ring_bytes += largest_unit_;
  }
}

uint64_t LayerLoader::planned_weight_bytes() const {
  uint64_t total = static_cast<uint64_t>(ring_.size()) * largest_unit_ +
                   static_cast<uint64_t>(kept_experts_.size()) * kept_expert_bytes_;
  for (const UnitPlan& p : plans_) {
    if (p.resident) total += p.buffer_bytes;
  }
  if (embedding_resident_) total += model_.token_embd->bytes;
  return total;
}

void LayerLoader::demote(int unit) {
  UnitPlan& plan = plans_[static_cast<size_t>(unit)];
  plan.resident = false;
  if (resident_[static_cast<size_t>(unit)] != nullptr) {
    allocated_bytes_ -= resident_[static_cast<size_t>(unit)]->buffer.capacity;
    resident_[static_cast<size_t>(unit)].reset();
  }
  stats_.units[static_cast<size_t>(unit)].resident = false;
  --stats_.resident_units;
  ++stats_.streamed_units;
}

void LayerLoader::claim(uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (budget_ == kUnlimitedBudget || budget_ == 0) {
    reserved_ += bytes;
    return;
  }
  for (;;) {
    const uint64_t weights = planned_weight_bytes();
    const uint64_t ring_needed = ring_.empty() ? static_cast<uint64_t>(ring_buffers_) * largest_unit_ : 0;
    if (weights + reserved_ + bytes <= budget_ && (ring_needed == 0 || !any_streamed())) break;
    // Something must stream instead of staying: the embedding table first,
    // then the kept experts' buffers, then the units in reverse stream
    // order, none that is being loaded or used right now.
    if (embedding_resident_ && embedding_->state != SlotState::kLoading) {
      embedding_resident_ = false;
      allocated_bytes_ -= embedding_->buffer.capacity;
      embedding_.reset();
    } else if (!drop_kept_buffer()) {
      int victim = -1;
      bool busy = false;
      for (int u = n_units() - 1; u >= 0 && victim < 0; --u) {
        const Slot* slot = resident_[static_cast<size_t>(u)].get();
        if (!plans_[static_cast<size_t>(u)].resident || slot == nullptr) continue;
        if (slot->state == SlotState::kLoading || slot->state == SlotState::kInUse) {
          busy = true;
        } else {
          victim = u;
        }
      }
      if (victim >= 0) {
        demote(victim);
      } else if (busy) {
        changed_.wait(lock);
        continue;
      } else {
        throw Error(ErrorKind::kOutOfBudget,
                    "the memory budget of " + std::to_string(budget_) + " bytes is full: " +
                        std::to_string(bytes) + " more bytes for the KV cache do not fit beside " +
                        std::to_string(reserved_) + " bytes of working memory and the prefetch ring of " +
                        std::to_string(weights) + " bytes");
      }
    }
    if (ring_.empty() && any_streamed()) {
      const uint64_t room = budget_ > reserved_ + bytes ? budget_ - reserved_ - bytes : 0;
      ring_buffers_ = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(ring_buffers_), room / largest_unit_));
      if (ring_buffers_ < 1) ring_buffers_ = 1;  // the next round refuses if even that does not fit
      create_ring();
    }
  }
  reserved_ += bytes;
  wake_all();
}

void LayerLoader::unclaim(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  reserved_ -= std::min(reserved_, bytes);
}

bool LayerLoader::any_streamed() const {
  for (const UnitPlan& p : plans_) {
    if (!p.resident) return true;
  }
  return false;
}

LayerLoader::LayerLoader(WeightSource& source, const ModelDescription& model, const MemoryPlan& plan,
                         const LoaderOptions& options, EngineProbe* probe)
    : source_(source),
      probe_(probe),
      model_(model),
      mode_(options.mode),
      budget_(plan.budget),
      reserved_(plan.working.total()),
      largest_unit_(plan.ring_buffer_bytes),
      read_chunk_bytes_(std::max<size_t>(options.read_chunk_bytes, 1 << 16)),
      unpack_5bit_(plan.unpack_5bit),
      plans_(plan.units),
      ring_buffers_(plan.ring_buffers),
      kept_expert_bytes_(plan.kept_expert_bytes),
      expert_use_(model.n_units() - model.first_expert, model.shape.n_experts),
      embedding_resident_(plan.embedding_resident),
      epoch_(std::chrono::steady_clock::now()) {
  stats_.timeline_origin_ms = wall_clock_ms();
  stats_.unpacked_5bit = unpack_5bit_;
  stats_.activation_bytes = plan.working.activations;
  stats_.prefill_chunk = plan.prefill_chunk;
  if (options.load_threads < 0) {
    throw Error(ErrorKind::kInvalidArgument,
                "load_threads must be 0 (as the source prefers) or more, not " + std::to_string(options.load_threads));
  }
  resident_.resize(plans_.size());
  for (size_t u = 0; u < plans_.size(); ++u) {
    stats_.units.push_back(
        {plans_[u].name, 0, plans_[u].read_bytes, plans_[u].buffer_bytes, 0, 0, 0, 0, plans_[u].resident});
    if (plans_[u].resident) {
      resident_[u] = std::make_unique<Slot>();
      ++stats_.resident_units;
    } else {
      ++stats_.streamed_units;
    }
  }
  // Ring buffers take the largest unit, streamed or not, so that a unit the
  // budget later makes stream (see claim) fits too.
  if (any_streamed()) create_ring();
  // Allocated as experts come to fill them.
  for (int i = 0; i < plan.kept_expert_buffers; ++i) {
    kept_experts_.push_back(std::make_unique<Slot>());
    kept_experts_.back()->kept = true;
  }
  if (!kept_experts_.empty()) kept_holder_.assign(static_cast<size_t>(n_units() - model_.first_expert), nullptr);
#if defined(__linux__)
  // Natively, one allocation holds them all, in huge pages throughout:
  // buffers of their own, each 2 MiB-aligned, leave each one's tail (0.6 MB
  // of a 2.6 MB expert) to 4 KiB pages, which doubled the page faults of the
  // first prompt (qwen3-30b-a3b at 4 GiB: 330 k against 164 k, at ~13 us
  // each on a virtual machine). (In WebAssembly there are no huge pages, and
  // a buffer of its own that claim() drops goes back to malloc, for the KV
  // cache.)
  if (!kept_experts_.empty()) {
    ensure_capacity(kept_arena_, kept_expert_bytes_ * kept_experts_.size());
    for (size_t i = 0; i < kept_experts_.size(); ++i) {
      kept_experts_[i]->buffer.part = kept_arena_.data.get() + i * kept_expert_bytes_;
      kept_experts_[i]->buffer.capacity = kept_expert_bytes_;
    }
  }
#endif
  if (embedding_resident_) embedding_ = std::make_unique<Slot>();
  if (mode_ == LoaderMode::kRing) {
    try {
      const int n = options.load_threads > 0 ? options.load_threads : std::max(1, source_.parallel_reads());
      stats_.load_threads = n;
      for (int i = 0; i < n; ++i) workers_.emplace_back([this] { worker_loop(); });
    } catch (...) {
      stop_workers();  // a constructor that throws runs no destructor
      throw;
    }
    if (options.prefetch_on_open) set_continuation(true);
  }
}

LayerLoader::~LayerLoader() { stop_workers(); }

void LayerLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    cancelled_ = true;
  }
  wake_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
}

void LayerLoader::AlignedFree::operator()(uint8_t* p) const {
  ::operator delete[](p, std::align_val_t(kAllocationAlignment));
}

void LayerLoader::ensure_capacity(Buffer& buffer, size_t bytes) {
  if (buffer.capacity >= bytes) return;
  buffer.data.reset(static_cast<uint8_t*>(::operator new[](bytes, std::align_val_t(kAllocationAlignment))));
#if defined(__linux__)
  // Whole huge pages only, so that the memory used stays the buffer's size.
  // A hint: failing changes nothing else.
  const size_t huge_bytes = bytes / kAllocationAlignment * kAllocationAlignment;
  if (huge_bytes > 0) madvise(buffer.data.get(), huge_bytes, MADV_HUGEPAGE);
#endif
  allocated_bytes_ += bytes - buffer.capacity;
  buffer.capacity = bytes;
  stats_.peak_weight_bytes = std::max(stats_.peak_weight_bytes, allocated_bytes_);
}

double LayerLoader::wall_clock_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double LayerLoader::now() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - epoch_).count();
}

// ---- Loading one unit --------------------------------------------------------

void LayerLoader::load_into(int unit, Slot& slot) {
  const UnitPlan& plan = plans_[static_cast<size_t>(unit)];
  const UnitTensors& tensors = model_.units[static_cast<size_t>(unit)];
  uint8_t* base = slot.buffer.bytes();
  slot.load_reported = false;
  slot.io_start = now();
  for (const UnitPlan::ReadRange& range : plan.ranges) {
    for (uint64_t done = 0; done < range.length;) {
      if (cancelled_) throw Error(ErrorKind::kAborted, "loading " + plan.name + " was cancelled");
      const auto n = static_cast<size_t>(std::min<uint64_t>(read_chunk_bytes_, range.length - done));
      try {
        source_.read(range.file_offset + done, base + range.buffer_offset + done, n);
      } catch (const Error& e) {
        throw Error(e.kind(), plan.name + ": " + e.what());
      }
      done += n;
    }
  }
  slot.io_end = now();

  // Prepare: each tensor moved to its place (see plan_unit), unpacked where
  // the kernels want it so; the weights by name, for the kernels; float
  // copies of vectors stored in 16 bits; a fused matrix split into the
  // matrices it feeds.
  for (size_t i : plan.moves) {
    const TensorSlice& slice = tensors.tensors[i];
    const uint8_t* from = base + plan.read_offsets[i];
    uint8_t* to = base + plan.tensor_offsets[i];
    const TensorType type = slice.tensor->type;
    if (prepared_type(slice, unpack_5bit_) != type) {
      const uint64_t elements = slice.rows * slice.tensor->row_length();
      unpack_5bit_blocks_simd(type, from, to, static_cast<size_t>(elements / tensor_type_traits(type).block_elements));
    } else if (to != from) {  // those after the last unpacked one are in place
      std::memmove(to, from, static_cast<size_t>(slice.bytes()));
    }
  }
  slot.view = UnitWeights{};
  for (size_t i = 0; i < tensors.tensors.size(); ++i) {
    const TensorSlice& slice = tensors.tensors[i];
    const TensorSpec& spec = *slice.spec;
    const uint8_t* data = base + plan.tensor_offsets[i];
    if (spec.is_vector()) {
      if (plan.vector_offsets[i] == SIZE_MAX) {
        slot.view.*spec.vector = reinterpret_cast<const float*>(data);
      } else {
        auto* out = reinterpret_cast<float*>(base + plan.vector_offsets[i]);
        dequantize_row(slice.tensor->type, data, out, static_cast<size_t>(slice.tensor->elements));
        slot.view.*spec.vector = out;
      }
      continue;
    }
    WeightMatrix m;
    m.type = prepared_type(slice, unpack_5bit_);
    m.cols = static_cast<int>(slice.tensor->row_length());
    m.rows = static_cast<int>(slice.rows);
    m.row_bytes = static_cast<size_t>(tensor_bytes(tensor_type_traits(m.type), static_cast<uint64_t>(m.cols)));
    m.data = data;
    // Each matrix in the layout its kernel reads fastest (four-row tiles),
    // rearranged in the buffer: the bytes are this slot's own.
    const auto arrange = [&](const WeightMatrix& part) {
      return tile_rows(part, base + (part.data - base));
    };
    if (spec.matrices.size() == 1) {
      slot.view.*spec.matrices[0].matrix = arrange(m);  // all of this unit's rows (a head piece has some)
    } else {  // a fused tensor: a block's, in its layer's sizes
      int first = 0;
      for (const TensorSpec::RowRange& part : spec.matrices) {
        const auto rows = static_cast<int>(model_.shape.size(part.rows, model_.layers[static_cast<size_t>(unit)]));
        slot.view.*part.matrix = arrange(m.row_range(first, rows));
        first += rows;
      }
    }
  }
  slot.prepare_end = now();
}

// ---- The prefetch worker -------------------------------------------------------

std::vector<int> LayerLoader::lookahead() const {
  // The units still to load, in the order the compute thread will want them:
  // resident units not yet loaded, and as many streamed units as the ring holds.
  std::vector<int> window;
  size_t streamed = 0;
  auto consider = [&](int unit) {
    const Slot* resident = resident_[static_cast<size_t>(unit)].get();
    const Slot* held = resident == nullptr ? find_slot(unit) : nullptr;
    if (resident != nullptr) {
      if (resident->state == SlotState::kFree) window.push_back(unit);
    } else if (held != nullptr && held->kept) {
      window.push_back(unit);  // needs no ring buffer; in the window, it is not given up
    } else if (streamed < ring_.size()) {
      window.push_back(unit);
      ++streamed;
    }
  };
  if (in_use_ >= 0) consider(in_use_);
  for (int unit : announced_) consider(unit);
  if (continuation_) {  // a pass's blocks and head; its experts are known only as it runs
    for (int unit = 0; unit < model_.end_head_unit(); ++unit) consider(unit);
  }
  return window;
}

LayerLoader::Slot* LayerLoader::find_slot(int unit) const {
  for (auto& slot : ring_) {
    if (slot->unit == unit && slot->state != SlotState::kFree) return slot.get();
  }
  if (!kept_holder_.empty() && model_.is_expert(unit)) {
    Slot* kept = kept_holder_[static_cast<size_t>(unit - model_.first_expert)];
    if (kept != nullptr && kept->state != SlotState::kFree) return kept;
  }
  return nullptr;
}

LayerLoader::Slot* LayerLoader::kept_slot_for(int unit, const std::vector<int>& wanted_units) {
  if (kept_experts_.empty() || !model_.is_expert(unit)) return nullptr;
  const int incoming = unit - model_.first_expert;
  Slot* least = nullptr;
  double least_score = 0;
  for (auto& slot : kept_experts_) {
    if (slot->state == SlotState::kFree) return slot.get();
    const bool wanted = std::binary_search(wanted_units.begin(), wanted_units.end(), slot->unit);
    if (slot->state == SlotState::kFailed && !wanted) return slot.get();
    if (slot->state != SlotState::kReady || wanted) continue;
    const int kept = slot->unit - model_.first_expert;
    if (!expert_use_.outweighs(incoming, kept)) continue;
    if (least == nullptr || expert_use_.score(kept) < least_score) {
      least = slot.get();
      least_score = expert_use_.score(kept);
    }
  }
  return least;
}

void LayerLoader::forget_kept(Slot& slot) {
  if (!slot.kept || slot.unit < 0 || (slot.state != SlotState::kReady && slot.state != SlotState::kInUse)) return;
  stats_.units[static_cast<size_t>(slot.unit)].resident = false;
  --stats_.resident_units;
  ++stats_.streamed_units;
}

void LayerLoader::begin_load(int unit, Slot& slot) {
  forget_kept(slot);
  if (slot.buffer.capacity < plans_[static_cast<size_t>(unit)].buffer_bytes) {
    ensure_capacity(slot.buffer, std::max(plans_[static_cast<size_t>(unit)].buffer_bytes, slot.kept ? kept_expert_bytes_ : 0));
  }
  if (slot.kept) {
    if (slot.unit >= 0 && kept_holder_[static_cast<size_t>(slot.unit - model_.first_expert)] == &slot) {
      kept_holder_[static_cast<size_t>(slot.unit - model_.first_expert)] = nullptr;
    }
    kept_holder_[static_cast<size_t>(unit - model_.first_expert)] = &slot;
  }
  slot.state = SlotState::kLoading;
  slot.unit = unit;
}

bool LayerLoader::drop_kept_buffer() {
  auto victim = kept_experts_.end();
  for (auto it = kept_experts_.begin(); it != kept_experts_.end(); ++it) {
    const SlotState state = (*it)->state;
    if (state == SlotState::kLoading || state == SlotState::kInUse) continue;
    if (state != SlotState::kReady) {  // holds nothing: the cheapest to give up
      victim = it;
      break;
    }
    if (victim == kept_experts_.end() || expert_use_.score((*it)->unit - model_.first_expert) <
                                             expert_use_.score((*victim)->unit - model_.first_expert)) {
      victim = it;
    }
  }
  if (victim == kept_experts_.end()) return false;
  forget_kept(**victim);
  const int held = (*victim)->unit;
  if (held >= 0 && kept_holder_[static_cast<size_t>(held - model_.first_expert)] == victim->get()) {
    kept_holder_[static_cast<size_t>(held - model_.first_expert)] = nullptr;
  }
  const Buffer& buffer = (*victim)->buffer;
  allocated_bytes_ -= buffer.capacity;
#if defined(__linux__)
  if (buffer.part != nullptr) {  // a part of kept_arena_: its whole pages go back to the system
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(buffer.part) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(buffer.part) + buffer.capacity) / page * page;
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
#endif
  kept_experts_.erase(victim);
  return true;
}

bool LayerLoader::next_job(int* unit, Slot** slot) {
  if (cancelled_ || stopping_ || halted_) return false;
  const std::vector<int> window = lookahead();
  std::vector<int> wanted = window;  // for kept_slot_for
  std::sort(wanted.begin(), wanted.end());
  for (int u : window) {
    Slot* resident = resident_[static_cast<size_t>(u)].get();
    if (resident != nullptr) {
      *unit = u;
      *slot = resident;
      return true;
    }
    if (find_slot(u) != nullptr) continue;
    if (Slot* kept = kept_slot_for(u, wanted)) {
      *unit = u;
      *slot = kept;
      return true;
    }
    // The window names at most ring_.size() streamed units, so some buffer
    // holds none of them (or nothing) and can take this one.
    for (auto& candidate : ring_) {
      const SlotState s = candidate->state;
      if (s == SlotState::kLoading || s == SlotState::kInUse) continue;
      if (s != SlotState::kFree &&
          std::find(window.begin(), window.end(), candidate->unit) != window.end()) {
        continue;
      }
      *unit = u;
      *slot = candidate.get();
      return true;
    }
    return false;
  }
  return false;
}

void LayerLoader::wake_all() {
  changed_.notify_all();
  work_.notify_all();
}

void LayerLoader::wake_workers_if_work() {
  int unit = -1;
  Slot* slot = nullptr;
  if (next_job(&unit, &slot)) work_.notify_all();
}

void LayerLoader::mark_loaded(int unit, Slot& slot) {
  slot.state = SlotState::kReady;
  UnitCounters& c = stats_.units[static_cast<size_t>(unit)];
  ++c.loads;
  c.io_ms += slot.io_end - slot.io_start;
  c.prepare_ms += slot.prepare_end - slot.io_end;
  stats_.io_ms += slot.io_end - slot.io_start;
  stats_.prepare_ms += slot.prepare_end - slot.io_end;
  stats_.bytes_read += plans_[static_cast<size_t>(unit)].read_bytes;
  ++stats_.units_loaded;
  if (slot.kept) {
    c.resident = true;
    ++stats_.resident_units;
    --stats_.streamed_units;
  }
}

void LayerLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    int unit = -1;
    Slot* slot = nullptr;
    work_.wait(lock, [&] { return stopping_ || next_job(&unit, &slot); });
    if (stopping_) return;
    begin_load(unit, *slot);
    const uint64_t generation = generation_;
    lock.unlock();
    if (probe_ != nullptr) probe_->units_loading.fetch_add(1);

    std::string error;
    ErrorKind kind = ErrorKind::kIo;
    try {
      load_into(unit, *slot);
    } catch (const Error& e) {
      error = e.what();
      kind = e.kind();
    } catch (const std::exception& e) {
      error = plans_[static_cast<size_t>(unit)].name + ": " + e.what();
    }

    if (probe_ != nullptr) {
      probe_->units_loading.fetch_sub(1);
      probe_->beat();
    }
    lock.lock();
    if (generation != generation_) {
      slot->state = SlotState::kFree;  // reset() happened meanwhile: discard
    } else if (!error.empty() && kind == ErrorKind::kAborted) {
      // Cancelled: nothing is wrong with the unit. Freed, it is loaded again
      // when a later request wants it; marked failed, that request would get
      // this cancellation as its error.
      slot->state = SlotState::kFree;
    } else if (!error.empty()) {
      slot->state = SlotState::kFailed;
      slot->error = error;
      slot->error_kind = kind;
      halted_ = true;  // no more prefetching until the compute thread asks again
    } else {
      mark_loaded(unit, *slot);
    }
    wake_all();
  }
}

// ---- The compute thread's side -------------------------------------------------------

void LayerLoader::announce(const std::vector<int>& units) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    announced_.insert(announced_.end(), units.begin(), units.end());
  }
  wake_all();
}

void LayerLoader::announce_experts(const std::vector<int>& units, const std::vector<int>& positions) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int> experts;
    for (size_t i = 0; i < units.size(); ++i) {
      experts.push_back(units[i] - model_.first_expert);
      stats_.units[static_cast<size_t>(units[i])].uses += static_cast<uint64_t>(positions[i]);
    }
    expert_use_.routed(experts, positions);
    announced_.insert(announced_.begin(), units.begin(), units.end());
  }
  wake_all();
}

void LayerLoader::begin_pass(int positions) {
  std::lock_guard<std::mutex> lock(mutex_);
  expert_use_.begin_pass(positions);
}

void LayerLoader::set_continuation(bool expected) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    continuation_ = expected;
  }
  wake_all();
}

const UnitWeights& LayerLoader::acquire(int unit) {
  const double asked = now();
  std::unique_lock<std::mutex> lock(mutex_);
  if (cancelled_) throw Error(ErrorKind::kAborted, "cancelled");
  if (!announced_.empty() && announced_.front() == unit) {
    announced_.pop_front();
  } else {
    announced_.clear();  // the announced order was not followed: start over from here
  }
  in_use_ = unit;
  halted_ = false;
  wake_workers_if_work();

  const UnitPlan& plan = plans_[static_cast<size_t>(unit)];
  Slot* slot = plan.resident ? resident_[static_cast<size_t>(unit)].get() : find_slot(unit);
  const bool hit = slot != nullptr && slot->state == SlotState::kReady;

  if (!hit && mode_ == LoaderMode::kSync) {
    // Load on this thread. The single ring buffer (or the unit's resident
    // buffer, or a kept expert's) is free: sync mode never has a second unit
    // in flight.
    if (slot == nullptr) {
      std::vector<int> wanted = lookahead();
      std::sort(wanted.begin(), wanted.end());
      slot = kept_slot_for(unit, wanted);
    }
    if (slot == nullptr) slot = ring_.front().get();
    begin_load(unit, *slot);
    lock.unlock();
    try {
      load_into(unit, *slot);
    } catch (...) {
      lock.lock();
      slot->state = SlotState::kFree;
      in_use_ = -1;
      throw;
    }
    lock.lock();
    mark_loaded(unit, *slot);
  } else if (!hit) {
    if (probe_ != nullptr) probe_->waiting_for_unit.store(unit);
    changed_.wait(lock, [&] {
      if (cancelled_) return true;
      slot = plan.resident ? resident_[static_cast<size_t>(unit)].get() : find_slot(unit);
      return slot != nullptr &&
             (slot->state == SlotState::kReady || slot->state == SlotState::kFailed);
    });
    if (probe_ != nullptr) probe_->waiting_for_unit.store(-1);
    if (cancelled_) {
      in_use_ = -1;
      throw Error(ErrorKind::kAborted, "cancelled while waiting for " + plan.name);
    }
    if (slot->state == SlotState::kFailed) {
      const std::string message = slot->error;
      const ErrorKind kind = slot->error_kind;
      slot->state = SlotState::kFree;
      // The request that wanted this unit is over: stop prefetching for it.
      in_use_ = -1;
      announced_.clear();
      continuation_ = false;
      throw Error(kind, message);
    }
  }

  slot->state = SlotState::kInUse;
  const double got = now();
  if (plan.resident || (slot->kept && hit)) {
    ++stats_.resident_hits;
  } else if (hit) {
    ++stats_.prefetch_hits;
  } else {
    ++stats_.prefetch_misses;
  }
  stats_.wait_ms += got - asked;
  stats_.units[static_cast<size_t>(unit)].wait_ms += got - asked;
  UnitEvent event;
  event.unit = unit;
  event.hit = hit;
  event.resident = hit && (plan.resident || slot->kept);  // kept: an expert kept by use
  event.compute_start_ms = got;
  if (!slot->load_reported) {
    stats_.bytes_consumed += plan.read_bytes;
    event.io_start_ms = slot->io_start;
    event.io_end_ms = slot->io_end;
    event.prepare_end_ms = slot->prepare_end;
    slot->load_reported = true;
  }
  current_timeline_ = -1;
  if (stats_.timeline.size() < kMaxTimelineEvents) {
    stats_.timeline.push_back(event);
    current_timeline_ = static_cast<int>(stats_.timeline.size()) - 1;
  }
  compute_start_ = got;
  return slot->view;
}

void LayerLoader::release(int unit) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const double done = now();
    Slot* slot = plans_[static_cast<size_t>(unit)].resident ? resident_[static_cast<size_t>(unit)].get()
                                                            : find_slot(unit);
    if (slot != nullptr && slot->state == SlotState::kInUse) slot->state = SlotState::kReady;
    stats_.compute_ms += done - compute_start_;
    stats_.units[static_cast<size_t>(unit)].compute_ms += done - compute_start_;
    if (current_timeline_ >= 0) stats_.timeline[static_cast<size_t>(current_timeline_)].compute_end_ms = done;
    current_timeline_ = -1;
    in_use_ = -1;
    changed_.notify_all();  // a budget waiting for this unit's buffer
    wake_workers_if_work();
  }
}

std::vector<float> LayerLoader::read_vector(const GgufTensorInfo& tensor) {
  std::vector<uint8_t> bytes(addressable(tensor.bytes, tensor.name));
  source_.read(tensor.offset, bytes.data(), bytes.size());
  std::vector<float> values(addressable(tensor.elements * sizeof(float), tensor.name) / sizeof(float));
  dequantize_row(tensor.type, bytes.data(), values.data(), values.size());
  return values;
}

void LayerLoader::embed(const int32_t* tokens, int n, float* out, RowTable which) {
  // token_embd may be in memory (resident, or as the tied head's pieces);
  // per_layer_token_embd never is.
  const bool token_table = which == RowTable::kTokens;
  const GgufTensorInfo& table = token_table ? *model_.token_embd : *model_.per_layer_token_embd;
  const int n_vocab = model_.shape.n_vocab;
  for (int i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      throw Error(ErrorKind::kInvalidArgument, "token id " + std::to_string(tokens[i]) +
                                                   " is outside the vocabulary (0.." +
                                                   std::to_string(n_vocab - 1) + ")");
    }
  }
  const size_t row_bytes = static_cast<size_t>(table.bytes / static_cast<uint64_t>(n_vocab));
  const auto row_length = static_cast<size_t>(table.row_length());
  const bool resident = token_table && embedding_resident_;

  // An untied table within the budget is read whole, once.
  if (resident && embedding_->state == SlotState::kFree) {
    const size_t table_bytes = addressable(table.bytes, table.name);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ensure_capacity(embedding_->buffer, table_bytes);
    }
    source_.read(table.offset, embedding_->buffer.data.get(), table_bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    embedding_->state = SlotState::kReady;
    stats_.embedding_bytes_read += table.bytes;
  }

  // Rows already in memory: the resident table, or the resident head piece
  // holding the row when the head is the embedding table (there in the
  // kernels' layout: dequantize_matrix_row reads it).
  std::vector<const uint8_t*> rows(static_cast<size_t>(n), nullptr);
  std::vector<WeightMatrix> head_matrices(static_cast<size_t>(n));
  std::vector<int> head_rows(static_cast<size_t>(n), -1);
  if (token_table) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int i = 0; i < n; ++i) {
      const auto token = static_cast<size_t>(tokens[i]);
      if (resident) {
        rows[static_cast<size_t>(i)] = embedding_->buffer.data.get() + token * row_bytes;
      } else if (model_.tied_output) {
        const size_t piece = token / static_cast<size_t>(model_.head_rows_per_piece);
        const Slot* head = resident_[static_cast<size_t>(model_.first_head_unit()) + piece].get();
        if (head != nullptr && (head->state == SlotState::kReady || head->state == SlotState::kInUse)) {
          head_matrices[static_cast<size_t>(i)] = head->view.output;
          head_rows[static_cast<size_t>(i)] = static_cast<int>(token - piece * model_.head_rows_per_piece);
        }
      }
    }
  }

  // Per-layer rows read lately, kept (token rows are mostly in memory
  // already, as the resident head's): written out now, before put() below
  // reuses their slots.
  if (!token_table && recent_per_layer_rows_ == nullptr) {
    recent_per_layer_rows_ = std::make_unique<RecentRows>(row_bytes, RecentRows::capacity_for(row_bytes));
  }
  RecentRows* recent = token_table ? nullptr : recent_per_layer_rows_.get();
  std::vector<bool> done(static_cast<size_t>(n), false);
  for (int i = 0; i < n && recent != nullptr; ++i) {
    if (rows[static_cast<size_t>(i)] != nullptr || head_rows[static_cast<size_t>(i)] >= 0) continue;
    if (const uint8_t* kept = recent->find(tokens[i])) {
      dequantize_row(table.type, kept, out + static_cast<size_t>(i) * row_length, row_length);
      done[static_cast<size_t>(i)] = true;
    }
  }

  // The rest: each distinct row read once, all in one batch.
  std::vector<int32_t> missing;
  for (int i = 0; i < n; ++i) {
    if (rows[static_cast<size_t>(i)] == nullptr && head_rows[static_cast<size_t>(i)] < 0 && !done[static_cast<size_t>(i)]) {
      missing.push_back(tokens[i]);
    }
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  std::vector<uint8_t> fetched(missing.size() * row_bytes);
  if (!missing.empty()) {
    std::vector<WeightSource::ReadRequest> requests;
    for (size_t k = 0; k < missing.size(); ++k) {
      requests.push_back({table.offset + static_cast<uint64_t>(missing[k]) * row_bytes,
                          fetched.data() + k * row_bytes, row_bytes});
    }
    source_.read_many(requests);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.embedding_bytes_read += fetched.size();
  }
  for (int i = 0; i < n; ++i) {
    if (done[static_cast<size_t>(i)]) continue;
    if (head_rows[static_cast<size_t>(i)] >= 0) {
      dequantize_matrix_row(head_matrices[static_cast<size_t>(i)], head_rows[static_cast<size_t>(i)],
                            out + static_cast<size_t>(i) * row_length);
      continue;
    }
    const uint8_t* row = rows[static_cast<size_t>(i)];
    if (row == nullptr) {
      const size_t k = static_cast<size_t>(std::lower_bound(missing.begin(), missing.end(), tokens[i]) - missing.begin());
      row = fetched.data() + k * row_bytes;
    }
    dequantize_row(table.type, row, out + static_cast<size_t>(i) * row_length, row_length);
  }
  for (size_t k = 0; k < missing.size() && recent != nullptr; ++k) recent->put(missing[k], fetched.data() + k * row_bytes);
}

// ---- Control and counters ---------------------------------------------------------

void LayerLoader::cancel() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_ = true;
  }
  wake_all();
}

void LayerLoader::clear_cancel() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_ = false;
  }
  wake_all();
}

void LayerLoader::reset() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    halted_ = false;
    announced_.clear();
    in_use_ = -1;
    continuation_ = false;
    for (auto& slot : ring_) {
      if (slot->state != SlotState::kLoading) slot->state = SlotState::kFree;
    }
    for (auto& slot : resident_) {
      if (slot != nullptr && slot->state != SlotState::kLoading && slot->state != SlotState::kReady) {
        slot->state = SlotState::kFree;
      }
    }
    for (auto& slot : kept_experts_) {
      if (slot->state != SlotState::kLoading && slot->state != SlotState::kReady) {
        forget_kept(*slot);
        slot->state = SlotState::kFree;
      }
    }
  }
  wake_all();
}

LoaderStats LayerLoader::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  LoaderStats s = stats_;
  s.resident_bytes = 0;
  for (size_t u = 0; u < plans_.size(); ++u) {
    if (resident_[u] != nullptr) s.resident_bytes += resident_[u]->buffer.capacity;
  }
  for (const auto& slot : kept_experts_) s.resident_bytes += slot->buffer.capacity;
  if (embedding_ != nullptr) s.resident_bytes += embedding_->buffer.capacity;
  s.memory_budget = budget_;
  s.working_bytes = reserved_;
  return s;
}

void LayerLoader::reset_counters() {
  std::lock_guard<std::mutex> lock(mutex_);
  LoaderStats fresh;
  fresh.ring_bytes = stats_.ring_bytes;
  fresh.peak_weight_bytes = allocated_bytes_;
  fresh.resident_units = stats_.resident_units;
  fresh.streamed_units = stats_.streamed_units;
  fresh.load_threads = stats_.load_threads;
  fresh.unpacked_5bit = stats_.unpacked_5bit;
  fresh.activation_bytes = stats_.activation_bytes;
  fresh.prefill_chunk = stats_.prefill_chunk;
  fresh.units = stats_.units;
  fresh.timeline_origin_ms = stats_.timeline_origin_ms;
  for (UnitCounters& c : fresh.units) {
    c.loads = c.uses = 0;
    c.io_ms = c.prepare_ms = c.compute_ms = c.wait_ms = 0;
  }
  stats_ = std::move(fresh);
  current_timeline_ = -1;
}

}  // namespace sipllm
