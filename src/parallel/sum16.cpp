// The MPI reductions of 16-bit gradient codes and their lifetime.
#include <tessera/core/error.hpp>
#include <tessera/parallel/impl/sum16.hpp>

namespace tessera {
namespace impl {

namespace {

template <class T>
void sum16_function(void* in, void* inout, int* length, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *length; ++i) b[i] = add16<T>(a[i], b[i]);
}

struct Sum16Ops {
  MPI_Op bf16 = MPI_OP_NULL;
  MPI_Op fp16 = MPI_OP_NULL;
  int keyval = MPI_KEYVAL_INVALID;
};
Sum16Ops& sum16_ops() {
  static Sum16Ops ops;
  return ops;
}

// MPI_Finalize deletes MPI_COMM_SELF's attributes first, while MPI still
// works: the ops go with MPI, after every request that used them.
int free_sum16_ops(MPI_Comm, int, void*, void*) {
  Sum16Ops& ops = sum16_ops();
  if (ops.bf16 != MPI_OP_NULL) MPI_Op_free(&ops.bf16);
  if (ops.fp16 != MPI_OP_NULL) MPI_Op_free(&ops.fp16);
  MPI_Comm_free_keyval(&ops.keyval);
  return MPI_SUCCESS;
}

void require_mpi(int status, const char* what) {
  TESSERA_REQUIRE(status == MPI_SUCCESS,
                  "tessera::impl::sum16_op: " << what << " failed (MPI error " << status << ")");
}

}  // namespace

MPI_Op sum16_op(FloatFormat format) {
  TESSERA_REQUIRE(format == FloatFormat::bf16 || format == FloatFormat::fp16,
                  "tessera::impl::sum16_op: format " << float_format_name(format)
                                                     << " has no 16-bit sum; use bf16 or fp16");
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  TESSERA_REQUIRE(initialized && !finalized,
                  "tessera::impl::sum16_op: MPI is not running; call it while a tessera::Runtime "
                  "(or MPI_Init .. MPI_Finalize) is alive");
  Sum16Ops& ops = sum16_ops();
  MPI_Op& op = format == FloatFormat::bf16 ? ops.bf16 : ops.fp16;
  if (op != MPI_OP_NULL) return op;
  if (ops.keyval == MPI_KEYVAL_INVALID) {
    require_mpi(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_sum16_ops, &ops.keyval, nullptr),
                "MPI_Comm_create_keyval");
    require_mpi(MPI_Comm_set_attr(MPI_COMM_SELF, ops.keyval, nullptr), "MPI_Comm_set_attr");
  }
  MPI_User_function* function =
      format == FloatFormat::bf16 ? &sum16_function<bf16> : &sum16_function<fp16>;
  require_mpi(MPI_Op_create(function, /*commute=*/1, &op), "MPI_Op_create");
  return op;
}

}  // namespace impl
}  // namespace tessera
