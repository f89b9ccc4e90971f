// The mask_mod / score_mod language (attnscope/mask_expr.h): precedence and functions, errors that
// name the column, and every built-in mask printed as an expression agreeing with mask.h's
// allowed() on every (query, key) pair of seeded random cases.
#include <gtest/gtest.h>

#include <cmath>

#include "attnscope/mask_expr.h"
#include "attnscope/plan.h"
#include "case_gen.h"

using namespace attnscope;

namespace {

double ev(const std::string& s, ExprVars v = {}) { return Expr::parse(s, Expr::Kind::kScore).eval(v); }

int error_column(const std::string& s, Expr::Kind k = Expr::Kind::kMask) {
  try {
    Expr::parse(s, k);
  } catch (const ExprError& e) {
    return e.column;
  }
  return -1;
}

}  // namespace

TEST(MaskExpr, PrecedenceFunctionsAndVariables) {
  EXPECT_EQ(ev("1 + 2 * 3"), 7);
  EXPECT_EQ(ev("(1 + 2) * 3"), 9);
  EXPECT_EQ(ev("10 - 4 - 3"), 3);  // left associative
  EXPECT_EQ(ev("-2 * -3"), 6);
  EXPECT_EQ(ev("7 % 4"), 3);
  EXPECT_EQ(ev("1 < 2 && 3 >= 3"), 1);
  EXPECT_EQ(ev("0 || 1 && 0"), 0);  // && binds tighter than ||
  EXPECT_EQ(ev("!0 && !(2 == 3)"), 1);
  EXPECT_EQ(ev("min(3, 5) + max(3, 5) + abs(-2)"), 10);
  EXPECT_EQ(ev("where(1 != 1, 5, 6)"), 6);
  EXPECT_EQ(ev("floor(7 / 2)"), 3);
  EXPECT_NEAR(ev("50 * tanh(score / 50)", ExprVars{.score = 20}), 50 * std::tanh(0.4), 1e-15);
  EXPECT_NEAR(ev("exp(1)"), std::exp(1.0), 1e-15);
  ExprVars v;
  v.q_idx = 10, v.kv_idx = 4, v.q_len = 3, v.kv_len = 12, v.b = 1, v.h = 2, v.prefix_len = 5;
  EXPECT_EQ(ev("q_idx - kv_idx + b + h + q_len + kv_len + prefix_len", v), 6 + 1 + 2 + 3 + 12 + 5);
  const std::vector<int> docs = {0, 5, 9};
  v.doc_starts = &docs;
  EXPECT_EQ(ev("doc(kv_idx) * 10 + doc(q_idx)", v), 0 * 10 + 2);
}

TEST(MaskExpr, ErrorsNameTheColumnAndTheRule) {
  EXPECT_EQ(error_column("kv_idx <= q_idx && kv"), 20);  // unknown name
  EXPECT_EQ(error_column("kv_idx <= q_idx +"), 18);      // end where an operand is expected
  EXPECT_EQ(error_column("score > 0"), 1);               // score only in a score_mod
  EXPECT_EQ(error_column("score > 0", Expr::Kind::kScore), -1);
  EXPECT_EQ(error_column("min(1)"), 1);          // arity
  EXPECT_EQ(error_column("sqrt(2)"), 1);         // unknown function
  EXPECT_EQ(error_column("(1 + 2"), 7);          // missing )
  EXPECT_EQ(error_column("q_idx = kv_idx"), 7);  // = is not ==
  EXPECT_EQ(error_column("1 < 2 < 3"), 7);       // comparisons do not chain
  EXPECT_EQ(error_column("2q_idx"), 2);          // a number runs into a name
  EXPECT_EQ(error_column("1 2"), 3);             // trailing input
  try {
    Expr::parse("kv_idx <= qidx", Expr::Kind::kMask);
    ADD_FAILURE();
  } catch (const ExprError& e) {
    EXPECT_NE(std::string(e.what()).find("column 11: unknown name \"qidx\" (names: b, h, q_idx"), std::string::npos) << e.what();
  }
}

TEST(MaskExpr, BuiltInMasksAsExpressionsAgreeWithAllowedOnEveryPair) {
  int cases = 0, pairs = 0, kinds = 0;
  for (uint64_t seed = 0; seed < 120; ++seed) {
    const CaseSpec c = attnscope::testing::random_case(seed);
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      const std::string text = builtin_mask_expr(c, r);
      const Expr e = Expr::parse(text, Expr::Kind::kMask);
      const RowMask m = row_mask(c, r);
      const RequestSpec& rq = c.requests[r];
      ExprVars v;
      v.b = r, v.q_len = rq.q_len, v.kv_len = rq.kv_len, v.prefix_len = rq.prefix_len.value_or(0);
      v.doc_starts = &rq.doc_starts;
      for (int q = 0; q < rq.q_len; ++q)
        for (int k = 0; k < rq.kv_len; ++k) {
          v.q_idx = q_abs_of(m, q);
          v.kv_idx = k;
          ASSERT_EQ(e.allows(v), allowed(m, q_abs_of(m, q), k))
              << c.name << " request " << r << " q_abs " << v.q_idx << " k " << k << ": " << text;
          ++pairs;
        }
      kinds += text.find("floor") != std::string::npos || text.find("doc(") != std::string::npos ||
               text.find("prefix_len") != std::string::npos || text.find("q_idx - kv_idx") != std::string::npos;
    }
    ++cases;
  }
  EXPECT_GT(pairs, 100000);
  EXPECT_GT(kinds, 20) << "the random cases reach windows, chunks, prefixes and documents";
}
