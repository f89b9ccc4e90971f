// The NumPy translation of an expression (expr_numpy.h).
#include "expr_numpy.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <vector>

namespace attnscope {

namespace {

bool uses(const Expr& e, ExprCode code) {
  for (const ExprOp& op : e.ops())
    if (op.code == code) return true;
  return false;
}

const char* const kVarNames[] = {"b", "h", "q_idx", "kv_idx", "q_len", "kv_len", "prefix_len", "score"};
static_assert(std::size(kVarNames) == kNumExprVars, "one name per ExprVar");

const char* binary_text(ExprCode c) {
  switch (c) {
    case ExprCode::kAdd:
      return "{a} + {b}";
    case ExprCode::kSub:
      return "{a} - {b}";
    case ExprCode::kMul:
      return "{a} * {b}";
    case ExprCode::kDiv:
      return "{a} / {b}";  // float64: x / 0 is inf or NaN, as in C (errstate silences the warning)
    case ExprCode::kMod:
      return "np.fmod({a}, {b})";  // C's fmod on float64 (Python's % rounds toward -inf)
    case ExprCode::kLt:
      return "_f({a} < {b})";
    case ExprCode::kLe:
      return "_f({a} <= {b})";
    case ExprCode::kGt:
      return "_f({a} > {b})";
    case ExprCode::kGe:
      return "_f({a} >= {b})";
    case ExprCode::kEq:
      return "_f({a} == {b})";
    case ExprCode::kNe:
      return "_f({a} != {b})";
    case ExprCode::kAnd:
      return "_f(({a} != 0) & ({b} != 0))";  // NaN != 0: NaN is true here, as in C
    case ExprCode::kOr:
      return "_f(({a} != 0) | ({b} != 0))";
    case ExprCode::kMin:
      return "np.where({a} < {b}, {a}, {b})";  // a < b ? a : b: min(NaN, 1) = 1, min(1, NaN) = NaN
    case ExprCode::kMax:
      return "np.where({a} > {b}, {a}, {b})";
    default:
      return nullptr;
  }
}

const char* unary_text(ExprCode c) {
  switch (c) {
    case ExprCode::kNeg:
      return "-{a}";
    case ExprCode::kNot:
      return "_f({a} == 0)";
    case ExprCode::kAbs:
      return "np.abs({a})";
    case ExprCode::kTanh:
      return "_tanh({a})";
    case ExprCode::kExp:
      return "_exp({a})";
    case ExprCode::kFloor:
      return "np.floor({a})";
    case ExprCode::kDoc:
      return "_doc({a}, doc_starts)";
    case ExprCode::kAlibi:
      return "_alibi({a}, num_heads)";
    default:
      return nullptr;
  }
}

std::string subst(std::string t, const std::string& a, const std::string& b) {
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"{a}", a}, {"{b}", b}})
    for (size_t at = t.find(key); at != std::string::npos; at = t.find(key, at + value.size())) t.replace(at, key.size(), value);
  return t;
}

// How this build's static_cast<int>(double) treats NaN and values outside int (alibi()'s argument):
// x86-64's cvttsd2si gives INT_MIN, AArch64's fcvtzs saturates and gives 0 for NaN.
const char* int_cast_rule() {
#if defined(__aarch64__)
  return "    # static_cast<int>(x) as attnscope's AArch64 build does it: truncation, saturated, 0 for NaN\n"
         "    h = 0 if x != x else -2147483648 if x <= -2147483648.0 else 2147483647 if x >= 2147483647.0 else int(x)\n";
#else
  return "    # static_cast<int>(x) as attnscope's x86-64 build does it: truncation, INT_MIN when NaN or out of range\n"
         "    h = int(x) if -2147483649.0 < x < 2147483648.0 else -2147483648\n";
#endif
}

}  // namespace

