#include "common/text.h"

#include <gtest/gtest.h>

namespace pollux {
namespace {

TEST(Utf8, FindsTheFirstInvalidByte) {
  EXPECT_EQ(invalid_utf8_at("plain ascii"), std::string_view::npos);
  EXPECT_EQ(invalid_utf8_at("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::string_view::npos);
  EXPECT_EQ(invalid_utf8_at("ab\xbd"), 2u);                 // a lone continuation byte
  EXPECT_EQ(invalid_utf8_at("a\xc3"), 1u);                  // cut short
  EXPECT_EQ(invalid_utf8_at("\xc0\xaf"), 0u);               // overlong '/'
  EXPECT_EQ(invalid_utf8_at("x\xed\xa0\x80"), 1u);          // a surrogate
  EXPECT_EQ(invalid_utf8_at("\xf4\x90\x80\x80"), 0u);       // above U+10FFFF
  EXPECT_EQ(invalid_utf8_at("\xe2\x82(x"), 0u);             // bad continuation
}

TEST(JsonText, ReplacesInvalidUtf8InsteadOfThrowing) {
  nlohmann::json j{{"label", "lab\xbd"}, {"ok", false}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);  // what this guards against
  std::string text;
  ASSERT_NO_THROW(text = json_text(j));
  EXPECT_EQ(text, "{\"label\":\"lab\xef\xbf\xbd\",\"ok\":false}");
  EXPECT_EQ(json_text({{"a", 1}}, 2), "{\n  \"a\": 1\n}");
}

}  // namespace
}  // namespace pollux
