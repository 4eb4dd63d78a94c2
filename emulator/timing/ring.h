// A growable ring buffer (a FIFO with push_front, indexing and erase_at), so steady-state
// queueing allocates nothing. Ring(0) owns no memory until its first push: a table of many
// mostly idle queues (an RNIC's QPs) is made and reset without allocating. push_back,
// push_front and erase_at invalidate references to elements.
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
  size_t capacity() const { return buf_.size(); }
  T& front() { return buf_[head_]; }
  const T& front() const { return buf_[head_]; }
  T& operator[](size_t i) { return buf_[(head_ + i) & (buf_.size() - 1)]; }
  const T& operator[](size_t i) const { return buf_[(head_ + i) & (buf_.size() - 1)]; }
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
  // Removes element i, keeping the order of the others.
  void erase_at(size_t i) {
    for (; i + 1 < size_; ++i) (*this)[i] = (*this)[i + 1];
    --size_;
  }
  void clear() { head_ = size_ = 0; }

 private:
  static size_t round_up(size_t n) {
    size_t c = n == 0 ? 0 : 1;
    while (c < n) c <<= 1;
    return c;
  }
  void grow_if_full() {
    if (size_ < buf_.size()) return;
    std::vector<T> next(buf_.empty() ? 1 : buf_.size() * 2);
    for (size_t i = 0; i < size_; ++i) next[i] = buf_[(head_ + i) & (buf_.size() - 1)];
    buf_.swap(next);
    head_ = 0;
  }
  std::vector<T> buf_;
  size_t head_ = 0, size_ = 0;
};

}  // namespace pollux::emu::timing
