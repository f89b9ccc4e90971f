// The expression language of mask_mod / score_mod (mask_expr.h): a recursive-descent parser into a
// small tree, and its evaluator.
//
//   expr    := or
//   or      := and ('||' and)*
//   and     := cmp ('&&' cmp)*
//   cmp     := sum (('<' | '<=' | '>' | '>=' | '==' | '!=') sum)?
//   sum     := prod (('+' | '-') prod)*
//   prod    := unary (('*' | '/' | '%') unary)*
//   unary   := ('-' | '!') unary | primary
//   primary := NUMBER | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'
//
// The recursion is bounded: at most kMaxExprNesting parentheses, calls and unary operators open at
// once, and at most kMaxExprDepth levels in the tree (which a left-associative chain a + b + ...
// builds one per operator), so neither the parser nor any walk of the tree can exhaust the stack.
#include "attnscope/mask_expr.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "attnscope/expr_program.h"

namespace attnscope {

struct Expr::Node {
  enum Op { kNum, kVar, kNeg, kNot, kAdd, kSub, kMul, kDiv, kMod, kLt, kLe, kGt, kGe, kEq, kNe, kAnd, kOr, kCall } op;
  double num = 0;
  int var = 0;     // index into the variable table
  std::string fn;  // kCall
  std::vector<std::shared_ptr<const Node>> kids;
  int height = 1;  // levels of the subtree rooted here
};

namespace {

using NodeP = std::shared_ptr<const Expr::Node>;

const char* const kVars[] = {"b", "h", "q_idx", "kv_idx", "q_len", "kv_len", "prefix_len", "score"};
struct Fn {
  const char* name;
  int args;
};
const Fn kFns[] = {{"min", 2}, {"max", 2},   {"abs", 1}, {"where", 3}, {"tanh", 1},
                   {"exp", 1}, {"floor", 1}, {"doc", 1}, {"alibi", 1}};

class Parser {
 public:
  Parser(const std::string& s, Expr::Kind k) : s_(s), kind_(k) {}

  NodeP parse() {
    if (s_.size() > kMaxExprBytes)
      throw ExprError(static_cast<int>(kMaxExprBytes) + 1, "the expression is " + std::to_string(s_.size()) +
                                                               " bytes, longer than the limit of " +
                                                               std::to_string(kMaxExprBytes) + " bytes");
    NodeP n = expr();
    skip();
    if (i_ < s_.size()) fail("unexpected \"" + char_at(i_) + "\" after a complete expression");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw ExprError(static_cast<int>(i_) + 1, what); }
  // The whole character at byte i (never half of a UTF-8 sequence), printable.
  std::string char_at(size_t i) const {
    size_t n = 1;
    while (n < 4 && i + n < s_.size() && (static_cast<unsigned char>(s_[i + n]) & 0xC0) == 0x80 &&
           (static_cast<unsigned char>(s_[i]) & 0xC0) == 0xC0)
      ++n;
    return printable(s_.substr(i, n));
  }
  // Entering a parenthesis, a call's arguments or a unary operator's operand at byte `at`.
  struct Nest {
    Nest(Parser* p, size_t at) : p_(p) {
      if (++p_->nest_ > kMaxExprNesting) {
        p_->i_ = at;
        p_->fail("nested more than " + std::to_string(kMaxExprNesting) +
                 " deep (parentheses, function calls and unary - or ! open at once)");
      }
    }
    ~Nest() { --p_->nest_; }
    Parser* p_;
  };
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(const char* tok) {
    skip();
    const size_t n = std::char_traits<char>::length(tok);
    if (s_.compare(i_, n, tok) != 0) return false;
    tok_ = i_;
    // "<" must not take the first half of "<=", "!" of "!=", "=" alone is not an operator
    if (n == 1 && i_ + 1 < s_.size() && s_[i_ + 1] == '=' && (tok[0] == '<' || tok[0] == '>' || tok[0] == '!')) return false;
    i_ += n;
    return true;
  }
  // A node for the operator at byte `at`; refused when the tree would grow deeper than kMaxExprDepth.
  NodeP make(Expr::Node::Op op, std::vector<NodeP> kids, size_t at) {
    auto n = std::make_shared<Expr::Node>();
    n->op = op;
    for (const auto& k : kids) n->height = std::max(n->height, k->height + 1);
    n->kids = std::move(kids);
    if (n->height > kMaxExprDepth) {
      i_ = at;
      fail("more than " + std::to_string(kMaxExprDepth) +
           " operators deep (a chain a + b + c counts one level per operator): group long chains in parentheses");
    }
    return n;
  }

