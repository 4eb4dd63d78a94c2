// The on-disk format: round trips, each rejection, and a seeded mutation test of the parser.
#include "driver/blob/format.h"

#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>

namespace pollux::blob {
namespace {

SuperBlock sample_super() {
  SuperBlock sb;
  sb.clean = true;
  sb.io_unit_size = 512;
  sb.cluster_size = 64 * 1024;
  sb.device_bytes = 32u << 20;
  sb.total_clusters = 512;
  sb.md_pages = 512;
  sb.page_mask_start = 1;
  sb.page_mask_pages = 1;
  sb.cluster_mask_start = 2;
  sb.cluster_mask_pages = 1;
  sb.md_start = 3;
  sb.first_data_cluster = 33;  // (3 + 512) pages / 16 per cluster, rounded up
  sb.super_blob = 7;
  sb.bstype = "lvs";
  return sb;
}

BlobMetadata sample_blob() {
  BlobMetadata md;
  md.id = 42;
  md.flags = kFlagThin | kFlagClone;
  md.parent = 41;
  md.clear_method = ClearMethod::kUnmap;
  md.num_clusters = 10;
  md.clusters = {100, 101, 102, 0, 0, 200, 7, 8, 0, 300};
  md.xattrs = {{"name", {'v', '1'}}, {"empty", {}}};
  md.internal_xattrs = {{"lvs.uuid", {1, 2, 3}}};
  return md;
}

std::vector<uint32_t> positions(std::size_t n) {
  std::vector<uint32_t> w;
  for (std::size_t i = 0; i < n; ++i) w.push_back(static_cast<uint32_t>(10 + 3 * i));
  return w;
}

Result<BlobMetadata> round_trip(const BlobMetadata& md, uint64_t total = 1000) {
  auto pages = encode_blob(md, 5);
  if (!pages.ok()) return pages.error();
  link_pages(pages.value(), positions(pages->size()));
  std::vector<const uint8_t*> chain;
  for (auto& p : pages.value()) {
    PageHeader h;
    std::string why;
    EXPECT_TRUE(decode_header(p.data(), &h, &why)) << why;
    chain.push_back(p.data());
  }
  return decode_blob(chain, total);
}

// Re-seals a page after a deliberate change so the parser, not the CRC, has to judge it.
void reseal(std::vector<uint8_t>& p) {
  const uint32_t c = crc32c(p.data(), kPageCrcOffset);
  std::memcpy(p.data() + kPageCrcOffset, &c, 4);
}

TEST(Crc32c, KnownAnswer) {
  const char* s = "123456789";
  EXPECT_EQ(crc32c(s, 9), 0xE3069283u);
}

TEST(SuperBlock, RoundTrip) {
  std::vector<uint8_t> p(kPageSize);
  const SuperBlock sb = sample_super();
  encode_super(sb, p.data());
  auto d = decode_super(p.data());
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_TRUE(d->clean);
  EXPECT_EQ(d->bstype, "lvs");
  EXPECT_EQ(d->super_blob, 7u);
  EXPECT_EQ(d->first_data_cluster, 33u);
}

TEST(SuperBlock, Rejections) {
  std::vector<uint8_t> p(kPageSize);
  encode_super(sample_super(), p.data());
  auto bad = p;
  bad[0] = 'X';
  EXPECT_NE(decode_super(bad.data()).error().message.find("magic"), std::string::npos);
  bad = p;
  bad[200] ^= 1;
  EXPECT_NE(decode_super(bad.data()).error().message.find("CRC"), std::string::npos);
  SuperBlock v = sample_super();
  v.version = 9;
  encode_super(v, bad.data());
  EXPECT_EQ(decode_super(bad.data()).error().code, -EPROTONOSUPPORT);
  v = sample_super();
  v.md_start = 4;
  encode_super(v, bad.data());
  EXPECT_NE(decode_super(bad.data()).error().message.find("layout"), std::string::npos);
  v = sample_super();
  v.cluster_size = 5000;
  encode_super(v, bad.data());
  EXPECT_FALSE(decode_super(bad.data()).ok());
  v = sample_super();
  v.total_clusters = 100000;  // more than the device holds
  encode_super(v, bad.data());
  EXPECT_FALSE(decode_super(bad.data()).ok());
}

TEST(BlobPages, RoundTrip) {
  const BlobMetadata md = sample_blob();
  auto d = round_trip(md);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->id, md.id);
  EXPECT_EQ(d->flags, md.flags);
  EXPECT_EQ(d->parent, md.parent);
  EXPECT_EQ(d->clear_method, md.clear_method);
  EXPECT_EQ(d->clusters, md.clusters);
  EXPECT_EQ(d->xattrs, md.xattrs);
  EXPECT_EQ(d->internal_xattrs, md.internal_xattrs);
}

TEST(BlobPages, FragmentedBlobSpansChainedPages) {
  BlobMetadata md;
  md.id = 3;
  md.num_clusters = 2000;
  for (uint64_t i = 0; i < md.num_clusters; ++i) md.clusters.push_back(10 + 2 * i);  // no runs
  auto pages = encode_blob(md, 1);
  ASSERT_TRUE(pages.ok());
  EXPECT_GT(pages->size(), 5u);
  auto d = round_trip(md, 10000);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->clusters, md.clusters);
}

