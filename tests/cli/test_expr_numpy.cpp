// expr_numpy.h against attnscope's own evaluation, bit for bit: seeded random expressions that the
// parser accepts, and the hostile ones of issue 32 (literals past double, 1 / 0, % 0, NaN in min /
// max / where / && / doc / alibi, products past 2^63, a 120-clause block list), each translated,
// run by python3 + numpy over a grid of variables, and compared with eval_expr element by element.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "attnscope/mask_expr.h"
#include "expr_numpy.h"
#include "shell.h"

namespace fs = std::filesystem;
using attnscope::Expr;
using attnscope::ExprEnv;
using attnscope::py_float;
using attnscope::testing::sh;

namespace {

std::string python_with_numpy() {
  for (const char* py : {"python3", "/usr/bin/python3"})
    if (sh(std::string(py) + " -c 'import numpy' >/dev/null").code == 0) return py;
  return "";
}

// Random expression text over the whole grammar (mask_expr.cpp), depth at most `depth`. Binary
// operations are mostly parenthesised; the rest exercise precedence, and what the parser refuses
// (a < b < c) is skipped by the caller.
class ExprGen {
 public:
  ExprGen(uint64_t seed, bool score) : rng_(seed), score_(score) {}

  std::string expr(int depth) {
    if (depth == 0 || pick(5) == 0) return leaf();
    static const char* const kBinary[] = {"+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||"};
    static const char* const kCalls1[] = {"abs", "tanh", "exp", "floor", "doc", "alibi"};
    switch (pick(6)) {
      case 0:
        return (pick(2) ? "-" : "!") + expr(depth - 1);
      case 1: {
        const std::string fn = kCalls1[pick(std::size(kCalls1))];
        return fn + "(" + expr(depth - 1) + ")";
      }
      case 2:
        return std::string(pick(2) ? "min(" : "max(") + expr(depth - 1) + ", " + expr(depth - 1) + ")";
      case 3:
        return "where(" + expr(depth - 1) + ", " + expr(depth - 1) + ", " + expr(depth - 1) + ")";
      default: {
        const std::string t = expr(depth - 1) + " " + kBinary[pick(std::size(kBinary))] + " " + expr(depth - 1);
        return pick(5) ? "(" + t + ")" : t;
      }
    }
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  std::string leaf() {
    static const char* const kVars[] = {"b", "h", "q_idx", "kv_idx", "q_len", "kv_len", "prefix_len", "score"};
    static const char* const kNums[] = {"0",    "1",     "2",      "3",      "7",          "0.5",        ".25",
                                        "5.",   "1e400", "1e-400", "1e308",  "4294967296", "3037000500", "9007199254740993",
                                        "1e18", "0x10",  "0x1p-3", "1e-320", "2147483648", "1073741824", "710"};
    if (pick(5) < 3) return kVars[pick(std::size(kVars) - (score_ ? 0 : 1))];
    if (pick(3) == 0) return std::to_string(pick(25));
    return kNums[pick(std::size(kNums))];
  }

  std::mt19937_64 rng_;
  bool score_;
};

// The variables of one call: a request (b, its lengths and documents) and points (h, q_idx, kv_idx, score).
struct Group {
  int b, q_len, kv_len, prefix_len;
  std::vector<int> doc_starts;
  std::vector<double> h, q, kv, score;
};

std::vector<Group> grid() {
  std::vector<Group> g = {{0, 8, 20, 3, {0, 5, 9, 17}, {}, {}, {}, {}}, {1, 1, 1, 0, {}, {}, {}, {}, {}}};
  const double kScores[] = {0.0, -0.0, 1.0, -1.5, 2.75, 30.0, 1e300, -1e300, 1e-310, INFINITY, -INFINITY, std::nan("")};
  std::mt19937 rng(5);
  for (auto& x : g)
    for (int i = 0; i < 48; ++i) {
      x.h.push_back(static_cast<double>(rng() % 7));
      x.q.push_back(static_cast<double>(static_cast<int>(rng() % 28) - 3));
      x.kv.push_back(static_cast<double>(static_cast<int>(rng() % 28) - 3));
      x.score.push_back(kScores[rng() % std::size(kScores)]);
    }
  return g;
}

double eval_at(const Expr& e, const Group& g, int num_heads, size_t i) {
  ExprEnv env;
  env.v[attnscope::kVarB] = g.b;
  env.v[attnscope::kVarH] = g.h[i];
  env.v[attnscope::kVarQ] = g.q[i];
  env.v[attnscope::kVarKv] = g.kv[i];
  env.v[attnscope::kVarQLen] = g.q_len;
  env.v[attnscope::kVarKvLen] = g.kv_len;
  env.v[attnscope::kVarPrefix] = g.prefix_len;
  env.v[attnscope::kVarScore] = g.score[i];
  env.doc_starts = g.doc_starts.empty() ? nullptr : g.doc_starts.data();
  env.num_docs = static_cast<int>(g.doc_starts.size());
  env.num_heads = num_heads;
  return e.eval(env);
}

std::string py_list(const std::vector<double>& v) {
  std::string s = "[";
  for (double x : v) s += py_float(x) + ", ";
  return s + "]";
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);  // NaN payloads are not compared
  return std::memcmp(&a, &b, sizeof a) == 0;                                  // -0 and +0 differ
}

struct Item {
  Expr e;
  int num_heads;
};

// Translates every item into one module, runs it, and compares every value with eval_expr. Returns
// the number of values compared.
size_t check(const std::string& py, const std::vector<Item>& items, const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("attnscope_expr_numpy_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<Group> groups = grid();
  std::ofstream m(dir / "exprs.py");
  m << "import numpy as np\nimport sys\n";
  for (size_t i = 0; i < items.size(); ++i)
    m << attnscope::expr_numpy_helpers(items[i].e) << "\n\n"
      << attnscope::expr_numpy_def(items[i].e, std::string("f").append(std::to_string(i)));
  m << "\n\nFNS = [";
  for (size_t i = 0; i < items.size(); ++i) m << "(f" << i << ", " << items[i].num_heads << "), ";
  m << "]\nGROUPS = [\n";
  for (const Group& g : groups) {
    m << "    (" << g.b << ", " << g.q_len << ", " << g.kv_len << ", " << g.prefix_len << ", [";
    for (int d : g.doc_starts) m << d << ", ";
    m << "], " << py_list(g.h) << ", " << py_list(g.q) << ", " << py_list(g.kv) << ", " << py_list(g.score) << "),\n";
  }
  m << "]\n"
       "out = []\n"
       "for f, heads in FNS:\n"
       "    for b, ql, kl, pl, docs, h, q, kv, score in GROUPS:\n"
       "        h, q, kv, score = (np.array(x, dtype=np.float64) for x in (h, q, kv, score))\n"
       "        out.append(np.broadcast_to(f(b, h, q, kv, ql, kl, pl, docs, heads, score=score), q.shape))\n"
       "np.concatenate(out).astype('<f8').tofile(sys.argv[1])\n";
  m.close();
  const auto r = sh(py + " -W error::RuntimeWarning " + (dir / "exprs.py").string() + " " + (dir / "out.bin").string());
  EXPECT_EQ(r.code, 0) << r.out;
  std::ifstream in(dir / "out.bin", std::ios::binary);
  const size_t per = groups[0].q.size();
  std::vector<double> got(items.size() * groups.size() * per, 0.0);
  in.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * sizeof(double)));
  EXPECT_EQ(static_cast<size_t>(in.gcount()), got.size() * sizeof(double)) << "values written by the script";
  size_t at = 0, compared = 0;
  int reported = 0;
  for (const Item& it : items)
    for (const Group& g : groups)
      for (size_t i = 0; i < per; ++i, ++at) {
        const double want = eval_at(it.e, g, it.num_heads, i);
        ++compared;
        if (!same_value(got[at], want) && reported++ < 10)
          ADD_FAILURE() << "\"" << it.e.text() << "\" at b " << g.b << " h " << g.h[i] << " q_idx " << g.q[i] << " kv_idx "
                        << g.kv[i] << " score " << g.score[i] << " heads " << it.num_heads << ": numpy " << got[at]
                        << ", attnscope " << want << "\n"
                        << attnscope::expr_numpy_def(it.e, "f");
      }
  EXPECT_EQ(reported, 0) << "values that differ";
  fs::remove_all(dir);
  return compared;
}