  NodeP expr() { return or_(); }
  NodeP or_() {
    NodeP a = and_();
    while (eat("||")) {
      const size_t at = tok_;
      a = make(Expr::Node::kOr, {a, and_()}, at);
    }
    return a;
  }
  NodeP and_() {
    NodeP a = cmp();
    while (eat("&&")) {
      const size_t at = tok_;
      a = make(Expr::Node::kAnd, {a, cmp()}, at);
    }
    return a;
  }
  NodeP cmp() {
    NodeP a = sum();
    const std::pair<const char*, Expr::Node::Op> ops[] = {{"<=", Expr::Node::kLe}, {">=", Expr::Node::kGe},
                                                          {"==", Expr::Node::kEq}, {"!=", Expr::Node::kNe},
                                                          {"<", Expr::Node::kLt},  {">", Expr::Node::kGt}};
    for (const auto& [t, op] : ops)
      if (eat(t)) {
        const size_t at = tok_;
        NodeP b = sum();
        skip();
        for (const char* again : {"<", ">", "=="})
          if (s_.compare(i_, std::char_traits<char>::length(again), again) == 0)
            fail("comparisons do not chain: write a < b && b < c");
        return make(op, {a, b}, at);
      }
    skip();
    if (i_ < s_.size() && s_[i_] == '=') fail("\"=\" is not an operator: == compares");
    return a;
  }
  NodeP sum() {
    NodeP a = prod();
    for (;;) {
      const Expr::Node::Op op = eat("+") ? Expr::Node::kAdd : eat("-") ? Expr::Node::kSub : Expr::Node::kNum;
      if (op == Expr::Node::kNum) return a;
      const size_t at = tok_;
      a = make(op, {a, prod()}, at);
    }
  }
  NodeP prod() {
    NodeP a = unary();
    for (;;) {
      const Expr::Node::Op op = eat("*")   ? Expr::Node::kMul
                                : eat("/") ? Expr::Node::kDiv
                                : eat("%") ? Expr::Node::kMod
                                           : Expr::Node::kNum;
      if (op == Expr::Node::kNum) return a;
      const size_t at = tok_;
      a = make(op, {a, unary()}, at);
    }
  }
  NodeP unary() {
    for (const auto& [t, op] : {std::pair{"-", Expr::Node::kNeg}, std::pair{"!", Expr::Node::kNot}})
      if (eat(t)) {
        const size_t at = tok_;
        Nest nest(this, at);
        return make(op, {unary()}, at);
      }
    return primary();
  }
  NodeP primary() {
    skip();
    if (i_ >= s_.size()) fail("expected a number, a name or \"(\", found the end");
    const char ch = s_[i_];
    if (ch == '(') {
      Nest nest(this, i_);
      ++i_;
      NodeP e = expr();
      if (!eat(")")) fail("expected \")\"");
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(ch)) || ch == '.') {
      const char* start = s_.c_str() + i_;
      char* end = nullptr;
      const double v = std::strtod(start, &end);
      if (end == start) fail("bad number");
      i_ += static_cast<size_t>(end - start);
      if (i_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_'))
        fail("a number runs into a name");
      auto n = std::make_shared<Expr::Node>();
      n->op = Expr::Node::kNum;
      n->num = v;
      return n;
    }
    if (std::isalpha(static_cast<unsigned char>(ch)) || ch == '_') {
      const size_t at = i_;
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) ++i_;
      const std::string name = s_.substr(at, i_ - at);
      skip();
      if (i_ < s_.size() && s_[i_] == '(') {
        const Fn* fn = nullptr;
        for (const auto& f : kFns)
          if (name == f.name) fn = &f;
        if (!fn) {
          i_ = at;
          fail("unknown function \"" + name + "\" (" + expr_names_text() + ")");
        }
        Nest nest(this, at);
        ++i_;
        std::vector<NodeP> args{expr()};
        while (eat(",")) args.push_back(expr());
        if (!eat(")")) fail("expected \",\" or \")\" in " + name + "(...)");
        if (static_cast<int>(args.size()) != fn->args) {
          i_ = at;
          fail(name + "() takes " + std::to_string(fn->args) + " argument" + (fn->args > 1 ? "s" : "") + ", not " +
               std::to_string(args.size()));
        }
        auto n = std::make_shared<Expr::Node>();
        n->op = Expr::Node::kCall;
        n->fn = name;
        for (const auto& k : args) n->height = std::max(n->height, k->height + 1);
        n->kids = std::move(args);
        if (n->height > kMaxExprDepth) {
          i_ = at;
          fail("more than " + std::to_string(kMaxExprDepth) + " operators deep");
        }
        return n;
      }
      for (int v = 0; v < static_cast<int>(std::size(kVars)); ++v)
        if (name == kVars[v]) {
          if (name == "score" && kind_ == Expr::Kind::kMask) {
            i_ = at;
            fail("\"score\" exists only in a score_mod; a mask_mod decides from positions");
          }
          auto n = std::make_shared<Expr::Node>();
          n->op = Expr::Node::kVar;
          n->var = v;
          return n;
        }
      i_ = at;
      fail("unknown name \"" + name + "\" (" + expr_names_text() + ")");
    }
    fail("unexpected \"" + char_at(i_) + "\"");
  }

