// Definitions of the built-in operators (names, signatures, schema facts).
#include "engine/dispatch/op_signatures.h"

namespace tb::ops {

void define_builtin_ops(dispatch::Dispatcher& d) {
  using dispatch::OpSchema;
  const OpSchema diff{{}, true, ""};
  const OpSchema plain{{}, false, ""};
  const OpSchema mutates0{{0}, false, ""};
  const OpSchema mutates0_diff{{0}, true, ""};  // writes arg 0, differentiable w.r.t. the others

#define TB_DEFINE_UNARY(name) d.define<sig::Unary>(#name, diff);
  TB_UNARY_KEEP_DTYPE_OPS(TB_DEFINE_UNARY)
  TB_UNARY_FLOAT_OPS(TB_DEFINE_UNARY)
#undef TB_DEFINE_UNARY
#define TB_DEFINE_BINARY(name) d.define<sig::Binary>(#name, diff);
  TB_BINARY_OPS(TB_DEFINE_BINARY)
#undef TB_DEFINE_BINARY
  d.define<sig::Binary>("gelu_tanh_backward", plain);  // gelu_tanh's backward, not differentiable
  d.define<sig::Binary>("relu_backward", plain);       // relu's backward, not differentiable
  d.define<sig::Binary>("silu_backward", plain);       // silu's backward, not differentiable
#define TB_DEFINE_COMPARE(name) d.define<sig::Binary>(#name, plain);
  TB_COMPARE_OPS(TB_DEFINE_COMPARE)
#undef TB_DEFINE_COMPARE

  d.define<sig::BinaryAlpha>("add", diff);
  d.define<sig::BinaryAlpha>("sub", diff);
  d.define<sig::InplaceBinaryAlpha>("add_", mutates0);
  d.define<sig::InplaceBinary>("mul_", mutates0);
  d.define<sig::InplaceBinary>("copy_", mutates0_diff);
  d.define<sig::Fill>("fill_", mutates0);
  d.define<sig::Ternary>("where", diff);
  d.define<sig::MaskedFill>("masked_fill", diff);

  d.define<sig::Reduce>("sum", diff);
  d.define<sig::Reduce>("mean", diff);
  d.define<sig::ReduceAll>("max", diff);
  d.define<sig::ReduceAll>("min", diff);
  d.define<sig::ReduceDimWithIndex>("max.dim", diff);
  d.define<sig::ReduceDimWithIndex>("min.dim", diff);
  d.define<sig::Argmax>("argmax", plain);
  d.define<sig::Norm>("norm", diff);

  d.define<sig::Binary>("mm", diff);
  d.define<sig::Addmm>("addmm", diff);
  d.define<sig::Binary>("bmm", diff);
  d.define<sig::Addmm>("baddbmm", diff);
  d.define<sig::Syrk>("syrk", diff);

  d.define<sig::Softmax>("softmax", diff);
  d.define<sig::Softmax>("log_softmax", diff);

  d.define<sig::IndexSelect>("index_select", diff);
  d.define<sig::IndexSelect>("gather", diff);
  d.define<sig::ScatterAdd>("scatter_add", diff);

  d.define<sig::Ternary>("rope", diff);
  d.define<sig::Binary>("swiglu", diff);
  d.define<sig::SwigluBackward>("swiglu_backward", plain);
  d.define<sig::CrossEntropy>("cross_entropy", diff);
  d.define<sig::CrossEntropyBackward>("cross_entropy_backward", plain);
  d.define<sig::RowNorm>("rms_norm", diff);
  d.define<sig::RowNorm>("layer_norm", diff);
  d.define<sig::RowNormBackward>("rms_norm_backward", plain);
  d.define<sig::RowNormBackward>("layer_norm_backward", plain);
  d.define<sig::Attention>("scaled_dot_product_attention", diff);
  d.define<sig::AttentionBackward>("scaled_dot_product_attention_backward", plain);

  d.define<sig::Conv2d>("conv2d", diff);
  d.define<sig::Conv2dBackward>("conv2d_backward", plain);
  d.define<sig::MaxPool2d>("max_pool2d", diff);
  d.define<sig::MaxPool2dBackward>("max_pool2d_backward", plain);
  d.define<sig::AvgPool2d>("avg_pool2d", diff);
  d.define<sig::AvgPool2dBackward>("avg_pool2d_backward", plain);
  d.define<sig::AdaptiveAvgPool2d>("adaptive_avg_pool2d", diff);
  d.define<sig::Binary>("adaptive_avg_pool2d_backward", plain);
  // Updates the running statistics (args 3, 4) in place; differentiable in x, weight, bias.
  d.define<sig::BatchNorm>("batch_norm", OpSchema{{3, 4}, true, ""});
  d.define<sig::BatchNormBackward>("batch_norm_backward", plain);

  d.define<sig::RandomFill>("uniform_", mutates0);
  d.define<sig::RandomFill>("normal_", mutates0);
  d.define<sig::BernoulliScalar>("bernoulli_", mutates0);
  d.define<sig::BernoulliTensor>("bernoulli", plain);
  d.define<sig::Randperm>("randperm", plain);

  // Mixed precision (engine/amp/grad_scaler.h): in-place, not differentiable.
  const OpSchema mutates01{{0, 1}, false, ""};
  d.define<sig::AmpUnscale>("amp_foreach_non_finite_check_and_unscale_", mutates01);
  d.define<sig::AmpUpdateScale>("amp_update_scale_", mutates01);

  // Fused optimizer updates (engine/optim): write params and state (Adam: args 0, 2, 3, 4; SGD:
  // 0, 2).
  d.define<sig::AdamStep>("adam_step_", OpSchema{{0, 2, 3, 4}, false, ""});
  d.define<sig::SgdStep>("sgd_step_", OpSchema{{0, 2}, false, ""});
  // Multi-tensor lerps (EMA/SWA averages, Muon's momentum): in place, not differentiable.
  d.define<sig::ForeachLerp>("foreach_lerp_", OpSchema{{0}, false, ""});
  d.define<sig::MuonMomentum>("muon_momentum_", OpSchema{{0, 2}, false, ""});
  // The global gradient norm's squared sum (clipping, the grad_norm metric): reads only.
  d.define<sig::ForeachSumSq>("foreach_sum_sq", plain);
}

}  // namespace tb::ops
