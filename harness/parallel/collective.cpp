#include "harness/parallel/collective.h"

#include <c10/core/ScalarType.h>

namespace parity {

std::string_view to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce:
      return "all_reduce";
    case CollectiveOp::all_gather:
      return "all_gather";
    case CollectiveOp::reduce_scatter:
      return "reduce_scatter";
    case CollectiveOp::broadcast:
      return "broadcast";
    case CollectiveOp::barrier:
      return "barrier";
    case CollectiveOp::all_to_all_counts:
      return "all_to_all_counts";
    case CollectiveOp::all_to_all:
      return "all_to_all";
    case CollectiveOp::send:
      return "send";
    case CollectiveOp::recv:
      return "recv";
  }
  return "?";
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

namespace {

// torch's Python names ("float32"), which is what people read in reports.
std::string dtype_name(std::int8_t dtype) {
  if (dtype < 0) return "none";
  switch (static_cast<c10::ScalarType>(dtype)) {
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Short:
      return "int16";
    case c10::ScalarType::Char:
      return "int8";
    case c10::ScalarType::Byte:
      return "uint8";
    case c10::ScalarType::Bool:
      return "bool";
    default:
      break;
  }
  if (dtype < static_cast<std::int8_t>(c10::ScalarType::NumOptions))
    return c10::toString(static_cast<c10::ScalarType>(dtype));
  return "dtype" + std::to_string(dtype);
}

}  // namespace

std::string CollectiveCall::describe() const {
  std::string s(to_string(op));
  switch (op) {
    case CollectiveOp::all_reduce:
      s += "(" + std::string(to_string(reduce)) + ")";
      break;
    case CollectiveOp::all_gather:
      s += "(dim " + std::to_string(dim) + ")";
      break;
    case CollectiveOp::reduce_scatter:
      s += "(" + std::string(to_string(reduce)) + ", dim " + std::to_string(dim) + ")";
      break;
    case CollectiveOp::broadcast:
      s += "(root " + std::to_string(dim) + ")";
      break;
    case CollectiveOp::send:
    case CollectiveOp::recv:
      s += std::string(op == CollectiveOp::send ? "(to " : "(from ") +
           std::string(to_string(axis)) + " rank " + std::to_string(dim) +
           (label.empty() ? "" : ": " + label) + ")";
      break;
    case CollectiveOp::barrier:
    case CollectiveOp::all_to_all_counts:
    case CollectiveOp::all_to_all:
      break;
  }
  s += " on ";
  s += to_string(axis);
  if (op != CollectiveOp::barrier) {
    s += ", " + dtype_name(dtype) + " [";
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (i) s += ", ";
      s += std::to_string(shape[i]);
    }
    s += "]";
  }
  s += ", #" + std::to_string(sequence);
  return s;
}

bool CollectiveCall::same_call(const CollectiveCall& other) const {
  return op == other.op && reduce == other.reduce && axis == other.axis && dtype == other.dtype &&
         shape == other.shape && dim == other.dim && sequence == other.sequence &&
         message == other.message;
}

}  // namespace parity