std::string expr_numpy_def(const Expr& e, const std::string& name) {
  std::string body;
  // stack slot i of eval_expr is the name s<i>: at most kExprStack arrays are alive at once
  int sp = 0;
  auto slot = [](int i) { return std::string("s").append(std::to_string(i)); };
  for (const ExprOp& op : e.ops()) {
    std::string line;
    if (op.code == ExprCode::kNum) {
      line = slot(sp++) + " = _f(" + py_float(op.num) + ")";
    } else if (op.code == ExprCode::kVar) {
      line = slot(sp++) + " = _f(" + kVarNames[op.var] + ")";
    } else if (const char* u = unary_text(op.code)) {
      line = slot(sp - 1) + " = " + subst(u, slot(sp - 1), "");
    } else if (op.code == ExprCode::kWhere) {
      sp -= 2;  // where(c, a, b): c != 0 ? a : b (NaN is true)
      line = slot(sp - 1) + " = np.where(" + slot(sp - 1) + " != 0, " + slot(sp) + ", " + slot(sp + 1) + ")";
    } else if (const char* bin = binary_text(op.code)) {
      --sp;
      line = slot(sp - 1) + " = " + subst(bin, slot(sp - 1), slot(sp));
    }
    body += "        " + line + "\n";
  }
  if (sp == 0) body += "        s0 = _f(0.0)\n";
  return "def " + name +
         "(b, h, q_idx, kv_idx, q_len, kv_len, prefix_len, doc_starts, num_heads, score=0.0):\n"
         "    \"\"\"attnscope's expression in float64, one line per operation of its postfix program (s<i>: its\n"
         "    stack slot i), with attnscope's rules: 1 / 0 = inf, 0 / 0 = NaN, and NaN counts as false only\n"
         "    in the final verdict.\"\"\"\n"
         "    with np.errstate(all=\"ignore\"):  # inf and NaN are values here, not errors\n" +
         body + "        return s0\n";
}

std::string expr_numpy_helpers(const Expr& e) {
  std::string h =
      "\n\ndef _f(x):\n"
      "    \"\"\"A value as attnscope holds every value of an expression: a float64 array.\"\"\"\n"
      "    return np.asarray(x, dtype=np.float64)\n";
  const bool exp = uses(e, ExprCode::kExp), tanh = uses(e, ExprCode::kTanh), alibi = uses(e, ExprCode::kAlibi);
  if (exp || tanh || alibi) h += "\n\nimport math  # the C library's exp / tanh / pow, which attnscope's C++ calls\n";
  if (exp || tanh)
    h += "\n\ndef _libm(fn, x):\n"
         "    \"\"\"fn (math.exp or math.tanh: libm's, as attnscope calls them) on every element; numpy's own\n"
         "    vectorised exp / tanh may differ in the last bit.\"\"\"\n"
         "    def one(v):\n"
         "        try:\n"
         "            return fn(v)\n"
         "        except OverflowError:  # C's exp returns inf where Python raises\n"
         "            return math.inf\n"
         "    return np.asarray(np.frompyfunc(one, 1, 1)(_f(x)), dtype=np.float64)\n";
  if (exp) h += "\n\ndef _exp(x):\n    return _libm(math.exp, x)\n";
  if (tanh) h += "\n\ndef _tanh(x):\n    return _libm(math.tanh, x)\n";
  if (uses(e, ExprCode::kDoc))
    h += "\n\ndef _doc(x, starts):\n"
         "    \"\"\"doc(x): the index of the document holding position floor(x) (attnscope's expr_doc_index):\n"
         "    0 without documents, before the first start, and for NaN.\"\"\"\n"
         "    f = np.floor(_f(x))\n"
         "    if len(starts) == 0:\n"
         "        return np.zeros_like(f)\n"
         "    i = np.searchsorted(np.asarray(starts, dtype=np.float64), f, side=\"right\") - 1\n"
         "    return _f(np.where(f >= starts[0], i, 0))\n";
  if (alibi)
    h += std::string(
             "\n\ndef _alibi1(x, n):\n"
             "    \"\"\"alibi(x) with n heads: attnscope's alibi_slope_of(static_cast<int>(x), n).\"\"\"\n") +
         int_cast_rule() +
         "    p = 1\n"
         "    while p * 2 <= n:\n"
         "        p *= 2\n"
         "    if h < p:\n"
         "        y = -8.0 * (h + 1) / p\n"
         "    else:  # 2 * (h - p) + 1 in 32-bit int, wrapping as the build's arithmetic does\n"
         "        y = -8.0 * ((2 * (h - p) + 1 + 2**31) % 2**32 - 2**31) / (2 * p)\n"
         "    try:\n"
         "        return math.pow(2.0, y)\n"
         "    except OverflowError:  # C's pow returns inf where Python raises\n"
         "        return math.inf\n"
         "\n\ndef _alibi(x, n):\n"
         "    return np.asarray(np.frompyfunc(lambda v: _alibi1(v, n), 1, 1)(_f(x)), dtype=np.float64)\n";
  return h;
}

