// The MPI reductions of 16-bit gradient codes.
#include <tessera/core/error.hpp>
#include <tessera/parallel/communicator.hpp>
#include <tessera/parallel/impl/sum16.hpp>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

namespace tessera {
namespace impl {

namespace {

// How many leading codes a vectorised loop summed (add16's results, bit
// for bit); the scalar add16 does the rest.
template <class T>
int sum16_vectorised(const std::uint16_t*, std::uint16_t*, int) {
  return 0;
}

// bf16: the rounding of add16 without branches, so that compilers
// vectorise it: adding 0x7fff plus the kept part's last bit carries into
// the upper half exactly when round-half-even rounds up; a NaN sum becomes
// the quiet NaN.
template <>
int sum16_vectorised<bf16>(const std::uint16_t* a, std::uint16_t* b, int n) {
  const std::uint16_t nan = bf16(bits_float(0x7fc00000u)).bits;
  for (int i = 0; i < n; ++i) {
    const float sum = bits_float(static_cast<std::uint32_t>(a[i]) << 16) +
                      bits_float(static_cast<std::uint32_t>(b[i]) << 16);
    const std::uint32_t u = float_bits(sum);
    const auto rounded = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    b[i] = sum == sum ? rounded : nan;
  }
  return n;
}

#if defined(__F16C__) && defined(__AVX__)
// fp16 with the CPU's conversions (F16C: exact widening, and narrowing
// rounded to nearest even with fp16's overflow and subnormals), 8 codes at
// a time; NaN sums become the quiet NaN.
template <>
int sum16_vectorised<fp16>(const std::uint16_t* a, std::uint16_t* b, int n) {
  const __m128i nan = _mm_set1_epi16(static_cast<short>(fp16(bits_float(0x7fc00000u)).bits));
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 sum =
        _mm256_add_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i))),
                      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i))));
    const __m256i unordered = _mm256_castps_si256(_mm256_cmp_ps(sum, sum, _CMP_UNORD_Q));
    const __m128i is_nan =
        _mm_packs_epi32(_mm256_castsi256_si128(unordered), _mm256_extractf128_si256(unordered, 1));
    const __m128i rounded = _mm256_cvtps_ph(sum, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + i), _mm_blendv_epi8(rounded, nan, is_nan));
  }
  return i;
}
#endif

template <class T>
void sum16_function(void* in, void* inout, int* length, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = sum16_vectorised<T>(a, b, *length); i < *length; ++i) b[i] = add16<T>(a[i], b[i]);
}

}  // namespace

MPI_Op sum16_op(FloatFormat format) {
  TESSERA_REQUIRE(format == FloatFormat::bf16 || format == FloatFormat::fp16,
                  "tessera::impl::sum16_op: format " << float_format_name(format)
                                                     << " has no 16-bit sum; use bf16 or fp16");
  TESSERA_REQUIRE(Communicator::running(),
                  "tessera::impl::sum16_op: MPI is not running; call it while a tessera::Runtime "
                  "(or MPI_Init .. MPI_Finalize) is alive");
  // One op per format and process; MPI_Finalize frees them.
  static MPI_Op bf16_sum = MPI_OP_NULL, fp16_sum = MPI_OP_NULL;
  MPI_Op& op = format == FloatFormat::bf16 ? bf16_sum : fp16_sum;
  if (op == MPI_OP_NULL)
    op = Communicator::create_reduction(format == FloatFormat::bf16 ? &sum16_function<bf16>
                                                                    : &sum16_function<fp16>);
  return op;
}

}  // namespace impl
}  // namespace tessera
