// A compiled mask_mod / score_mod: the parse tree of mask_expr.h flattened to postfix operations,
// and their evaluator, written once for the host and the device (AS_HD). The CPU backends, the
// mask bits of the plan and the GPU references all evaluate an expression through
// eval_expr, so an expression means the same thing everywhere it runs.
//
// Arithmetic is in doubles (integers exact below 2^53); comparisons and && || ! give 0 or 1. Both
// sides of && and || are evaluated (there are no side effects, so only the cost differs).
#pragma once

#include <cmath>
#include <cstdint>

#include "attnscope/types.h"

namespace attnscope {

// Variables an expression reads, in this order in ExprEnv::v.
enum ExprVar : int { kVarB, kVarH, kVarQ, kVarKv, kVarQLen, kVarKvLen, kVarPrefix, kVarScore, kNumExprVars };

enum class ExprCode : int32_t {
  kNum,  // push num
  kVar,  // push v[var]
  kNeg,
  kNot,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMod,
  kLt,
  kLe,
  kGt,
  kGe,
  kEq,
  kNe,
  kAnd,
  kOr,
  kMin,
  kMax,
  kAbs,
  kWhere,
  kTanh,
  kExp,
  kFloor,
  kDoc,
  kAlibi
};

struct ExprOp {
  ExprCode code = ExprCode::kNum;
  int32_t var = 0;  // kVar: an ExprVar
  double num = 0;   // kNum
};

// Deepest value stack a compiled expression may need; the compiler refuses deeper ones.
constexpr int kExprStack = 24;

struct ExprEnv {
  double v[kNumExprVars] = {};
  const int* doc_starts = nullptr;  // doc(x): [num_docs] sorted document starts of the request
  int num_docs = 0;
  int num_heads = 1;  // alibi(h): slope of head h of num_heads
};

// ALiBi slope of head h of n (Press et al.; for n not a power of two, the odd-indexed slopes of the
// doubled set, as the reference implementations interpolate). mask.h's alibi_slope is this.
AS_HD inline double alibi_slope_of(int h, int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  if (h < p) return pow(2.0, -8.0 * (h + 1) / p);
  return pow(2.0, -8.0 * (2 * (h - p) + 1) / (2 * p));
}

AS_HD inline double expr_doc_index(const ExprEnv& e, double x) {
  if (e.doc_starts == nullptr || e.num_docs <= 0) return 0;
  const double f = floor(x);
  int lo = 0, hi = e.num_docs - 1;
  if (f < e.doc_starts[0]) return 0;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (e.doc_starts[mid] <= f)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Evaluates ops[0, n) (a postfix program from compile, stack depth <= kExprStack).
AS_HD inline double eval_expr(const ExprOp* ops, int n, const ExprEnv& e) {
  double st[kExprStack];
  int sp = 0;
  for (int i = 0; i < n; ++i) {
    const ExprOp& op = ops[i];
    switch (op.code) {
      case ExprCode::kNum:
        st[sp++] = op.num;
        continue;
      case ExprCode::kVar:
        st[sp++] = e.v[op.var];
        continue;
      case ExprCode::kNeg:
        st[sp - 1] = -st[sp - 1];
        continue;
      case ExprCode::kNot:
        st[sp - 1] = st[sp - 1] == 0.0 ? 1.0 : 0.0;
        continue;
      case ExprCode::kAbs:
        st[sp - 1] = fabs(st[sp - 1]);
        continue;
      case ExprCode::kTanh:
        st[sp - 1] = tanh(st[sp - 1]);
        continue;
      case ExprCode::kExp:
        st[sp - 1] = exp(st[sp - 1]);
        continue;
      case ExprCode::kFloor:
        st[sp - 1] = floor(st[sp - 1]);
        continue;
      case ExprCode::kDoc:
        st[sp - 1] = expr_doc_index(e, st[sp - 1]);
        continue;
      case ExprCode::kAlibi:
        st[sp - 1] = alibi_slope_of(static_cast<int>(st[sp - 1]), e.num_heads);
        continue;
      case ExprCode::kWhere:
        sp -= 2;
        st[sp - 1] = st[sp - 1] != 0.0 ? st[sp] : st[sp + 1];
        continue;
      default:
        break;
    }
    // binary operations: a = st[sp - 2], b = st[sp - 1]
    const double b = st[--sp];
    const double a = st[sp - 1];
    double r = 0;
    switch (op.code) {
      case ExprCode::kAdd:
        r = a + b;
        break;
      case ExprCode::kSub:
        r = a - b;
        break;
      case ExprCode::kMul:
        r = a * b;
        break;
      case ExprCode::kDiv:
        r = a / b;
        break;
      case ExprCode::kMod:
        r = fmod(a, b);
        break;
      case ExprCode::kLt:
        r = a < b;
        break;
      case ExprCode::kLe:
        r = a <= b;
        break;
      case ExprCode::kGt:
        r = a > b;
        break;
      case ExprCode::kGe:
        r = a >= b;
        break;
      case ExprCode::kEq:
        r = a == b;
        break;
      case ExprCode::kNe:
        r = a != b;
        break;
      case ExprCode::kAnd:
        r = (a != 0.0 && b != 0.0) ? 1.0 : 0.0;
        break;
      case ExprCode::kOr:
        r = (a != 0.0 || b != 0.0) ? 1.0 : 0.0;
        break;
      case ExprCode::kMin:
        r = a < b ? a : b;
        break;
      case ExprCode::kMax:
        r = a > b ? a : b;
        break;
      default:
        break;
    }
    st[sp - 1] = r;
  }
  return sp > 0 ? st[sp - 1] : 0.0;
}

// A mask's verdict: non-zero is allowed; NaN (0 / 0) is not.
AS_HD inline bool expr_true(double x) { return x == x && x != 0.0; }

}  // namespace attnscope
