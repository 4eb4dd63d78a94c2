// Sequencing for metadata paths (heap-allocated closures: never on the I/O path).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace pollux::blob {

using Step = std::function<void(int rc)>;

// Runs body(0, next) ... body(n-1, next) one after another; stops at the first error. done(rc).
// The loop lives as long as a pending `next` holds it.
inline void for_each_step(std::size_t n, std::function<void(std::size_t i, Step next)> body,
                          Step done) {
  struct Loop : std::enable_shared_from_this<Loop> {
    std::size_t n;
    std::function<void(std::size_t, Step)> body;
    Step done;
    void run(std::size_t i) {
      if (i == n) return done(0);
      body(i, [self = shared_from_this(), i](int rc) {
        if (rc != 0) return self->done(rc);
        self->run(i + 1);
      });
    }
  };
  auto loop = std::make_shared<Loop>();
  loop->n = n;
  loop->body = std::move(body);
  loop->done = std::move(done);
  loop->run(0);
}

}  // namespace pollux::blob
