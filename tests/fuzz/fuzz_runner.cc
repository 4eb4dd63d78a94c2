// The libFuzzer entry point LLVMFuzzerTestOneInput run without libFuzzer (g++ builds, CI):
// every corpus file once, then --runs inputs mutated from them (bit flips, byte sets, inserts,
// deletions, splices, interesting values) by a seeded generator. A crash or a sanitizer report
// is the failure; the seed is printed first so that the run replays, and the input that
// crashed is written to crash-<seed>-<n> (in $TEST_UNDECLARED_OUTPUTS_DIR under bazel test,
// else the working directory): `TARGET --runs=0 FILE` runs it alone.
// Coverage-guided fuzzing builds the same targets with clang's libFuzzer (tools/fuzz.sh).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Input = std::vector<uint8_t>;

Input mutate(const std::vector<Input>& corpus, std::mt19937_64& rng, size_t max_len) {
  Input in = corpus.empty() ? Input{} : corpus[rng() % corpus.size()];
  const int steps = 1 + static_cast<int>(rng() % 8);
  for (int s = 0; s < steps; ++s) {
    const size_t pos = in.empty() ? 0 : rng() % in.size();
    switch (rng() % 7) {
      case 0:  // flip a bit
        if (!in.empty()) in[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // set a byte
        if (!in.empty()) in[pos] = static_cast<uint8_t>(rng());
        break;
      case 2: {  // an interesting value, little-endian, 1 to 8 bytes
        static const uint64_t values[] = {0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0xffff, 0xffffffff,
                                          0x80000000, ~0ull, 4096, 65536};
        const uint64_t v = values[rng() % std::size(values)];
        const size_t n = 1 + rng() % 8;
        for (size_t i = 0; i < n && pos + i < in.size(); ++i)
          in[pos + i] = static_cast<uint8_t>(v >> (8 * i));
        break;
      }
      case 3: {  // insert random bytes
        const size_t n = 1 + rng() % 16;
        Input bytes(n);
        for (auto& b : bytes) b = static_cast<uint8_t>(rng());
        in.insert(in.begin() + static_cast<long>(std::min(pos, in.size())), bytes.begin(),
                  bytes.end());
        break;
      }
      case 4: {  // delete a run
        if (in.empty()) break;
        const size_t n = std::min<size_t>(1 + rng() % 16, in.size() - pos);
        in.erase(in.begin() + static_cast<long>(pos), in.begin() + static_cast<long>(pos + n));
        break;
      }
      case 5: {  // splice the tail of another input
        if (corpus.empty()) break;
        const Input& other = corpus[rng() % corpus.size()];
        if (other.empty()) break;
        const size_t from = rng() % other.size();
        in.resize(std::min(pos, in.size()));
        in.insert(in.end(), other.begin() + static_cast<long>(from), other.end());
        break;
      }
      default: {  // duplicate a run (repeated messages, records)
        if (in.empty()) break;
        const size_t n = std::min<size_t>(1 + rng() % 64, in.size() - pos);
        Input run(in.begin() + static_cast<long>(pos), in.begin() + static_cast<long>(pos + n));
        in.insert(in.begin() + static_cast<long>(pos), run.begin(), run.end());
      }
    }
  }
  if (in.size() > max_len) in.resize(max_len);
  return in;
}

Input read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Input(std::istreambuf_iterator<char>(f), {});
}

// The input being run, for the crash handler (which may only make async-signal-safe calls).
const Input* g_current = nullptr;
char g_crash_path[4096];

void write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w <= 0) return;
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

void on_crash(int sig) {
  if (g_current != nullptr) {
    const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      write_all(fd, g_current->data(), g_current->size());
      ::close(fd);
      static const char msg[] = "fuzz: the crashing input is in ";
      write_all(2, msg, sizeof msg - 1);
      write_all(2, g_crash_path, std::strlen(g_crash_path));
      write_all(2, "\n", 1);
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void run_one(const Input& in, uint64_t seed, uint64_t n) {
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  std::snprintf(g_crash_path, sizeof g_crash_path, "%s/crash-%llu-%llu", dir ? dir : ".",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(n));
  g_current = &in;
  LLVMFuzzerTestOneInput(in.data(), in.size());
  g_current = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t runs = 10000, seed = 1;
  size_t max_len = 4096;
  std::vector<Input> corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--runs=", 0) == 0) {
      runs = std::strtoull(a.c_str() + 7, nullptr, 10);
    } else if (a.rfind("--seed=", 0) == 0) {
      seed = std::strtoull(a.c_str() + 7, nullptr, 10);
    } else if (a.rfind("--max-len=", 0) == 0) {
      max_len = std::strtoull(a.c_str() + 10, nullptr, 10);
    } else if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::directory_iterator(a))
        if (e.is_regular_file()) corpus.push_back(read_file(e.path()));
    } else if (std::filesystem::is_regular_file(a)) {
      corpus.push_back(read_file(a));
    } else {
      std::fprintf(stderr, "usage: %s [--runs=N] [--seed=S] [--max-len=L] CORPUS...\n", argv[0]);
      return 2;
    }
  }
  if (const char* env = std::getenv("POLLUX_FUZZ_SEED")) seed = std::strtoull(env, nullptr, 10);
  if (const char* env = std::getenv("POLLUX_FUZZ_RUNS")) runs = std::strtoull(env, nullptr, 10);
  std::printf("fuzz: %zu corpus inputs, %llu mutations, seed %llu (POLLUX_FUZZ_SEED)\n",
              corpus.size(), static_cast<unsigned long long>(runs),
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  // Signals a sanitizer already handles stay its own (it reports, then aborts: SIGABRT).
  for (int sig : {SIGILL, SIGABRT, SIGSEGV, SIGBUS, SIGFPE}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL)
      ::signal(sig, on_crash);
  }
  const auto start = std::chrono::steady_clock::now();
  uint64_t n = 0;
  for (const Input& in : corpus) run_one(in, seed, n++);
  std::mt19937_64 rng(seed);
  for (uint64_t r = 0; r < runs; ++r) {
    const Input in = mutate(corpus, rng, max_len);
    run_one(in, seed, n++);
  }
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double execs = static_cast<double>(corpus.size() + runs);
  std::printf("fuzz: %.0f executions in %.2f s (%.0f/s), no crash\n", execs, s, execs / s);
  return 0;
}
