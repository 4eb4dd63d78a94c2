// The crash-consistency workload: a fixed script of metadata and data steps (create, write,
// xattrs, resize, sync, snapshot, clone, inflate, decouple, delete, thin allocation), the
// model of what must be durable after each step, and the check a reload must pass after a
// power cut in the middle of any step. Harness-neutral: it drives the store through `pump`,
// which advances whatever world it runs in (a step-mode framework, the emulator's lockstep).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "driver/bdev/bdev.h"
#include "driver/blob/blobstore.h"

namespace pollux::blob::crash {

struct Harness {
  bdev::Manager* mgr = nullptr;
  std::string bdev_name;
  event::Thread* md_thread = nullptr;
  event::Thread* io_thread = nullptr;  // may be md_thread
  std::function<void()> pump;          // one step of the world
  env::MemoryRegistry* registry = nullptr;
  uint8_t* buffer = nullptr;  // DMA memory, at least 2 clusters
  uint32_t cluster_size = 64 * 1024;
  uint64_t max_pumps = 2'000'000;  // per call: a hang fails instead of spinning forever
};

struct Region {
  uint64_t offset, len, seed;  // io_units; the data is pattern(seed, unit)
  bool operator==(const Region&) const = default;
};

// What a reload must show for one blob after a step.
struct BlobState {
  bool exists = false;
  uint64_t clusters = 0;
  uint64_t flags = 0;
  std::map<std::string, std::string> xattrs;
  std::vector<Region> regions;  // durable data
};
using State = std::map<std::string, BlobState>;  // by the script's blob names

struct CheckStats {
  uint64_t blobs_checked = 0, regions_checked = 0, dirty_loads = 0, repairs = 0, load_errors = 0;
};

class Workload {
 public:
  explicit Workload(Harness h);
  int steps() const;
  const std::vector<State>& states() const { return states_; }  // [0] before step 1

  // Formats the store on the harness's bdev (not part of the crash contract: a cut during
  // format leaves no store, by design).
  int format();
  // Loads the store and runs the script from the start; stops at the first failing call.
  // Returns how many steps completed. Records blob ids by name (the first full run fixes them;
  // later runs must agree, the script being deterministic).
  int run(std::string* error);
  // After a cut during step completed+1 (or after the end): reloads and checks every
  // invariant. "" when all hold, else what broke.
  std::string check(int completed, CheckStats* stats);

  const std::map<std::string, BlobId>& ids() const { return ids_; }

 private:
  struct Call;
  bool wait(bool* flag);
  int load(Blobstore** bs);
  void abandon(Blobstore* bs);
  bool matches(uint64_t offset, uint64_t len, uint64_t seed, std::string* why);

  Harness h_;
  std::vector<State> states_;
  std::map<std::string, BlobId> ids_;
  bool ids_fixed_ = false;
};

}  // namespace pollux::blob::crash