  const std::string& s_;
  Expr::Kind kind_;
  size_t i_ = 0;
  size_t tok_ = 0;  // where the last token eat() took starts
  int nest_ = 0;    // parentheses, calls and unary operators open
};

// Flattens the tree to postfix operations; *depth receives the deepest stack the program needs.
int compile_node(const Expr::Node& n, std::vector<ExprOp>* out) {
  using N = Expr::Node;
  ExprOp op;
  switch (n.op) {
    case N::kNum:
      op.code = ExprCode::kNum;
      op.num = n.num;
      out->push_back(op);
      return 1;
    case N::kVar:
      op.code = ExprCode::kVar;
      op.var = n.var;
      out->push_back(op);
      return 1;
    default:
      break;
  }
  // children left to right: child i runs with i values already on the stack
  int depth = 0;
  for (size_t i = 0; i < n.kids.size(); ++i) depth = std::max(depth, static_cast<int>(i) + compile_node(*n.kids[i], out));
  static const std::pair<const char*, ExprCode> kCalls[] = {
      {"min", ExprCode::kMin},     {"max", ExprCode::kMax},   {"abs", ExprCode::kAbs},
      {"where", ExprCode::kWhere}, {"tanh", ExprCode::kTanh}, {"exp", ExprCode::kExp},
      {"floor", ExprCode::kFloor}, {"doc", ExprCode::kDoc},   {"alibi", ExprCode::kAlibi}};
  switch (n.op) {
    case N::kNeg:
      op.code = ExprCode::kNeg;
      break;
    case N::kNot:
      op.code = ExprCode::kNot;
      break;
    case N::kAdd:
      op.code = ExprCode::kAdd;
      break;
    case N::kSub:
      op.code = ExprCode::kSub;
      break;
    case N::kMul:
      op.code = ExprCode::kMul;
      break;
    case N::kDiv:
      op.code = ExprCode::kDiv;
      break;
    case N::kMod:
      op.code = ExprCode::kMod;
      break;
    case N::kLt:
      op.code = ExprCode::kLt;
      break;
    case N::kLe:
      op.code = ExprCode::kLe;
      break;
    case N::kGt:
      op.code = ExprCode::kGt;
      break;
    case N::kGe:
      op.code = ExprCode::kGe;
      break;
    case N::kEq:
      op.code = ExprCode::kEq;
      break;
    case N::kNe:
      op.code = ExprCode::kNe;
      break;
    case N::kAnd:
      op.code = ExprCode::kAnd;
      break;
    case N::kOr:
      op.code = ExprCode::kOr;
      break;
    default:
      for (const auto& [name, code] : kCalls)
        if (n.fn == name) op.code = code;
      break;
  }
  out->push_back(op);
  return depth;
}

bool reads_var(const Expr::Node& n, int var) {
  if (n.op == Expr::Node::kVar && n.var == var) return true;
  for (const auto& k : n.kids)
    if (reads_var(*k, var)) return true;
  return false;
}

}  // namespace

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (2 to 4), 0 if there is none.
size_t utf8_length(const std::string& s, size_t i) {
  const auto at = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
  const unsigned char c = at(0);
  const size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((at(k) & 0xC0) != 0x80) return 0;
  // overlong forms, surrogates and code points past U+10FFFF
  if ((c == 0xE0 && at(1) < 0xA0) || (c == 0xED && at(1) > 0x9F) || (c == 0xF0 && at(1) < 0x90) || (c == 0xF4 && at(1) > 0x8F))
    return 0;
  return n;
}

}  // namespace