// Block-sparse mask of n clauses: an || of n rectangles, each an && of four comparisons.
std::string block_list(int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += (i ? " || " : "") + std::string("(q_idx >= ") + std::to_string(i % 20) + " && q_idx < " + std::to_string(i % 20 + 3) +
         " && kv_idx >= " + std::to_string(i % 17) + " && kv_idx < " + std::to_string(i % 17 + 2) + ")";
  return s;
}

}  // namespace

TEST(ExprNumpy, HostileExpressionsGiveAttnscopesValues) {
  const std::string py = python_with_numpy();
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  const std::vector<std::string> mask = {"kv_idx < 1e400",
                                         "1 / 0 > 0",
                                         "alibi(0)",
                                         "kv_idx % 0",
                                         "kv_idx % 0 == kv_idx % 0",
                                         "min(0 / 0, 1)",
                                         "min(1, 0 / 0)",
                                         "max(0 / 0, kv_idx)",
                                         "kv_idx * 3037000500 * 3037000500 > 0",
                                         "(kv_idx + 1) * 4294967296 * 4294967296 != 0",
                                         "(q_idx - kv_idx) % 3 == 0",
                                         "q_idx % -4",
                                         "-0 == 0",
                                         "1 / -0 < 0",
                                         "where(0 / 0, 1, 0)",
                                         "!(0 / 0)",
                                         "0 / 0 && 1",
                                         "0 / 0 || 0",
                                         "doc(0 / 0) == 0",
                                         "doc(-1)",
                                         "doc(1e400)",
                                         "doc(kv_idx) == doc(q_idx)",
                                         "doc(kv_idx + 0.5)",
                                         "alibi(kv_idx)",
                                         "alibi(0 / 0)",
                                         "alibi(1e10)",
                                         "alibi(-1e10)",
                                         "alibi(-5)",
                                         "alibi(2147483647)",
                                         "alibi(1073741825)",
                                         "exp(kv_idx * 100) > 1e300",
                                         "exp(710) > 0",
                                         "exp(-1e400) == 0",
                                         "tanh(1e400)",
                                         "tanh(kv_idx / 7) * 1e17 % 7",
                                         "exp(q_idx / 3) * 1e16 % 10 < 5",
                                         "floor(-0.5) == -1",
                                         "0x10 == 16",
                                         "1e-400 == 0",
                                         "9007199254740993 == 9007199254740992",
                                         block_list(120),
                                         block_list(300)};
  std::vector<Item> items;
  for (const auto& t : mask)
    for (int heads : {1, 6, 8}) items.push_back({Expr::parse(t, Expr::Kind::kMask), heads});
  for (const auto& t : {"score * 1e308 * 10", "score % 0", "min(score, 0 / 0)", "30 * tanh(score / 30)", "exp(score)",
                        "score + alibi(h) * (kv_idx - q_idx)", "where(score, score, -score)", "-score"})
    items.push_back({Expr::parse(t, Expr::Kind::kScore), 12});
  EXPECT_GT(check(py, items, "hostile"), 1000u);
}

