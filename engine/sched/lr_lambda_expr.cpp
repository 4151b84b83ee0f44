#include "engine/sched/lr_lambda_expr.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <vector>

#include "engine/core/error.h"

namespace tb::sched {

/// Expression tree node: a constant, the variable, a unary/binary operator or a function call.
struct LrExpression::Node {
  enum class Kind { kNumber, kVar, kNeg, kAdd, kSub, kMul, kDiv, kPow, kCall };
  Kind kind = Kind::kNumber;
  double value = 0.0;
  std::string fn;
  std::vector<std::shared_ptr<const Node>> args;
};

namespace {

using NodePtr = std::shared_ptr<const LrExpression::Node>;
using Kind = LrExpression::Node::Kind;

struct Token {
  enum class Type { kNumber, kName, kOp, kEnd };
  Type type = Type::kEnd;
  std::string text;
  double number = 0.0;
  std::size_t pos = 0;  // 0-based offset into the text
};

std::vector<Token> tokenize(const std::string& s) {
  std::vector<Token> out;
  std::size_t i = 0;
  auto fail = [&](std::size_t pos, const std::string& tok, const std::string& why) {
    throw ValueError(detail::str_cat("[lr_lambda] parse error at position ", pos + 1, " (token '",
                                     tok, "'): ", why, " in '", s, "'"));
  };
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    Token t;
    t.pos = i;
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      std::size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.'))
        ++j;
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        std::size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          j = k;
          while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])))
            ++j;
        }
      }
      t.type = Token::Type::kNumber;
      t.text = s.substr(i, j - i);
      char* end = nullptr;
      t.number = std::strtod(t.text.c_str(), &end);
      if (end != t.text.c_str() + t.text.size()) fail(i, t.text, "malformed number");
      i = j;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_'))
        ++j;
      t.type = Token::Type::kName;
      t.text = s.substr(i, j - i);
      i = j;
    } else if (c == '*' && i + 1 < s.size() && s[i + 1] == '*') {
      t.type = Token::Type::kOp;
      t.text = "**";
      i += 2;
    } else if (std::string("+-*/^(),").find(c) != std::string::npos) {
      t.type = Token::Type::kOp;
      t.text = std::string(1, c);
      ++i;
    } else {
      fail(i, std::string(1, c), "unexpected character");
    }
    out.push_back(t);
  }
  Token end;
  end.type = Token::Type::kEnd;
  end.text = "<end>";
  end.pos = s.size();
  out.push_back(end);
  return out;
}

NodePtr make(Kind k, std::vector<NodePtr> args = {}, double value = 0.0, std::string fn = {}) {
  auto n = std::make_shared<LrExpression::Node>();
  n->kind = k;
  n->args = std::move(args);
  n->value = value;
  n->fn = std::move(fn);
  return n;
}

// Functions: name -> (min args, max args); -1 = any number >= min.
struct FnInfo {
  const char* name;
  int min_args;
  int max_args;
};
constexpr FnInfo kFunctions[] = {
    {"min", 1, -1}, {"max", 1, -1}, {"cos", 1, 1},           {"sin", 1, 1},
    {"exp", 1, 1},  {"log", 1, 1},  {"sqrt", 1, 1},          {"floor", 1, 1},
    {"ceil", 1, 1}, {"abs", 1, 1},  {"warmup_linear", 1, 1}, {"inverse_sqrt", 1, 1},
};

class Parser {
 public:
  Parser(const std::string& text, std::vector<Token> toks) : text_(text), toks_(std::move(toks)) {}

  NodePtr parse() {
    NodePtr e = expr();
    if (peek().type != Token::Type::kEnd) fail(peek(), "expected an operator or the end");
    return e;
  }

 private:
  const Token& peek() const { return toks_[i_]; }
  const Token& next() { return toks_[i_++]; }
  bool is_op(const char* op) const { return peek().type == Token::Type::kOp && peek().text == op; }
  [[noreturn]] void fail(const Token& t, const std::string& why) const {
    throw ValueError(detail::str_cat("[lr_lambda] parse error at position ", t.pos + 1, " (token '",
                                     t.text, "'): ", why, " in '", text_, "'"));
  }

