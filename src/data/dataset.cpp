// Loading a dataset to the device (classification samples, or a token
// stream) and gathering batches there.
#include <tessera/core/profiling.hpp>
#include <tessera/core/random.hpp>
#include <tessera/data/dataset.hpp>
#include <tessera/data/idx.hpp>
#include <tessera/data/impl/bytes.hpp>
#include <tessera/kernels/impl/elementwise.hpp>

namespace tessera {

namespace impl {

Shape sample_shape_of(const std::vector<std::int64_t>& dims) {
  if (dims.size() == 2) return Shape{dims[1]};
  if (dims.size() == 3) return Shape{1, dims[1], dims[2]};
  return Shape{dims[1], dims[2], dims[3]};
}

void normalise_bytes(const ExecSpace& exec, const Vector<const std::uint8_t>& bytes,
                     const ByteNormalisation& norm, const UnmanagedVector<float>& out) {
  TESSERA_REQUIRE(bytes.extent(0) == out.extent(0),
                  "tessera::impl::normalise_bytes: " << bytes.extent(0) << " bytes into "
                                                     << out.extent(0) << " floats");
  const float scale = norm.scale, shift = norm.shift;
  // A byte read and a float written per element, a multiply and a subtraction.
  const std::int64_t n = out.extent(0);
  kernels::impl::parallel_for(
      "tessera::normalise_bytes", Kokkos::RangePolicy<ExecSpace>(exec, 0, n),
      kernels::Work{kernels::bytes_of<std::uint8_t>(n) + kernels::bytes_of<float>(n), 2.0 * n},
      KOKKOS_LAMBDA(const std::int64_t i) {
        out(i) = static_cast<float>(bytes(i)) * scale - shift;
      });
}

}  // namespace impl

Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path, float mean,
                         float stddev, std::int64_t max_samples) {
  ScopedRegion region("tessera::load_idx_dataset");
  return make_byte_dataset(read_idx(images_path, max_samples), read_idx(labels_path, max_samples),
                           images_path, labels_path, mean, stddev);
}

Dataset make_byte_dataset(const IdxArray& images, const IdxArray& labels,
                          const std::string& images_source, const std::string& labels_source,
                          float mean, float stddev) {
  TESSERA_REQUIRE(
      stddev > 0,
      "tessera::make_byte_dataset: normalisation stddev must be positive, got " << stddev);
  TESSERA_REQUIRE(images.dims.size() >= 2 && images.dims.size() <= 4,
                  images_source << ": images need 2 to 4 dimensions (N, then one sample), found "
                                << images.dims.size());
  TESSERA_REQUIRE(labels.dims.size() == 1,
                  labels_source << ": labels need 1 dimension, found " << labels.dims.size());
  const std::int64_t n = images.dims[0];
  TESSERA_REQUIRE(labels.dims[0] == n, images_source << " has " << n << " images but "
                                                     << labels_source << " has " << labels.dims[0]
                                                     << " labels");
  TESSERA_REQUIRE(n > 0, images_source << " holds no samples (its first dimension is 0)");
  const std::int64_t features = static_cast<std::int64_t>(images.data.size()) / n;
  TESSERA_REQUIRE(features > 0,
                  images_source << " holds samples of size 0 (a sample dimension is 0)");

  Dataset data;
  data.sample_shape = impl::sample_shape_of(images.dims);

  data.samples = Matrix<float>(
      Kokkos::view_alloc("tessera::Dataset::samples", Kokkos::WithoutInitializing), n, features);
  data.labels =
      Vector<int>(Kokkos::view_alloc("tessera::Dataset::labels", Kokkos::WithoutInitializing), n);
  auto labels_host = Kokkos::create_mirror_view(data.labels);
  {
    const std::int64_t values = n * features;
    const Vector<std::uint8_t> bytes(
        Kokkos::view_alloc("tessera::Dataset::bytes", Kokkos::WithoutInitializing), values);
    Kokkos::deep_copy(
        bytes,
        Kokkos::View<const std::uint8_t*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
            images.data.data(), images.data.size()));
    const ExecSpace exec;
    impl::normalise_bytes(exec, bytes, impl::ByteNormalisation(mean, stddev),
                          UnmanagedVector<float>(data.samples.data(), values));
    exec.fence();
  }
  int max_label = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    labels_host(i) = labels.data[i];
    max_label = std::max(max_label, static_cast<int>(labels.data[i]));
  }
  data.classes = max_label + 1;
  Kokkos::deep_copy(data.labels, labels_host);
  return data;
}

