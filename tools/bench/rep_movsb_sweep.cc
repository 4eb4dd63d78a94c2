// How fast `rep movsb` (what the kernel's copy_to/from_user use on CPUs with FSRM) copies 4 KiB
// for every (destination - source) mod 4096, in-cache: prints the offsets that run under half
// the median speed. On the AMD EPYC VMs here, offsets 1-15 run 12-15x slower.
//   bazel run //tools/bench:rep_movsb_sweep -- [LENGTH]      (pin it: taskset -c 0 ...)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

namespace {

void rep_movsb(void* dst, const void* src, std::size_t n) {
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}
double now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t len = argc > 1 ? std::strtoul(argv[1], nullptr, 0) : 4096;
  if (len == 0 || len > (1u << 20)) {
    std::fprintf(stderr, "usage: %s [LENGTH 1..1048576]\n", argv[0]);
    return 2;
  }
  constexpr int kCopies = 16, kRounds = 100;
  const std::size_t stride = (len + 8192) & ~std::size_t{4095};
  auto* src = static_cast<char*>(std::aligned_alloc(4096, stride * kCopies));
  auto* dst = static_cast<char*>(std::aligned_alloc(4096, stride * kCopies + 8192));
  std::memset(src, 1, stride * kCopies);
  std::memset(dst, 2, stride * kCopies + 8192);
  std::vector<double> gbs(4096);
  for (int d = 0; d < 4096; ++d) {
    const double t0 = now_ns();
    for (int r = 0; r < kRounds; ++r)
      for (int i = 0; i < kCopies; ++i) rep_movsb(dst + d + i * stride, src + i * stride, len);
    gbs[d] = static_cast<double>(len) * kCopies * kRounds / (now_ns() - t0);
  }
  std::vector<double> sorted = gbs;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[2048];
  std::printf("%zu-byte copies: median %.1f GB/s over the 4096 offsets; slower than half that:",
              len, median);
  int slow = 0;
  for (int d = 0; d < 4096; ++d)
    if (gbs[d] < median / 2) {
      std::printf(" %d (%.1f)", d, gbs[d]);
      ++slow;
    }
  std::printf("%s\n", slow ? "" : " none");
  std::free(src);
  std::free(dst);
}
