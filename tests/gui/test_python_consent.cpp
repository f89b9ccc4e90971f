// The GUI's permission for python: backends (app/gui/python_consent.h): the run is held until the user
// answers, asked once per file; allowed files reach the registry, refused ones are not asked again.
#include <gtest/gtest.h>

#include "attnscope/registry.h"
#include "python_consent.h"

using namespace attnscope;

TEST(PythonConsent, HoldsTheRunUntilAnsweredOncePerFile) {
  allow_all_user_code(false);
  const std::vector<std::string> ids = {"cpu.reference", "python:/tmp/consent_a.py:f", "python:/tmp/consent_a.py:g",
                                        "python:/tmp/consent_b.py:f"};
  gui::PythonConsent c;
  EXPECT_FALSE(c.holds_run({"cpu.reference"}));
  EXPECT_TRUE(c.holds_run(ids));
  EXPECT_EQ(c.asking(), (std::vector<std::string>{"/tmp/consent_a.py", "/tmp/consent_b.py"}));
  EXPECT_FALSE(user_code_allowed("python:/tmp/consent_a.py:f"));
  c.answer(true);
  EXPECT_TRUE(user_code_allowed("python:/tmp/consent_a.py:g"));
  EXPECT_TRUE(user_code_allowed("python:/tmp/consent_b.py:f"));
  EXPECT_FALSE(c.holds_run(ids));
  EXPECT_TRUE(c.holds_run({"python:/tmp/consent_c.py:f"}));
  c.answer(false);  // refused: not asked again, and the backend stays refused
  EXPECT_FALSE(c.holds_run({"python:/tmp/consent_c.py:f"}));
  EXPECT_FALSE(user_code_allowed("python:/tmp/consent_c.py:f"));
}

TEST(PythonConsent, HeadlessScreenshotsNeverAsk) {
  allow_all_user_code(false);
  gui::PythonConsent c;
  EXPECT_FALSE(c.holds_run({"python:/tmp/consent_d.py:f"}, true));
  EXPECT_TRUE(c.asking().empty());
  EXPECT_FALSE(user_code_allowed("python:/tmp/consent_d.py:f"));
}
