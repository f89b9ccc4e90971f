// The mask_mod / score_mod language (attnscope/mask_expr.h): precedence and functions, errors that
// name the column, and every built-in mask printed as an expression agreeing with mask.h's
// allowed() on every (query, key) pair of seeded random cases.
#include <gtest/gtest.h>

#include <cmath>

#include "attnscope/mask_bits.h"
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

namespace {

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

// The error of parsing s, or "" when it parses.
std::string error_of(const std::string& s, Expr::Kind k = Expr::Kind::kMask) {
  try {
    Expr::parse(s, k);
  } catch (const ExprError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// The attacks of issue 32 (each crashed validate, plan and the GUI with SIGSEGV): refused at the
// column where the limit is passed; at the limit itself they still parse and evaluate.
TEST(MaskExpr, NestingDepthAndSizeLimitsNameTheColumn) {
  const std::string n_limit = std::to_string(kMaxExprNesting);
  // 10,000 nested parentheses (20 KB): the 257th "(" is refused
  const std::string parens = repeat("(", 10000) + "1" + repeat(")", 10000);
  EXPECT_EQ(error_column(parens), kMaxExprNesting + 1);
  EXPECT_NE(error_of(parens).find("nested more than " + n_limit), std::string::npos) << error_of(parens);
  EXPECT_EQ(ev(repeat("(", kMaxExprNesting) + "1" + repeat(")", kMaxExprNesting)), 1);
  // unary chains: 1e4 minus signs, then 1e5 and 1e6 (past the size limit)
  EXPECT_EQ(error_column(repeat("-", 10000) + "1"), kMaxExprNesting + 1);
  EXPECT_EQ(error_column(repeat("! ", 10000) + "0"), 2 * kMaxExprNesting + 1);
  EXPECT_EQ(ev(repeat("-", kMaxExprNesting) + "3"), 3);  // an even number of minus signs
  EXPECT_EQ(ev(repeat("!", kMaxExprNesting - 1) + "0"), 1);
  EXPECT_EQ(error_column(repeat("-", 100000) + "1"), static_cast<int>(kMaxExprBytes) + 1);
  EXPECT_EQ(error_column(repeat("!", 1000000) + "0"), static_cast<int>(kMaxExprBytes) + 1);
  // nested calls
  EXPECT_EQ(error_column(repeat("abs(", 5000) + "1" + repeat(")", 5000)), 4 * kMaxExprNesting + 1);
  // a left-associative chain: one level per operator, so the depth limit stops it at its operator
  const std::string term = "+kv_idx";
  const std::string chain_ok = "kv_idx" + repeat(term, kMaxExprDepth - 1);
  const Expr ok = Expr::parse(chain_ok, Expr::Kind::kMask);
  EXPECT_EQ(ok.eval(ExprVars{.kv_idx = 2}), 2.0 * kMaxExprDepth);
  const std::string chain_deep = "kv_idx" + repeat(term, 9000);
  EXPECT_EQ(error_column(chain_deep), 6 + 7 * (kMaxExprDepth - 1) + 1);
  EXPECT_NE(error_of(chain_deep).find(std::to_string(kMaxExprDepth) + " operators deep"), std::string::npos);
  // the same terms grouped in parentheses are shallow and parse
  std::string grouped = "0";
  for (int g = 0; g < 9; ++g) grouped += "+(kv_idx" + repeat(term, 999) + ")";
  EXPECT_EQ(Expr::parse(grouped, Expr::Kind::kMask).eval(ExprVars{.kv_idx = 1}), 9000);
  // 200,000 terms (1.4 MB): the size limit, before any parsing
  EXPECT_EQ(error_column("kv_idx" + repeat(term, 200000)), static_cast<int>(kMaxExprBytes) + 1);
  // exactly the size limit parses
  EXPECT_EQ(error_column("1" + repeat(" ", kMaxExprBytes - 1)), -1);
  EXPECT_EQ(error_column("1" + repeat(" ", kMaxExprBytes)), static_cast<int>(kMaxExprBytes) + 1);
  EXPECT_NE(error_of("1" + repeat(" ", kMaxExprBytes)).find("limit of " + std::to_string(kMaxExprBytes) + " bytes"),
            std::string::npos);
  // huge literals parse (to inf where they overflow) in one pass
  EXPECT_EQ(ev(repeat("9", 60000)), INFINITY);
  EXPECT_EQ(ev("0." + repeat("0", 60000) + "1"), 0.0);
}

// Property: random expressions mixing every attack (deep groups, long chains, unary runs, calls,
// huge literals, stray bytes) parse or are refused with a column inside the text; what parses
// compiles within the evaluator's stack and evaluates.
TEST(MaskExpr, GeneratedHostileExpressionsNeverCrash) {
  uint64_t state = 12345;
  auto rnd = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  const char* atoms[] = {"kv_idx", "q_idx", "1", "2.5", "1e400", "doc(kv_idx)", "prefix_len"};
  const char* ops[] = {"+", "-", "*", "/", "%", "&&", "||", "<", "=="};
  int parsed = 0, refused = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::string s;
    const int pieces = 1 + static_cast<int>(rnd(6));
    for (int p = 0; p < pieces; ++p) {
      if (p > 0) s += ops[rnd(std::size(ops))];
      const size_t n = rnd(4) == 0 ? 200 + rnd(3000) : rnd(8);  // some runs past the limits
      switch (rnd(5)) {
        case 0:
          s += repeat("(", n) + atoms[rnd(std::size(atoms))] + repeat(")", n);
          break;
        case 1:
          s += repeat(rnd(2) ? "-" : "!", n) + atoms[rnd(std::size(atoms))];
          break;
        case 2:
          s.append("(").append(atoms[0]);
          for (size_t t = 0; t < n; ++t) s.append("+").append(atoms[rnd(std::size(atoms))]);
          s.append(")");
          break;
        case 3:
          s += repeat("abs(", n) + atoms[rnd(std::size(atoms))] + repeat(")", n);
          break;
        default:
          s += repeat("9", n * 10 + 1);
          break;
      }
      if (rnd(20) == 0) s.insert(rnd(s.size() + 1), rnd(2) ? std::string(1, '\0') : std::string("\xc3\xa9"));
    }
    try {
      const Expr e = Expr::parse(s, Expr::Kind::kMask);
      ExprVars v{.q_idx = 3, .kv_idx = 2};
      (void)e.eval(v);
      EXPECT_LE(e.ops().size(), s.size());
      ++parsed;
    } catch (const ExprError& e) {
      EXPECT_GE(e.column, 1) << s.substr(0, 80);
      EXPECT_LE(e.column, static_cast<int>(s.size()) + 1) << s.substr(0, 80);
      EXPECT_EQ(std::string(e.what()).find('\0'), std::string::npos);
      ++refused;
    }
  }
  EXPECT_GT(parsed, 30);
  EXPECT_GT(refused, 30);
}

// Messages show a whole character, never half a UTF-8 sequence, and a NUL or a stray byte escaped
// (what() is a C string: a raw NUL would cut it).
TEST(MaskExpr, MessagesShowWholeCharactersAndEscapeControlBytes) {
  const std::string e_acute = "kv_idx \xc3\xa9 1";
  EXPECT_NE(error_of(e_acute).find("unexpected \"\xc3\xa9\""), std::string::npos) << error_of(e_acute);
  const std::string nul = std::string("kv_idx ") + '\0' + " 1";
  const std::string m = error_of(nul);
  EXPECT_NE(m.find("unexpected \"\\x00\" after a complete expression"), std::string::npos) << m;
  EXPECT_EQ(m.find('\0'), std::string::npos);
  EXPECT_NE(error_of("\xff").find("unexpected \"\\xFF\""), std::string::npos) << error_of("\xff");
  EXPECT_EQ(printable(std::string("a\0b\x01\x7f\xe2\x82\xac\xe2\x82", 10)), "a\\x00b\\x01\\x7F\xe2\x82\xac\\xE2\\x82");
}

namespace {

std::string case_error_of(const CaseSpec& c) {
  try {
    validate_case(c);
  } catch (const CaseError& e) {
    return e.what();
  }
  return "";
}

CaseSpec masked_case(std::vector<RequestSpec> requests, const std::string& mask_mod) {
  CaseSpec c = attnscope::testing::random_case(1);
  c.requests = std::move(requests);
  c.attention = AttentionSpec{};
  c.attention.causal = false;
  c.attention.mask_mod = mask_mod;
  c.kv_cache.max_num_blocks_per_seq.reset();
  c.split.planner = Planner::kOff;
  c.sample_rows.reset();
  return c;
}

}  // namespace

// A mask_mod is evaluated on every pair when a plan is made: past the budget the case is refused
// with the figure, before anything is allocated (a 4M x 4M request was std::bad_alloc from plan).
TEST(MaskExpr, MaskModBudgetRefusesWithTheFigureBeforeAllocating) {
  const std::string doc = "doc(kv_idx) == doc(q_idx)";
  const int side = 1 << 14;  // side x side = kMaxMaskPairs
  static_assert((int64_t{1} << 28) == kMaxMaskPairs);
  EXPECT_EQ(case_error_of(masked_case({{side, side}}, doc)), "");
  const std::string over = case_error_of(masked_case({{side, side + 1}}, doc));
  EXPECT_NE(over.find("/attention/mask_mod: would be evaluated on " + std::to_string(int64_t{side} * (side + 1)) +
                      " (query, key) pairs"),
            std::string::npos)
      << over;
  EXPECT_NE(over.find(std::to_string(kMaxMaskPairs)), std::string::npos) << over;
  // 64 requests of 32k x 32k: the sum counts
  const std::string many = case_error_of(masked_case(std::vector<RequestSpec>(64, RequestSpec{32768, 32768}), doc));
  EXPECT_NE(many.find(std::to_string(int64_t{64} << 30) + " (query, key) pairs"), std::string::npos) << many;
  // memory: tall requests cost a word per row even with few keys
  const std::string tall = case_error_of(masked_case(std::vector<RequestSpec>(8, RequestSpec{1 << 22, 1 << 22}), doc));
  EXPECT_NE(tall.find("pairs"), std::string::npos) << tall;
  // (q_len <= kv_len keeps a valid case's bits under the pair budget / 8 plus a word per row; the
  // byte limit guards callers of make_mask_bits that skip validate_case)
  try {
    check_mask_budget(masked_case(std::vector<RequestSpec>(2, RequestSpec{1 << 22, 1}), doc),
                      Expr::parse(doc, Expr::Kind::kMask));
    ADD_FAILURE() << "8M rows of mask bits accepted";
  } catch (const CaseError& e) {
    EXPECT_NE(std::string(e.what()).find("needs " + std::to_string(int64_t{8 << 20} * 16) +
                                         " bytes of mask bits, more than the " + std::to_string(kMaxMaskBytes)),
              std::string::npos)
        << e.what();
  }
  // a long expression lowers the pairs it may run on
  std::string longer = "kv_idx >= 0";
  for (int i = 0; i < 40; ++i) longer += " && kv_idx >= 0";
  const std::string ops = case_error_of(masked_case({{side, side}}, longer));
  EXPECT_NE(ops.find("operations, more than the " + std::to_string(kMaxMaskOps)), std::string::npos) << ops;
  // make_plan refuses the 4M x 4M request as a CaseError, not std::bad_alloc
  const CaseSpec huge = masked_case({{1 << 22, 1 << 22}}, doc);
  EXPECT_NE(case_error_of(huge).find("/attention/mask_mod"), std::string::npos);
  try {
    (void)make_plan(huge);
    ADD_FAILURE() << "make_plan accepted a 4M x 4M mask_mod";
  } catch (const CaseError& e) {
    EXPECT_EQ(e.path(), "/attention/mask_mod");
  }
}

// A mask_mod longer than the size limit is refused at its JSON path, naming the limit.
TEST(MaskExpr, ExpressionSizeLimitNamesThePath) {
  CaseSpec c = masked_case({{4, 4}}, "kv_idx >= 0" + std::string(kMaxExprBytes, ' '));
  const std::string m = case_error_of(c);
  EXPECT_EQ(m.rfind("/attention/mask_mod: column " + std::to_string(kMaxExprBytes + 1), 0), 0u) << m;
  EXPECT_NE(m.find(std::to_string(kMaxExprBytes) + " bytes"), std::string::npos) << m;
  c.attention.mask_mod.reset();
  c.attention.score_mod = "score" + std::string(kMaxExprBytes, ' ');
  EXPECT_EQ(case_error_of(c).rfind("/attention/score_mod: column", 0), 0u) << case_error_of(c);
}