TEST(ExprNumpy, RandomExpressionsGiveAttnscopesValuesBitForBit) {
  const std::string py = python_with_numpy();
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  std::vector<Item> items;
  int refused = 0;
  const int kHeads[] = {1, 3, 4, 6, 8, 12, 32};
  for (uint64_t seed = 0; seed < 800; ++seed) {
    const bool score = seed % 2 == 1;
    const std::string text = ExprGen(seed, score).expr(5);
    try {
      items.push_back({Expr::parse(text, score ? Expr::Kind::kScore : Expr::Kind::kMask), kHeads[seed % std::size(kHeads)]});
    } catch (const attnscope::ExprError&) {
      ++refused;  // e.g. a < b < c: the property is over what the parser accepts
    }
  }
  EXPECT_GT(items.size(), 600u) << refused << " refused by the parser";
  EXPECT_GT(check(py, items, "random"), 50000u);
}

// plan --json's PyTorch text (expr_torch_text) drops the parentheses Python does not need and spells
// 1e400 float("inf"): on random expressions it must mean what expr_to_torch's fully parenthesised
// text means (both run with numpy standing in for torch, which CI lacks: same values or the same
// exception), and a 300-clause block list or a 400-term sum must still compile.
TEST(ExprNumpy, TorchTextMeansWhatTheParenthesisedTextMeans) {
  const std::string py = python_with_numpy();
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  std::string pairs;
  int n = 0;
  for (uint64_t seed = 1000; seed < 1600; ++seed) {
    const bool score = seed % 2 == 1;
    try {
      const Expr e = Expr::parse(ExprGen(seed, score).expr(5), score ? Expr::Kind::kScore : Expr::Kind::kMask);
      pairs += "    (" + attnscope::py_str(attnscope::expr_torch_text(e)) + ", " +
               attnscope::py_str(attnscope::expr_to_torch(e)) + "),\n";
      ++n;
    } catch (const attnscope::ExprError&) {
    }
  }
  std::string sum = "kv_idx";
  for (int i = 0; i < 400; ++i) sum += i % 2 ? " + kv_idx" : " - q_idx";
  const std::string long_ones[] = {block_list(300), sum + " > 0", "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!(kv_idx < 3)"};
  std::string compiles;
  for (const auto& t : long_ones)
    compiles += "    " + attnscope::py_str(attnscope::expr_torch_text(Expr::parse(t, Expr::Kind::kMask))) + ",\n";
  const fs::path dir = fs::temp_directory_path() / ("attnscope_torch_text_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "t.py") << R"(import types, sys
import numpy as np
torch = types.SimpleNamespace(as_tensor=np.asarray, minimum=np.minimum, maximum=np.maximum, abs=np.abs, where=np.where,
                              tanh=np.tanh, exp=np.exp, floor=np.floor, fmod=np.fmod)
_b = lambda x: np.asarray(x) != 0
_doc = lambda x: np.floor(np.asarray(x, dtype=np.float64)) // 4
_alibi = lambda x: np.asarray(x, dtype=np.float64) * 0.5
b, h, q_len, kv_len, prefix_len = 1, 2, 8, 20, 3
q_idx, kv_idx, score = np.arange(-3, 25)[:, None], np.arange(-3, 25)[None, :], np.linspace(-5, 5, 28)[None, :]


def run(text, env):
    try:
        with np.errstate(all="ignore"):
            return "ok", np.broadcast_to(np.asarray(eval(text, env), dtype=np.float64), (28, 28))
    except Exception as e:
        return type(e).__name__, None


PAIRS = [
)" << pairs << "]\nLONG = [\n" << compiles
                              << R"(]
bad = 0
for mine, old in PAIRS:
    (ka, a), (kb, b_) = run(mine, dict(globals(), inf=None, nan=None)), run(old, globals())
    if ka != kb or (a is not None and not np.array_equal(a, b_, equal_nan=True)):
        bad += 1
        print("differs:", mine, "|", old, ka, kb)
for text in LONG:
    compile(text, "<torch>", "eval")
print(len(PAIRS), "pairs,", bad, "differ")
sys.exit(1 if bad else 0)
)";
  const auto r = sh(py + " " + (dir / "t.py").string());
  EXPECT_EQ(r.code, 0) << r.out.substr(0, 4000);
  EXPECT_NE(r.out.find(std::to_string(n) + " pairs, 0 differ"), std::string::npos) << r.out.substr(0, 4000);
  EXPECT_GT(n, 400);
  fs::remove_all(dir);
}

// A literal past double (1e999) is inf: both PyTorch texts (plan --json's and the one the Python
// worker execs for python.flex_attention) spell it float("inf"); a bare `inf` was a NameError there.
TEST(ExprNumpy, TorchTextsSpellAnInfiniteLiteralForPython) {
  const char* const texts[] = {"kv_idx < 1e999", "q_idx - kv_idx > -1e400 && kv_idx < 2e308", "min(kv_idx, 1e999) == kv_idx"};
  std::string evals;
  for (const char* t : texts) {
    const Expr e = Expr::parse(t, Expr::Kind::kMask);
    for (std::string s : {attnscope::expr_to_torch(e), attnscope::expr_torch_text(e)}) {
      evals += "    " + attnscope::py_str(s) + ",\n";
      for (size_t i; (i = s.find("float(\"inf\")")) != std::string::npos;) s.erase(i, 12);
      EXPECT_EQ(s.find("inf"), std::string::npos) << t << ": " << s;
    }
  }
  const std::string py = python_with_numpy();
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  const fs::path f = fs::temp_directory_path() / ("attnscope_torch_inf_" + std::to_string(::getpid()) + ".py");
  std::ofstream(f) << R"(import types
import numpy as np
torch = types.SimpleNamespace(as_tensor=np.asarray, minimum=np.minimum, maximum=np.maximum)
_b = lambda x: np.asarray(x) != 0
q_idx, kv_idx = np.arange(4)[:, None], np.arange(4)[None, :]
for text in [
)" << evals << R"(]:
    assert np.all(eval(text)), text
print("all true")
)";
  const auto r = sh(py + " " + f.string());
  fs::remove(f);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("all true"), std::string::npos) << r.out;
}
