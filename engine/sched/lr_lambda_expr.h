// A small expression language for LR multipliers (LambdaLR, MultiplicativeLR, CyclicLR's
// scale_fn), so that a schedule given as text in a config or on the command line can be saved in
// a scheduler's state_dict and rebuilt from it.
//
// Grammar (whitespace is ignored):
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/') unary)*
//   unary   := ('-' | '+') unary | power
//   power   := primary (('^' | '**') unary)?          right-associative; -2^2 = -4 as in Python
//   primary := number | name | name '(' expr (',' expr)* ')' | '(' expr ')'
// Names: the variable (`epoch`, `step` and `x` are all the one argument the function is called
// with), `pi`, `e`, `constant` (= 1). Functions: min(a, b, ...), max(a, b, ...), cos, sin, exp,
// log (natural), sqrt, floor, ceil, abs, and the named schedules
//   warmup_linear(N)  = min(1, epoch / max(1, N))      (linear warm-up from 0 over N epochs)
//   inverse_sqrt(N)   = sqrt(N / max(epoch, N))         (1 up to N, then sqrt(N / epoch))
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace tb::sched {

/// A parsed expression of one variable (see the grammar in this header).
class LrExpression {
 public:
  /// Parses `text`. Throws tb::ValueError "[lr_lambda] parse error at position P (token 'T'):
  /// ..." with P the 1-based character position of the offending token.
  static LrExpression parse(const std::string& text);
  /// The value for variable value `x` (epoch, step or scale-function argument).
  double eval(double x) const;
  /// The text it was parsed from.
  const std::string& text() const { return text_; }

  /// One node of the parsed tree (defined in the .cpp).
  struct Node;

 private:
  std::shared_ptr<const Node> root_;
  std::string text_;
};

/// A multiplier function of the epoch: either an opaque C++ function or an expression. Only
/// expressions survive state_dict()/load_state_dict() (a function is saved as null, as PyTorch
/// saves plain lambdas as None).
class LrLambda {
 public:
  /// The constant 1.
  LrLambda();
  /// An opaque function.
  LrLambda(std::function<double(double)> fn);  // NOLINT(google-explicit-constructor)
  /// Parses `expr` (throws tb::ValueError on a parse error).
  LrLambda(const std::string& expr);  // NOLINT(google-explicit-constructor)
  /// Parses `expr` (throws tb::ValueError on a parse error).
  LrLambda(const char* expr);  // NOLINT(google-explicit-constructor)

  /// The value at `x`.
  double operator()(double x) const;
  /// True when it is an expression (then expression() holds its text).
  bool is_expression() const { return expr_ != nullptr; }
  /// The expression's text, or "" for an opaque function.
  std::string expression() const { return expr_ ? expr_->text() : std::string(); }

 private:
  std::function<double(double)> fn_;
  std::shared_ptr<const LrExpression> expr_;
};

}  // namespace tb::sched