namespace {

// A piece of the PyTorch text and the Python precedence of its outermost operator (higher binds
// tighter): comparisons 1, | 3, & 5, + - 7, * / 9, unary 11, atoms 13. `chain`: a & / | chain,
// whose operands are already booleans.
struct TorchText {
  std::string s;
  int prec = 13;
  ExprCode chain = ExprCode::kNum;
};

// Joined by appends: GCC 12 warns (-Wrestrict, falsely) on "literal" + std::string&& chains.
template <class... T>
std::string cat(const T&... parts) {
  std::string s;
  (s.append(parts), ...);
  return s;
}

std::string wrap(const TorchText& t, int min_prec) { return t.prec >= min_prec ? t.s : cat("(", t.s, ")"); }

std::string torch_literal(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return std::to_string(static_cast<int64_t>(v));  // an int keeps index tensors integer
  return py_float(v);
}

TorchText torch_op(const ExprOp& op, std::vector<TorchText>* st) {
  static const std::pair<ExprCode, const char*> kFns[] = {{ExprCode::kAbs, "torch.abs"},     {ExprCode::kTanh, "torch.tanh"},
                                                          {ExprCode::kExp, "torch.exp"},     {ExprCode::kFloor, "torch.floor"},
                                                          {ExprCode::kMin, "torch.minimum"}, {ExprCode::kMax, "torch.maximum"}};
  static const std::pair<ExprCode, const char*> kBinary[] = {
      {ExprCode::kAdd, " + "}, {ExprCode::kSub, " - "}, {ExprCode::kMul, " * "}, {ExprCode::kDiv, " / "},
      {ExprCode::kLt, " < "},  {ExprCode::kLe, " <= "}, {ExprCode::kGt, " > "},  {ExprCode::kGe, " >= "},
      {ExprCode::kEq, " == "}, {ExprCode::kNe, " != "}, {ExprCode::kAnd, " & "}, {ExprCode::kOr, " | "}};
  auto pop = [&] {
    TorchText t = st->back();
    st->pop_back();
    return t;
  };
  auto tensor = [](const TorchText& t) { return cat("torch.as_tensor(", t.s, ")"); };
  switch (op.code) {
    case ExprCode::kNum:
      return {torch_literal(op.num)};
    case ExprCode::kVar:
      return {kVarNames[op.var]};
    case ExprCode::kNeg:
      return {cat("-", wrap(pop(), 11)), 11};
    case ExprCode::kNot:
      return {cat("~_b(", pop().s, ")"), 11};
    case ExprCode::kDoc:
      return {cat("_doc(", pop().s, ")")};
    case ExprCode::kAlibi:
      return {cat("_alibi(", pop().s, ")")};
    case ExprCode::kWhere: {
      const TorchText c = pop(), a = pop(), cond = pop();
      return {cat("torch.where(_b(", cond.s, "), ", tensor(a), ", ", tensor(c), ")")};
    }
    case ExprCode::kMod: {
      const TorchText b = pop(), a = pop();
      return {cat("torch.fmod(", tensor(a), ", ", b.s, ")")};  // C's fmod (Python's % differs for negatives)
    }
    default:
      break;
  }
  for (const auto& [code, fn] : kFns)
    if (code == op.code) {
      if (code != ExprCode::kMin && code != ExprCode::kMax) return {cat(fn, "(", tensor(pop()), ")")};
      const TorchText b = pop(), a = pop();
      return {cat(fn, "(", tensor(a), ", ", tensor(b), ")")};
    }
  const TorchText b = pop(), a = pop();
  const char* sym = " ? ";
  for (const auto& [code, text] : kBinary)
    if (code == op.code) sym = text;
  if (op.code == ExprCode::kAnd || op.code == ExprCode::kOr) {
    // a chain of the same operator continues without _b or parentheses (left-associative)
    const int prec = op.code == ExprCode::kAnd ? 5 : 3;
    return {cat(a.chain == op.code ? a.s : cat("_b(", a.s, ")"), sym, "_b(", b.s, ")"), prec, op.code};
  }
  const int prec = op.code == ExprCode::kAdd || op.code == ExprCode::kSub   ? 7
                   : op.code == ExprCode::kMul || op.code == ExprCode::kDiv ? 9
                                                                            : 1;
  // comparisons do not chain in attnscope (a < b < c would be two comparisons in Python): wrap both
  return {cat(wrap(a, prec == 1 ? 2 : prec), sym, wrap(b, prec + 1)), prec};
}

}  // namespace

std::string expr_torch_text(const Expr& e) {
  std::vector<TorchText> st;
  for (const ExprOp& op : e.ops()) {
    TorchText t = torch_op(op, &st);
    st.push_back(std::move(t));
  }
  return st.empty() ? "0" : st.back().s;
}

}  // namespace attnscope