namespace {
// Keeps the window stream apart from the shuffle and initialisation streams.
constexpr std::uint64_t window_stream = 0x57494e444f57ULL;

void gather_windows(const ExecSpace& exec, const Dataset& data, const Vector<std::int64_t>& order,
                    std::int64_t start, const Tensor<float>& batch_samples,
                    const Vector<int>& batch_labels, const WindowDraw& draw) {
  const auto dst = batch_samples.matrix();
  const std::int64_t batch = static_cast<std::int64_t>(dst.extent(0));
  const std::int64_t block = data.sample_shape[0];
  const std::int64_t length = static_cast<std::int64_t>(data.tokens.extent(0));
  TESSERA_REQUIRE(
      static_cast<std::int64_t>(dst.extent(1)) == block &&
          start + batch <= static_cast<std::int64_t>(order.extent(0)) &&
          static_cast<std::int64_t>(batch_labels.extent(0)) >= batch * block && length > block,
      "tessera::gather_batch: batch " << batch_samples.shape() << " of windows of " << block
                                      << " + 1 tokens from a stream of " << length << " at "
                                      << start << " of " << order.extent(0));
  const auto tokens = data.tokens;
  const bool random = data.random_windows;
  const std::uint64_t seed = draw.seed;
  const std::uint64_t first_id =
      static_cast<std::uint64_t>(draw.epoch) * static_cast<std::uint64_t>(data.windows);
  const auto starts = static_cast<std::uint64_t>(length - block);
  // Per token: its order entry (once a row, not counted), the window's token
  // and the next one read (neighbouring windows share all but one), a float
  // and a label written.
  using Token = typename decltype(tokens)::value_type;
  kernels::impl::parallel_for(
      "tessera::gather_windows",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {batch, block}),
      kernels::Work{kernels::bytes_of<Token>(batch * (block + 1)) +
                        kernels::bytes_of<float>(batch * block) +
                        kernels::bytes_of<int>(batch * block),
                    0},
      KOKKOS_LAMBDA(const std::int64_t b, const std::int64_t t) {
        const std::int64_t sample = order(start + b);
        const std::int64_t at =
            random ? static_cast<std::int64_t>(
                         counter_hash(seed, window_stream,
                                      first_id + static_cast<std::uint64_t>(sample)) %
                         starts)
                   : sample * block;
        dst(b, t) = static_cast<float>(tokens(at + t));
        batch_labels(b * block + t) = tokens(at + t + 1);
      });
}
}  // namespace