TEST(BlobPages, HugeThinBlobIsOneRun) {
  BlobMetadata md;
  md.id = 3;
  md.flags = kFlagThin;
  md.num_clusters = 1 << 20;
  md.clusters.assign(md.num_clusters, 0);
  auto pages = encode_blob(md, 1);
  ASSERT_TRUE(pages.ok());
  EXPECT_EQ(pages->size(), 1u);
  EXPECT_TRUE(round_trip(md).ok());
}

TEST(BlobPages, OversizedXattrIsRefused) {
  BlobMetadata md = sample_blob();
  md.xattrs.push_back({"big", std::vector<uint8_t>(kDescriptorArea)});
  EXPECT_EQ(encode_blob(md, 1).error().code, -E2BIG);
}

TEST(BlobPages, HeaderRejections) {
  auto pages = encode_blob(sample_blob(), 5).value();
  link_pages(pages, positions(pages.size()));
  PageHeader h;
  std::string why;
  auto p = pages[0];
  p[100] ^= 0x10;
  EXPECT_FALSE(decode_header(p.data(), &h, &why));
  EXPECT_EQ(why, "CRC mismatch");
  p = pages[0];
  std::memset(p.data(), 0, 8);  // id 0
  reseal(p);
  EXPECT_FALSE(decode_header(p.data(), &h, &why));
  p = pages[0];
  p[20] = 5;  // index beyond count
  reseal(p);
  EXPECT_FALSE(decode_header(p.data(), &h, &why));
  EXPECT_EQ(why, "chain position out of range");
  p = pages[0];
  p[16] = 9;  // a last page that links on
  reseal(p);
  EXPECT_FALSE(decode_header(p.data(), &h, &why));
}

// Each kind of descriptor damage the parser must name.
struct Damage {
  const char* what;
  std::function<void(BlobMetadata&)> edit_md;
  std::function<void(std::vector<uint8_t>&)> edit_page;
  const char* expect;
};

TEST(BlobPages, DescriptorRejections) {
  const std::vector<Damage> cases = {
      {"unknown descriptor", nullptr, [](auto& p) { p[32 + 36] = 99; }, "unknown descriptor type 99"},
      {"unknown flag", nullptr, [](auto& p) { p[32 + 4 + 7] = 0x80; }, "unknown blob flags"},
      {"clear method", nullptr, [](auto& p) { p[32 + 4 + 8] = 9; }, "unknown clear method"},
      {"extent out of range", [](auto& md) { md.clusters[0] = 5000; }, nullptr, "cluster out of range"},
      {"thick hole", [](auto& md) { md.flags = 0, md.parent = 0; }, nullptr, "thick blob"},
      {"clone without parent", [](auto& md) { md.parent = 0; }, nullptr, "clone flag and parent"},
      {"own parent", [](auto& md) { md.parent = md.id; }, nullptr, "its own parent"},
      {"writable snapshot", [](auto& md) { md.flags |= kFlagSnapshot; }, nullptr, "writable snapshot"},
      {"duplicate xattr", [](auto& md) { md.xattrs.push_back(md.xattrs[0]); }, nullptr, "duplicate xattr"},
      {"descriptor past end", nullptr, [](auto& p) { p[32 + 2] = 0xff; p[32 + 3] = 0x0f; }, "past the page"},
      {"trailing bytes", nullptr, [](auto& p) { p[4000] = 1; }, "bytes after the descriptors"},
  };
  for (const Damage& d : cases) {
    BlobMetadata md = sample_blob();
    if (d.edit_md) d.edit_md(md);
    auto pages = encode_blob(md, 5).value();
    if (d.edit_page) d.edit_page(pages[0]);
    link_pages(pages, positions(pages.size()));
    std::vector<const uint8_t*> chain;
    for (auto& p : pages) chain.push_back(p.data());
    auto r = decode_blob(chain, 1000);
    ASSERT_FALSE(r.ok()) << d.what;
    EXPECT_NE(r.error().message.find(d.expect), std::string::npos)
        << d.what << ": " << r.error().message;
  }
}