std::string printable(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? (c < 0x20 || c == 0x7F ? 0 : 1) : utf8_length(s, i);
    if (n == 0) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

const char* expr_names_text() {
  return "names: b, h, q_idx, kv_idx, q_len, kv_len, prefix_len, score (score_mod only); functions: min(a, b), max(a, b), "
         "abs(x), where(c, a, b), tanh(x), exp(x), floor(x), doc(pos), alibi(h)";
}

Expr Expr::parse(const std::string& text, Kind kind) {
  Expr e;
  e.text_ = text;
  e.root_ = Parser(text, kind).parse();
  const int depth = compile_node(*e.root_, &e.ops_);
  if (depth > kExprStack)
    throw ExprError(1,
                    "too deeply nested: needs " + std::to_string(depth) + " stack values, at most " + std::to_string(kExprStack));
  e.reads_h_ = reads_var(*e.root_, kVarH);
  return e;
}

double Expr::eval(const ExprVars& v) const {
  ExprEnv env;
  env.v[kVarB] = v.b;
  env.v[kVarH] = v.h;
  env.v[kVarQ] = v.q_idx;
  env.v[kVarKv] = v.kv_idx;
  env.v[kVarQLen] = v.q_len;
  env.v[kVarKvLen] = v.kv_len;
  env.v[kVarPrefix] = v.prefix_len;
  env.v[kVarScore] = v.score;
  if (v.doc_starts) {
    env.doc_starts = v.doc_starts->data();
    env.num_docs = static_cast<int>(v.doc_starts->size());
  }
  env.num_heads = v.num_heads;
  return eval(env);
}

namespace {

using Node = Expr::Node;
bool is_var(const Node& n, int var) { return n.op == Node::kVar && n.var == var; }
bool is_num(const Node& n, double* v) {
  if (n.op != Node::kNum) return false;
  *v = n.num;
  return true;
}
// score | C * tanh(score / C)
bool match_capped(const Node& n, std::optional<double>* cap) {
  if (is_var(n, kVarScore)) return true;
  double c1 = 0, c2 = 0;
  if (n.op != Node::kMul || !is_num(*n.kids[0], &c1)) return false;
  const Node& t = *n.kids[1];
  if (t.op != Node::kCall || t.fn != "tanh") return false;
  const Node& d = *t.kids[0];
  if (d.op != Node::kDiv || !is_var(*d.kids[0], kVarScore) || !is_num(*d.kids[1], &c2) || c1 != c2 || !(c1 > 0)) return false;
  *cap = c1;
  return true;
}
// alibi(h) * (kv_idx - q_idx)
bool match_alibi(const Node& n) {
  if (n.op != Node::kMul) return false;
  const Node& a = *n.kids[0];
  const Node& d = *n.kids[1];
  return a.op == Node::kCall && a.fn == "alibi" && is_var(*a.kids[0], kVarH) && d.op == Node::kSub &&
         is_var(*d.kids[0], kVarKv) && is_var(*d.kids[1], kVarQ);
}

}  // namespace

namespace {

std::string torch_num(double v) {
  // 1e999 reads as inf: Python has no `inf` name, so the worker's exec of a bare one was a NameError
  if (std::isnan(v)) return "float(\"nan\")";
  if (std::isinf(v)) return v > 0 ? "float(\"inf\")" : "(-float(\"inf\"))";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// lib: "torch" or "np"; both have minimum, maximum, abs, where, tanh, exp, floor, fmod
std::string python_of(const Node& n, const std::string& lib) {
  auto k = [&](int i) { return python_of(*n.kids[i], lib); };
  auto t = [&](int i) { return lib + (lib == "np" ? ".asarray(" : ".as_tensor(") + k(i) + ")"; };
  switch (n.op) {
    case Node::kNum:
      return torch_num(n.num);
    case Node::kVar:
      return kVars[n.var];
    case Node::kNeg:
      return "(-" + k(0) + ")";
    case Node::kNot:
      return "(~_b(" + k(0) + "))";
    case Node::kAdd:
      return "(" + k(0) + " + " + k(1) + ")";
    case Node::kSub:
      return "(" + k(0) + " - " + k(1) + ")";
    case Node::kMul:
      return "(" + k(0) + " * " + k(1) + ")";
    case Node::kDiv:
      return "(" + k(0) + " / " + k(1) + ")";
    case Node::kMod:
      return lib + ".fmod(" + t(0) + ", " + k(1) + ")";
    case Node::kLt:
      return "(" + k(0) + " < " + k(1) + ")";
    case Node::kLe:
      return "(" + k(0) + " <= " + k(1) + ")";
    case Node::kGt:
      return "(" + k(0) + " > " + k(1) + ")";
    case Node::kGe:
      return "(" + k(0) + " >= " + k(1) + ")";
    case Node::kEq:
      return "(" + k(0) + " == " + k(1) + ")";
    case Node::kNe:
      return "(" + k(0) + " != " + k(1) + ")";
    case Node::kAnd:
      return "(_b(" + k(0) + ") & _b(" + k(1) + "))";
    case Node::kOr:
      return "(_b(" + k(0) + ") | _b(" + k(1) + "))";
    case Node::kCall:
      if (n.fn == "min") return lib + ".minimum(" + t(0) + ", " + t(1) + ")";
      if (n.fn == "max") return lib + ".maximum(" + t(0) + ", " + t(1) + ")";
      if (n.fn == "abs") return lib + ".abs(" + t(0) + ")";
      if (n.fn == "where") return lib + ".where(_b(" + k(0) + "), " + t(1) + ", " + t(2) + ")";
      if (n.fn == "tanh") return lib + ".tanh(" + t(0) + ")";
      if (n.fn == "exp") return lib + ".exp(" + t(0) + ")";
      if (n.fn == "floor") return lib + ".floor(" + t(0) + ")";
      if (n.fn == "doc") return "_doc(" + k(0) + ")";
      return "_alibi(" + k(0) + ")";
  }
  return "0";
}

}  // namespace

std::string expr_to_torch(const Expr& e) { return python_of(e.root(), "torch"); }
std::string expr_to_numpy(const Expr& e) { return python_of(e.root(), "np"); }

std::optional<LoweredScoreMod> lower_score_mod(const Expr& e) {
  LoweredScoreMod l;
  const Node& n = e.root();
  if (match_capped(n, &l.soft_cap)) return l;
  if (n.op == Node::kAdd && match_capped(*n.kids[0], &l.soft_cap) && match_alibi(*n.kids[1])) {
    l.alibi = true;
    return l;
  }
  return std::nullopt;
}

const char* lowered_score_forms_text() {
  return "score, C * tanh(score / C) (soft-cap), and either + alibi(h) * (kv_idx - q_idx) (ALiBi)";
}

std::string builtin_mask_expr(const CaseSpec& c, int r) {
  const RequestSpec& rq = c.requests[r];
  const AttentionSpec& a = c.attention;
  std::vector<std::string> terms;
  if (rq.pad_start) {
    const std::string p = std::to_string(*rq.pad_start);
    terms.push_back("q_idx < " + p + " && kv_idx < " + p);
  }
  if (a.causal) {
    if (a.prefix_lm && rq.prefix_len && *rq.prefix_len > 0)
      terms.push_back("(kv_idx <= q_idx || kv_idx < prefix_len)");
    else
      terms.push_back("kv_idx <= q_idx");
  }
  if (a.window) terms.push_back("q_idx - kv_idx < " + std::to_string(*a.window));
  if (a.local_chunk)
    terms.push_back("kv_idx >= floor(q_idx / " + std::to_string(*a.local_chunk) + ") * " + std::to_string(*a.local_chunk));
  if (rq.doc_starts.size() > 1) terms.push_back("doc(kv_idx) == doc(q_idx)");
  if (terms.empty()) return "1";
  std::string s;
  for (const auto& t : terms) s += (s.empty() ? "" : " && ") + t;
  return s;
}

}  // namespace attnscope