void gather_batch(const ExecSpace& exec, const Dataset& data, const Vector<std::int64_t>& order,
                  std::int64_t start, const Tensor<float>& batch_samples,
                  const Vector<int>& batch_labels, const WindowDraw& draw) {
  ScopedRegion region("tessera::gather_batch");
  if (data.token_stream()) {
    gather_windows(exec, data, order, start, batch_samples, batch_labels, draw);
    return;
  }
  TESSERA_REQUIRE(!data.streamed(), "tessera::gather_batch: the dataset's "
                                        << data.size()
                                        << " samples are left in their file (data.streaming); "
                                           "read them through a tessera::BatchStream");
  const auto dst = batch_samples.matrix();
  const std::int64_t batch = static_cast<std::int64_t>(dst.extent(0));
  const std::int64_t features = static_cast<std::int64_t>(data.samples.extent(1));
  TESSERA_REQUIRE(static_cast<std::int64_t>(dst.extent(1)) == features &&
                      start + batch <= static_cast<std::int64_t>(order.extent(0)) &&
                      static_cast<std::int64_t>(batch_labels.extent(0)) >= batch,
                  "tessera::gather_batch: batch " << batch_samples.shape() << " from samples ["
                                                  << data.samples.extent(0) << ", " << features
                                                  << "] at " << start << " of " << order.extent(0));
  const auto samples = data.samples;
  const auto labels = data.labels;
  // A row per sample, copied in spans (an element-wise MDRange reloaded the
  // row's source index for every feature).
  // Each sample's row read and written, its label copied.
  const kernels::Work work{
      2 * kernels::bytes_of<float>(batch * features) + 2 * kernels::bytes_of<int>(batch), 0};
  kernels::impl::for_each_row_span(
      exec, "tessera::gather_batch", batch, features, work,
      KOKKOS_LAMBDA(const std::int64_t b, const std::int64_t begin, const std::int64_t end) {
        const std::int64_t src = order(start + b);
        const float* from = &samples(src, 0);
        float* to = &dst(b, 0);
        for (std::int64_t f = begin; f < end; ++f) to[f] = from[f];
        if (begin == 0) batch_labels(b) = labels(src);
      });
}

Dataset slice(const Dataset& data, std::int64_t first, std::int64_t count) {
  TESSERA_REQUIRE(first >= 0 && count >= 0 && first + count <= data.size(),
                  "tessera::slice: samples [" << first << ", " << first + count
                                              << ") of a dataset of " << data.size());
  Dataset part = data;
  if (data.token_stream()) {
    // The tokens of windows [first, first + count), plus the one each
    // window's last label needs; the tail of the stream goes with the last part.
    const std::int64_t block = data.sample_shape[0];
    const std::int64_t length = static_cast<std::int64_t>(data.tokens.extent(0));
    const std::int64_t end = first + count == data.size() ? length : (first + count) * block + 1;
    part.tokens = Kokkos::subview(data.tokens, std::make_pair(first * block, end));
    part.windows = count;
    part.random_windows = data.random_windows && first == 0;
    if (!part.random_windows) part.windows = std::min(count, (end - first * block - 1) / block);
    return part;
  }
  if (data.streamed()) {
    part.file_first = data.file_first + first;
    part.file_count = count;
    return part;
  }
  const std::pair<std::int64_t, std::int64_t> rows(first, first + count);
  part.samples = Kokkos::subview(data.samples, rows, Kokkos::ALL());
  part.labels = Kokkos::subview(data.labels, rows);
  return part;
}

Dataset make_token_dataset(const std::vector<std::int32_t>& tokens, std::int64_t block,
                           bool random_windows, const std::string& source) {
  TESSERA_REQUIRE(block > 0, source << ": windows of " << block << " tokens; expected at least 1");
  const auto length = static_cast<std::int64_t>(tokens.size());
  TESSERA_REQUIRE(length > block, source << ": " << length << " tokens, too few for one window of "
                                         << block << " + 1 (the model's input_shape)");
  std::int32_t max = 0;
  for (std::int64_t i = 0; i < length; ++i) {
    TESSERA_REQUIRE(
        tokens[i] >= 0 && tokens[i] < (1 << 24),
        source << ": token " << i << " is " << tokens[i] << "; ids must lie in [0, 16777216)");
    max = std::max(max, tokens[i]);
  }
  Dataset data;
  data.sample_shape = Shape{block};
  data.classes = max + 1;
  data.tokens = Vector<std::int32_t>(
      Kokkos::view_alloc("tessera::Dataset::tokens", Kokkos::WithoutInitializing), length);
  Kokkos::deep_copy(
      data.tokens,
      Kokkos::View<const std::int32_t*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
          tokens.data(), tokens.size()));
  data.windows = (length - 1) / block;
  data.random_windows = random_windows;
  return data;
}

}  // namespace tessera