uint64_t seed_from_env(uint64_t fallback) {
  const char* s = std::getenv("POLLUX_SEED");
  return s ? std::strtoull(s, nullptr, 0) : fallback;
}

// Mutates valid chains (bit flips, byte runs, zeroed spans, shuffled words; most re-sealed so
// the parser, not the CRC, has to judge them) and parses them: never a crash, a hang or an
// error without a message; whatever is accepted stays within the limits it was given.
TEST(BlobPages, MutationSweep) {
  const uint64_t seed = seed_from_env(20261125);
  const char* n_env = std::getenv("POLLUX_MUTATIONS");
  const uint64_t iterations = n_env ? std::strtoull(n_env, nullptr, 0) : 120000;
  std::printf("mutation sweep: seed %" PRIu64 " (POLLUX_SEED), %" PRIu64 " mutated pages\n", seed,
              iterations);
  std::mt19937_64 rng(seed);
  std::vector<BlobMetadata> bases = {sample_blob()};
  BlobMetadata frag;
  frag.id = 9;
  frag.num_clusters = 600;
  for (uint64_t i = 0; i < 600; ++i) frag.clusters.push_back(50 + 3 * i);
  bases.push_back(frag);
  BlobMetadata many = sample_blob();
  for (int i = 0; i < 12; ++i) many.xattrs.push_back({"k" + std::to_string(i), std::vector<uint8_t>(600, i)});
  bases.push_back(many);
  const uint64_t total_clusters = 4096;
  uint64_t accepted = 0, bad_crc = 0, bad_header = 0, rejected = 0;
  for (uint64_t it = 0; it < iterations; ++it) {
    const BlobMetadata& base = bases[it % bases.size()];
    auto pages = encode_blob(base, 1 + it).value();
    link_pages(pages, positions(pages.size()));
    auto& victim = pages[rng() % pages.size()];
    switch (rng() % 5) {
      case 0: victim[rng() % kPageSize] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
      case 1: {
        const std::size_t at = rng() % kPageSize, n = 1 + rng() % 16;
        for (std::size_t i = at; i < std::min<std::size_t>(kPageSize, at + n); ++i) victim[i] = rng();
        break;
      }
      case 2: {
        const std::size_t at = rng() % kPageSize, n = 1 + rng() % 512;
        std::memset(victim.data() + at, 0, std::min<std::size_t>(kPageSize - at, n));
        break;
      }
      case 3: {  // header and first descriptors are where the structure is
        const std::size_t at = rng() % 160;
        victim[at] = static_cast<uint8_t>(rng());
        break;
      }
      default: {
        const std::size_t a = (rng() % (kPageSize / 8)) * 8, b = (rng() % (kPageSize / 8)) * 8;
        std::swap_ranges(victim.begin() + a, victim.begin() + a + 8, victim.begin() + b);
      }
    }
    if (rng() % 8 != 0) reseal(victim);
    std::vector<const uint8_t*> chain;
    bool headers_ok = true;
    for (std::size_t i = 0; i < pages.size() && headers_ok; ++i) {
      PageHeader h;
      std::string why;
      headers_ok = decode_header(pages[i].data(), &h, &why);
      if (!headers_ok) {
        EXPECT_FALSE(why.empty());
        (why == "CRC mismatch" ? bad_crc : bad_header)++;
      }
      chain.push_back(pages[i].data());
    }
    if (!headers_ok) continue;
    auto r = decode_blob(chain, total_clusters);
    if (!r.ok()) {
      ++rejected;
      ASSERT_FALSE(r.error().message.empty()) << "seed " << seed << " iteration " << it;
      continue;
    }
    ++accepted;
    ASSERT_EQ(r->clusters.size(), r->num_clusters) << "seed " << seed << " iteration " << it;
    for (uint64_t c : r->clusters) ASSERT_LT(c, total_clusters) << "seed " << seed << " iteration " << it;
  }
  std::printf("mutation sweep: %" PRIu64 " CRC failures, %" PRIu64 " bad headers, %" PRIu64
              " rejected by the parser, %" PRIu64 " accepted (mutations that kept a valid blob)\n",
              bad_crc, bad_header, rejected, accepted);
  EXPECT_GT(rejected, iterations / 10);  // the parser itself was exercised, not just the CRC
}

}  // namespace
}  // namespace pollux::blob
