// A growable ring buffer (FIFO with push_front), so steady-state queueing allocates nothing.
#pragma once

#include <cstddef>
#include <vector>

namespace pollux::emu::timing {

template <class T>
class Ring {
 public:
  explicit Ring(size_t capacity = 64) : buf_(round_up(capacity)) {}
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return buf_[head_]; }
  void push_back(T v) {  // by value: v may live in this ring, which may grow
    grow_if_full();
    buf_[(head_ + size_) & (buf_.size() - 1)] = v;
    ++size_;
  }
  void push_front(T v) {
    grow_if_full();
    head_ = (head_ + buf_.size() - 1) & (buf_.size() - 1);
    buf_[head_] = v;
    ++size_;
  }
  void pop_front() {
    head_ = (head_ + 1) & (buf_.size() - 1);
    --size_;
  }
  void clear() { head_ = size_ = 0; }

 private:
  static size_t round_up(size_t n) {
    size_t c = 1;
    while (c < n) c <<= 1;
    return c;
  }
  void grow_if_full() {
    if (size_ < buf_.size()) return;
    std::vector<T> next(buf_.size() * 2);
    for (size_t i = 0; i < size_; ++i) next[i] = buf_[(head_ + i) & (buf_.size() - 1)];
    buf_.swap(next);
    head_ = 0;
  }
  std::vector<T> buf_;
  size_t head_ = 0, size_ = 0;
};

}  // namespace pollux::emu::timing
