#include "engine/data/dataset.h"

#include <cstring>
#include <utility>

#include "engine/core/error.h"

namespace tb::data {

core::Tensor gather_rows(const core::Tensor& src, std::span<const std::int64_t> indices,
                         const char* what) {
  TB_INTERNAL_ASSERT(src.defined() && src.dim() >= 1 && src.is_contiguous());
  const std::int64_t rows = src.size(0);
  core::DimVector sizes(src.sizes());
  sizes[0] = static_cast<std::int64_t>(indices.size());
  core::Tensor out = core::Tensor::empty(sizes.span(), src.dtype());
  const std::size_t row_bytes = rows == 0 ? 0 : src.nbytes() / static_cast<std::size_t>(rows);
  const auto* from = static_cast<const std::uint8_t*>(src.data_ptr());
  auto* to = static_cast<std::uint8_t*>(out.data_ptr());
  for (std::size_t j = 0; j < indices.size(); ++j) {
    const std::int64_t i = indices[j];
    TB_CHECK_T(IndexError, i >= 0 && i < rows, "[", what, "] sample index ", i,
               " is out of range for a dataset of ", rows, " samples");
    if (row_bytes != 0) {
      std::memcpy(to + j * row_bytes, from + static_cast<std::size_t>(i) * row_bytes, row_bytes);
    }
  }
  return out;
}

TensorDataset::TensorDataset(const core::Tensor& input, const core::Tensor& target) {
  TB_CHECK(input.defined() && target.defined(),
           "[tensor dataset] input and target must be defined");
  TB_CHECK(input.device().type() == core::DeviceType::CPU &&
               target.device().type() == core::DeviceType::CPU,
           "[tensor dataset] input and target must be CPU tensors, got ", input.device().str(),
           " and ", target.device().str());
  TB_CHECK(input.dim() >= 1 && target.dim() >= 1,
           "[tensor dataset] input and target need a sample dimension, got ", input.dim(),
           "-d and ", target.dim(), "-d tensors");
  TB_CHECK(input.size(0) == target.size(0), "[tensor dataset] input has ", input.size(0),
           " samples but target has ", target.size(0));
  input_ = input.contiguous();
  target_ = target.contiguous();
  size_ = input_.size(0);
}

Batch TensorDataset::get_batch(std::span<const std::int64_t> indices,
                               const BatchContext& /*ctx*/) const {
  return Batch{gather_rows(input_, indices, "tensor dataset"),
               gather_rows(target_, indices, "tensor dataset")};
}

}  // namespace tb::data
