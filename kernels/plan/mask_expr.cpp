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
#include "attnscope/mask_expr.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace attnscope {

struct Expr::Node {
  enum Op { kNum, kVar, kNeg, kNot, kAdd, kSub, kMul, kDiv, kMod, kLt, kLe, kGt, kGe, kEq, kNe, kAnd, kOr, kCall } op;
  double num = 0;
  int var = 0;     // index into the variable table
  std::string fn;  // kCall
  std::vector<std::shared_ptr<const Node>> kids;
};

namespace {

using NodeP = std::shared_ptr<const Expr::Node>;

const char* const kVars[] = {"b", "h", "q_idx", "kv_idx", "q_len", "kv_len", "prefix_len", "score"};
struct Fn {
  const char* name;
  int args;
};
const Fn kFns[] = {{"min", 2}, {"max", 2}, {"abs", 1}, {"where", 3}, {"tanh", 1}, {"exp", 1}, {"floor", 1}, {"doc", 1}};

class Parser {
 public:
  Parser(const std::string& s, Expr::Kind k) : s_(s), kind_(k) {}

  NodeP parse() {
    NodeP n = expr();
    skip();
    if (i_ < s_.size()) fail("unexpected \"" + s_.substr(i_, 1) + "\" after a complete expression");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw ExprError(static_cast<int>(i_) + 1, what); }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(const char* tok) {
    skip();
    const size_t n = std::char_traits<char>::length(tok);
    if (s_.compare(i_, n, tok) != 0) return false;
    // "<" must not take the first half of "<=", "!" of "!=", "=" alone is not an operator
    if (n == 1 && i_ + 1 < s_.size() && s_[i_ + 1] == '=' && (tok[0] == '<' || tok[0] == '>' || tok[0] == '!')) return false;
    i_ += n;
    return true;
  }
  static NodeP make(Expr::Node::Op op, std::vector<NodeP> kids) {
    auto n = std::make_shared<Expr::Node>();
    n->op = op;
    n->kids = std::move(kids);
    return n;
  }

  NodeP expr() { return or_(); }
  NodeP or_() {
    NodeP a = and_();
    while (eat("||")) a = make(Expr::Node::kOr, {a, and_()});
    return a;
  }
  NodeP and_() {
    NodeP a = cmp();
    while (eat("&&")) a = make(Expr::Node::kAnd, {a, cmp()});
    return a;
  }
  NodeP cmp() {
    NodeP a = sum();
    const std::pair<const char*, Expr::Node::Op> ops[] = {{"<=", Expr::Node::kLe}, {">=", Expr::Node::kGe},
                                                          {"==", Expr::Node::kEq}, {"!=", Expr::Node::kNe},
                                                          {"<", Expr::Node::kLt},  {">", Expr::Node::kGt}};
    for (const auto& [t, op] : ops)
      if (eat(t)) {
        NodeP b = sum();
        skip();
        for (const char* again : {"<", ">", "=="})
          if (s_.compare(i_, std::char_traits<char>::length(again), again) == 0)
            fail("comparisons do not chain: write a < b && b < c");
        return make(op, {a, b});
      }
    skip();
    if (i_ < s_.size() && s_[i_] == '=') fail("\"=\" is not an operator: == compares");
    return a;
  }
  NodeP sum() {
    NodeP a = prod();
    for (;;) {
      if (eat("+"))
        a = make(Expr::Node::kAdd, {a, prod()});
      else if (eat("-"))
        a = make(Expr::Node::kSub, {a, prod()});
      else
        return a;
    }
  }
  NodeP prod() {
    NodeP a = unary();
    for (;;) {
      if (eat("*"))
        a = make(Expr::Node::kMul, {a, unary()});
      else if (eat("/"))
        a = make(Expr::Node::kDiv, {a, unary()});
      else if (eat("%"))
        a = make(Expr::Node::kMod, {a, unary()});
      else
        return a;
    }
  }
  NodeP unary() {
    if (eat("-")) return make(Expr::Node::kNeg, {unary()});
    if (eat("!")) return make(Expr::Node::kNot, {unary()});
    return primary();
  }
  NodeP primary() {
    skip();
    if (i_ >= s_.size()) fail("expected a number, a name or \"(\", found the end");
    const char ch = s_[i_];
    if (ch == '(') {
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
        n->kids = std::move(args);
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
    fail(std::string("unexpected \"") + ch + "\"");
  }

  const std::string& s_;
  Expr::Kind kind_;
  size_t i_ = 0;
};

double var_of(const ExprVars& v, int i) {
  switch (i) {
    case 0:
      return v.b;
    case 1:
      return v.h;
    case 2:
      return v.q_idx;
    case 3:
      return v.kv_idx;
    case 4:
      return v.q_len;
    case 5:
      return v.kv_len;
    case 6:
      return v.prefix_len;
    default:
      return v.score;
  }
}

double doc_index(const ExprVars& v, double x) {
  if (!v.doc_starts || v.doc_starts->empty()) return 0;
  const auto it = std::upper_bound(v.doc_starts->begin(), v.doc_starts->end(), static_cast<int>(std::floor(x)));
  return static_cast<double>(std::max<long>(0, static_cast<long>(it - v.doc_starts->begin()) - 1));
}

double eval_node(const Expr::Node& n, const ExprVars& v) {
  using N = Expr::Node;
  auto k = [&](int i) { return eval_node(*n.kids[i], v); };
  switch (n.op) {
    case N::kNum:
      return n.num;
    case N::kVar:
      return var_of(v, n.var);
    case N::kNeg:
      return -k(0);
    case N::kNot:
      return k(0) == 0.0 ? 1.0 : 0.0;
    case N::kAdd:
      return k(0) + k(1);
    case N::kSub:
      return k(0) - k(1);
    case N::kMul:
      return k(0) * k(1);
    case N::kDiv:
      return k(0) / k(1);
    case N::kMod:
      return std::fmod(k(0), k(1));
    case N::kLt:
      return k(0) < k(1);
    case N::kLe:
      return k(0) <= k(1);
    case N::kGt:
      return k(0) > k(1);
    case N::kGe:
      return k(0) >= k(1);
    case N::kEq:
      return k(0) == k(1);
    case N::kNe:
      return k(0) != k(1);
    case N::kAnd:
      return (k(0) != 0.0 && k(1) != 0.0) ? 1.0 : 0.0;  // short-circuit order kept
    case N::kOr:
      return (k(0) != 0.0 || k(1) != 0.0) ? 1.0 : 0.0;
    case N::kCall:
      if (n.fn == "min") return std::min(k(0), k(1));
      if (n.fn == "max") return std::max(k(0), k(1));
      if (n.fn == "abs") return std::fabs(k(0));
      if (n.fn == "where") return k(0) != 0.0 ? k(1) : k(2);
      if (n.fn == "tanh") return std::tanh(k(0));
      if (n.fn == "exp") return std::exp(k(0));
      if (n.fn == "floor") return std::floor(k(0));
      return doc_index(v, k(0));  // doc
  }
  return 0;
}

}  // namespace

const char* expr_names_text() {
  return "names: b, h, q_idx, kv_idx, q_len, kv_len, prefix_len, score (score_mod only); functions: min(a, b), max(a, b), "
         "abs(x), where(c, a, b), tanh(x), exp(x), floor(x), doc(pos)";
}

Expr Expr::parse(const std::string& text, Kind kind) {
  Expr e;
  e.text_ = text;
  e.root_ = Parser(text, kind).parse();
  return e;
}

double Expr::eval(const ExprVars& v) const { return eval_node(*root_, v); }

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