  NodePtr expr() {
    NodePtr lhs = term();
    while (is_op("+") || is_op("-")) {
      const Kind k = next().text == "+" ? Kind::kAdd : Kind::kSub;
      lhs = make(k, {lhs, term()});
    }
    return lhs;
  }
  NodePtr term() {
    NodePtr lhs = unary();
    while (is_op("*") || is_op("/")) {
      const Kind k = next().text == "*" ? Kind::kMul : Kind::kDiv;
      lhs = make(k, {lhs, unary()});
    }
    return lhs;
  }
  NodePtr unary() {
    if (is_op("-")) {
      next();
      return make(Kind::kNeg, {unary()});
    }
    if (is_op("+")) {
      next();
      return unary();
    }
    return power();
  }
  NodePtr power() {
    NodePtr base = primary();
    if (is_op("^") || is_op("**")) {
      next();
      return make(Kind::kPow, {base, unary()});
    }
    return base;
  }
  NodePtr primary() {
    const Token& t = peek();
    if (t.type == Token::Type::kNumber) {
      next();
      return make(Kind::kNumber, {}, t.number);
    }
    if (is_op("(")) {
      next();
      NodePtr e = expr();
      if (!is_op(")")) fail(peek(), "expected ')'");
      next();
      return e;
    }
    if (t.type == Token::Type::kName) {
      const Token name = next();
      if (is_op("(")) {
        const FnInfo* info = nullptr;
        for (const auto& f : kFunctions)
          if (name.text == f.name) info = &f;
        if (info == nullptr) fail(name, "unknown function");
        next();
        std::vector<NodePtr> args;
        args.push_back(expr());
        while (is_op(",")) {
          next();
          args.push_back(expr());
        }
        if (!is_op(")")) fail(peek(), "expected ',' or ')'");
        next();
        const int n = static_cast<int>(args.size());
        if (n < info->min_args || (info->max_args >= 0 && n > info->max_args)) {
          fail(name, detail::str_cat(name.text, "() takes ", info->max_args < 0 ? "at least " : "",
                                     info->min_args, " argument(s), got ", n));
        }
        return make(Kind::kCall, std::move(args), 0.0, name.text);
      }
      if (name.text == "epoch" || name.text == "step" || name.text == "x") return make(Kind::kVar);
      if (name.text == "pi") return make(Kind::kNumber, {}, std::numbers::pi);
      if (name.text == "e") return make(Kind::kNumber, {}, std::numbers::e);
      if (name.text == "constant") return make(Kind::kNumber, {}, 1.0);
      fail(name, "unknown name (use epoch, step, x, pi, e, constant or a function call)");
    }
    if (t.type == Token::Type::kEnd) fail(t, "unexpected end of expression");
    fail(t, "expected a number, a name or '('");
  }

  const std::string& text_;
  std::vector<Token> toks_;
  std::size_t i_ = 0;
};

double eval_node(const LrExpression::Node& n, double x) {
  switch (n.kind) {
    case Kind::kNumber:
      return n.value;
    case Kind::kVar:
      return x;
    case Kind::kNeg:
      return -eval_node(*n.args[0], x);
    case Kind::kAdd:
      return eval_node(*n.args[0], x) + eval_node(*n.args[1], x);
    case Kind::kSub:
      return eval_node(*n.args[0], x) - eval_node(*n.args[1], x);
    case Kind::kMul:
      return eval_node(*n.args[0], x) * eval_node(*n.args[1], x);
    case Kind::kDiv:
      return eval_node(*n.args[0], x) / eval_node(*n.args[1], x);
    case Kind::kPow:
      return std::pow(eval_node(*n.args[0], x), eval_node(*n.args[1], x));
    case Kind::kCall:
      break;
  }
  std::vector<double> a;
  a.reserve(n.args.size());
  for (const auto& arg : n.args)
    a.push_back(eval_node(*arg, x));
  const std::string& f = n.fn;
  if (f == "min") return *std::min_element(a.begin(), a.end());
  if (f == "max") return *std::max_element(a.begin(), a.end());
  if (f == "cos") return std::cos(a[0]);
  if (f == "sin") return std::sin(a[0]);
  if (f == "exp") return std::exp(a[0]);
  if (f == "log") return std::log(a[0]);
  if (f == "sqrt") return std::sqrt(a[0]);
  if (f == "floor") return std::floor(a[0]);
  if (f == "ceil") return std::ceil(a[0]);
  if (f == "abs") return std::fabs(a[0]);
  if (f == "warmup_linear") return std::min(1.0, x / std::max(1.0, a[0]));
  if (f == "inverse_sqrt") return std::sqrt(a[0] / std::max(x, a[0]));
  TB_INTERNAL_ASSERT(false, "unknown function ", f);
  return 0.0;
}

}  // namespace

LrExpression LrExpression::parse(const std::string& text) {
  Parser p(text, tokenize(text));
  LrExpression e;
  e.root_ = p.parse();
  e.text_ = text;
  return e;
}

double LrExpression::eval(double x) const {
  TB_CHECK(root_ != nullptr, "[lr_lambda] evaluating an empty expression");
  return eval_node(*root_, x);
}

LrLambda::LrLambda() : fn_([](double) { return 1.0; }) {}

LrLambda::LrLambda(std::function<double(double)> fn) : fn_(std::move(fn)) {
  TB_CHECK_T(TypeError, static_cast<bool>(fn_),
             "[lr_lambda] lr_lambda should be a function, but got an empty function");
}

LrLambda::LrLambda(const std::string& expr)
    : expr_(std::make_shared<const LrExpression>(LrExpression::parse(expr))) {}

LrLambda::LrLambda(const char* expr) : LrLambda(std::string(expr)) {}

double LrLambda::operator()(double x) const {
  return expr_ ? expr_->eval(x) : fn_(x);
}

}  // namespace tb::sched
