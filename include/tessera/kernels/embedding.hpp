// Embedding kernels: each row r of a batch of token ids looks up its token's
// vector in a table [vocabulary, channels] and, optionally, adds the
// learned vector of its position r % positions (a [positions, channels]
// table): y(r, :) = table(id(r), :) + position_table(r % positions, :).
// Ids arrive as floats (the model's input buffer holds token ids exactly up
// to 2^24); an id is the nearest integer. y and dy may be bf16 or fp16:
// each output is the float sum rounded once, and the table gradients sum
// the widened dy in double.
//
// Backward adds to the table's gradient, per row v, the sum of dy over every
// row whose token is v, without floating-point atomics and in a fixed order:
// the rows are bucketed by token (integer counts, a prefix sum, integer
// atomic slots), each bucket is sorted by row index, and on the host one
// task per token sums its bucket in that order, every channel's sum apart. Integer atomics only
// decide where a row lands inside its bucket, and the sort undoes that, so
// the gradient has the same bits for any thread count. The work is
// O(rows * channels + vocabulary * channels), whatever the vocabulary.
// On a GPU, where one thread heap-sorting a frequent token's bucket would
// take milliseconds, a team per token sorts it in team scratch, and teams
// sum each bucket in fixed chunks added in chunk order
// (impl::embedding_backward_teams): the same bits for any thread count and
// team size, not the host's bits.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/host_paths.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/column_sums.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/team.hpp>

#include <cstdint>

namespace tessera::kernels {

KOKKOS_INLINE_FUNCTION std::int64_t token_id(float id) {
  return static_cast<std::int64_t>(id < 0.0f ? id - 0.5f : id + 0.5f);
}

// Scratch for the deterministic backward, for up to `rows` ids and a
// vocabulary of `vocabulary` tokens.
struct TokenBuckets {
  Kokkos::View<std::int64_t*, MemSpace>
      offsets;  // [vocabulary + 1]: bucket v is [offsets(v), offsets(v + 1))
  // [vocabulary]: each token's rows counted, then counted down again as
  // they take their slots, so zero between calls (as allocated).
  Kokkos::View<std::int64_t*, MemSpace> fill;
  Kokkos::View<std::int64_t*, MemSpace> rows;  // [rows]: row indices, bucket by bucket

  TokenBuckets() = default;
  TokenBuckets(const std::string& label, std::int64_t vocabulary, std::int64_t max_rows)
      : offsets(label + "::offsets", vocabulary + 1),
        fill(label + "::fill", vocabulary),
        rows(label + "::rows", max_rows) {}
};

namespace impl {
// In-place heap sort of v[0, n): no recursion and no scratch, for one thread.
template <class V>
KOKKOS_INLINE_FUNCTION void heap_sort(const V& v, std::int64_t first, std::int64_t n) {
  const auto sift = [&](std::int64_t root, std::int64_t end) {
    while (2 * root + 1 < end) {
      std::int64_t child = 2 * root + 1;
      if (child + 1 < end && v(first + child) < v(first + child + 1)) ++child;
      if (!(v(first + root) < v(first + child))) return;
      const auto t = v(first + root);
      v(first + root) = v(first + child);
      v(first + child) = t;
      root = child;
    }
  };
  for (std::int64_t start = n / 2; start-- > 0;) sift(start, n);
  for (std::int64_t end = n; end-- > 1;) {
    const auto t = v(first);
    v(first) = v(first + end);
    v(first + end) = t;
    sift(0, end);
  }
}

// Tokens that `rows` ids can name in a vocabulary of `vocabulary`: the
// table rows (and bucket counters) a launch over those ids touches at most.
inline std::int64_t embedding_tokens(std::int64_t rows, std::int64_t vocabulary) {
  return rows < vocabulary ? rows : vocabulary;
}

// Additions of team_column_sums over `sums` columns of `rows` rows in all:
// each row's term into its stretch, then the column_chunks stretches of
// each column, then the column's sum into its gradient.
inline double embedding_column_sums_flops(std::int64_t rows, std::int64_t sums,
                                          std::int64_t channels) {
  return double(rows) * double(channels) + double(sums) * double(channels) * (column_chunks + 1);
}
}  // namespace impl

// The first row (in row order) whose id is not within 0.25 of an integer in
// [0, vocabulary), or -1 when every id is valid.
template <class ExecSpace, class Ids>
std::int64_t first_invalid_token(const ExecSpace& exec, const Ids& ids, std::int64_t vocabulary) {
  ScopedRegion region("tessera::kernels::first_invalid_token");
  const std::int64_t n = ids.extent(0);
  std::int64_t first = n;
  // ids read; one subtraction an id (token_id's rounding is a conversion).
  const Work work{bytes_of<typename Ids::non_const_value_type>(n), double(n)};
  impl::parallel_reduce(
      "tessera::kernels::first_invalid_token", Kokkos::RangePolicy<ExecSpace>(exec, 0, n), work,
      KOKKOS_LAMBDA(const std::int64_t r, std::int64_t& found) {
        const float x = ids(r);
        const std::int64_t id = token_id(x);
        const float off = x - static_cast<float>(id);
        const bool bad = !(off <= 0.25f && off >= -0.25f) || id < 0 || id >= vocabulary;
        if (bad && r < found) found = r;
      },
      Kokkos::Min<std::int64_t>(first));
  return first < n ? first : -1;
}

// y [rows, channels] = table(id) (+ position_table(r % positions) when that
// table is not empty).
template <class ExecSpace, class Ids, class Table, class PositionTable, class Y>
void embedding_forward(const ExecSpace& exec, std::int64_t positions, const Ids& ids,
                       const Table& table, const PositionTable& position_table, const Y& y) {
  ScopedRegion region("tessera::kernels::embedding_forward");
  using T = typename Y::non_const_value_type;
  const bool with_positions = position_table.extent(0) > 0;
  TESSERA_REQUIRE(
      y.extent(0) == ids.extent(0) && y.extent(1) == table.extent(1) && positions > 0 &&
          ids.extent(0) % positions == 0 &&
          (!with_positions || (static_cast<std::int64_t>(position_table.extent(0)) == positions &&
                               position_table.extent(1) == table.extent(1))),
      "tessera::kernels::embedding_forward: ids ["
          << ids.extent(0) << "], table [" << table.extent(0) << ", " << table.extent(1)
          << "], position table [" << position_table.extent(0) << ", " << position_table.extent(1)
          << "], y [" << y.extent(0) << ", " << y.extent(1) << "], " << positions
          << " positions; expected y [rows, channels] for rows ids, whole samples of "
             "`positions` rows, and a position table [positions, channels] or [0, 0]");
  const std::int64_t rows = y.extent(0), channels = y.extent(1);
  // ids read, the table rows they name (at most all of them) and the whole
  // position table read, y written; one addition an output with positions.
  const Work work{bytes_of<typename Ids::non_const_value_type>(rows) +
                      bytes_of<typename Table::non_const_value_type>(
                          impl::embedding_tokens(rows, table.extent(0)) * channels) +
                      (with_positions ? bytes_of<typename PositionTable::non_const_value_type>(
                                            positions * channels)
                                      : 0.0) +
                      bytes_of<T>(rows * channels),
                  with_positions ? double(rows) * double(channels) : 0.0};
  // Spans of a row's channels (a whole row a host task, an element a GPU
  // thread), so that the host's loop over a row's channels vectorises.
  impl::for_each_row_span(
      exec, "tessera::kernels::embedding_forward", rows, channels, work,
      KOKKOS_LAMBDA(const std::int64_t r, const std::int64_t begin, const std::int64_t end) {
        const std::int64_t id = token_id(ids(r)), p = r % positions;
        for (std::int64_t c = begin; c < end; ++c) {
          const float v = table(id, c);
          y(r, c) = narrow<T>(with_positions ? v + position_table(p, c) : v);
        }
      });
}

namespace impl {
// Buckets the rows by token: buckets.offsets and, bucket by bucket, the
// rows in an order the integer atomics chose (sorted afterwards). Three
// launches and no fill: buckets.fill is zero on entry, and the placing
// counts it back down to zero.
template <class ExecSpace, class Ids>
void embedding_buckets(const ExecSpace& exec, const Ids& ids, const TokenBuckets& buckets,
                       std::int64_t vocabulary) {
  const std::int64_t rows = ids.extent(0);
  const auto offsets = buckets.offsets;
  const auto fill = buckets.fill;
  const auto order = buckets.rows;
  using Id = typename Ids::non_const_value_type;
  const std::int64_t tokens = embedding_tokens(rows, vocabulary);
  // ids read; the counters of the tokens they name read and written.
  parallel_for(
      "tessera::kernels::embedding_count", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows),
      Work{bytes_of<Id>(rows) + 2 * bytes_of<std::int64_t>(tokens)},
      KOKKOS_LAMBDA(const std::int64_t r) {
        Kokkos::atomic_add(&fill(token_id(ids(r))), std::int64_t(1));
      });
  // Counts read, offsets written.
  parallel_scan(
      "tessera::kernels::embedding_offsets", Kokkos::RangePolicy<ExecSpace>(exec, 0, vocabulary),
      Work{bytes_of<std::int64_t>(vocabulary) + bytes_of<std::int64_t>(vocabulary + 1)},
      KOKKOS_LAMBDA(const std::int64_t v, std::int64_t& sum, const bool final) {
        if (final) offsets(v) = sum;
        sum += fill(v);
        if (final && v + 1 == vocabulary) offsets(vocabulary) = sum;
      });
  // ids read, the named tokens' offsets read and counters read and
  // written, a row index written a row. A row takes the slot its token's
  // count had before the row took one off.
  parallel_for(
      "tessera::kernels::embedding_place", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows),
      Work{bytes_of<Id>(rows) + 3 * bytes_of<std::int64_t>(tokens) + bytes_of<std::int64_t>(rows)},
      KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t v = token_id(ids(r));
        order(offsets(v) + Kokkos::atomic_fetch_add(&fill(v), std::int64_t(-1)) - 1) = r;
      });
}

// The host's sums of rows row(0), ..., row(n - 1) (pointers to
// `channels` values), each channel's in double and in row order, handed to
// add(channel, sum); channels in chunks of 64, so that a chunk's sums stay
// in registers and its loop over the channels vectorises.
template <class Row, class Add>
void embedding_sum_rows(std::int64_t n, std::int64_t channels, const Row& row, const Add& add) {
  constexpr std::int64_t chunk = 64;
  if (n == 0) return;
  for (std::int64_t c0 = 0; c0 < channels; c0 += chunk) {
    const std::int64_t width = channels - c0 < chunk ? channels - c0 : chunk;
    double sum[chunk] = {};
    for (std::int64_t k = 0; k < n; ++k) {
      const auto* values = row(k) + c0;
      if (width == chunk)
        for (std::int64_t c = 0; c < chunk; ++c) sum[c] += widen(values[c]);
      else
        for (std::int64_t c = 0; c < width; ++c) sum[c] += widen(values[c]);
    }
    for (std::int64_t c = 0; c < width; ++c) add(c0 + c, sum[c]);
  }
}

// The host's backward: a thread per token sorts its bucket, and a task per
// token or position sums its rows in order, all its channels at once.
template <class ExecSpace, class Ids, class DY, class DTable, class DPositionTable>
void embedding_backward_rows(const ExecSpace& exec, std::int64_t positions, const Ids& ids,
                             const DY& dy, const TokenBuckets& buckets, const DTable& dtable,
                             const DPositionTable& dposition_table) {
  const std::int64_t rows = ids.extent(0), vocabulary = dtable.extent(0);
  const std::int64_t channels = dtable.extent(1);
  embedding_buckets(exec, ids, buckets, vocabulary);
  const auto offsets = buckets.offsets;
  const auto order = buckets.rows;
  using G = typename DY::non_const_value_type;
  using A = typename DTable::non_const_value_type;
  using P = typename DPositionTable::non_const_value_type;
  const std::int64_t tokens = embedding_tokens(rows, vocabulary);
  // Offsets read, the row indices read and written.
  parallel_for(
      "tessera::kernels::embedding_sort", Kokkos::RangePolicy<ExecSpace>(exec, 0, vocabulary),
      Work{bytes_of<std::int64_t>(vocabulary + 1) + 2 * bytes_of<std::int64_t>(rows), 0,
           "host schedule: one task per token sorts its bucket"},
      KOKKOS_LAMBDA(const std::int64_t v) {
        impl::heap_sort(order, offsets(v), offsets(v + 1) - offsets(v));
      });
  // Offsets, row indices and dy read, the named tokens' gradient rows read
  // and written; an addition a dy element and a gradient element. A task
  // per token walks its bucket once for a chunk of channels, each channel
  // summing its rows in row order.
  for_each_span(
      exec, "tessera::kernels::embedding_table_grad", vocabulary,
      Work{bytes_of<std::int64_t>(vocabulary + 1) + bytes_of<std::int64_t>(rows) +
               bytes_of<G>(rows * channels) + 2 * bytes_of<A>(tokens * channels),
           double(rows + tokens) * double(channels),
           "host schedule: one task per token sums its bucket in row order"},
      KOKKOS_LAMBDA(const std::int64_t first, const std::int64_t last) {
        for (std::int64_t v = first; v < last; ++v)
          embedding_sum_rows(
              offsets(v + 1) - offsets(v), channels,
              [&](std::int64_t k) { return &dy(order(offsets(v) + k), 0); },
              [&](std::int64_t c, double sum) { dtable(v, c) += static_cast<A>(sum); });
      },
      1);
  if (dposition_table.extent(0) == 0) return;
  const std::int64_t samples = rows / positions;
  // dy read, the position gradient read and written; an addition a dy
  // element and a gradient element. A task per position, its samples'
  // rows in order.
  for_each_span(
      exec, "tessera::kernels::embedding_position_grad", positions,
      Work{bytes_of<G>(rows * channels) + 2 * bytes_of<P>(positions * channels),
           double(rows + positions) * double(channels),
           "host schedule: one task per position sums its rows in order"},
      KOKKOS_LAMBDA(const std::int64_t first, const std::int64_t last) {
        for (std::int64_t p = first; p < last; ++p)
          embedding_sum_rows(
              samples, channels, [&](std::int64_t n) { return &dy(n * positions + p, 0); },
              [&](std::int64_t c, double sum) { dposition_table(p, c) += static_cast<P>(sum); });
      },
      1);
}

// Largest bucket a GPU team sorts in its scratch (32 KiB of row indices);
// one thread of the team heap-sorts a larger one.
constexpr std::int64_t embedding_sort_scratch_rows = 4096;

KOKKOS_INLINE_FUNCTION std::int64_t power_of_two_at_least(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// A GPU team's part of the backward for token v (rank v): its bucket of
// row indices sorted by a bitonic network in team scratch (the sorted
// order of distinct row indices is unique, so any team size gives it; one
// thread heap-sorts a bucket larger than the scratch in place; either way
// buckets.rows ends sorted), then the bucket's column sums (impl/column_sums.hpp), a block of
// column_block channels after another, into the token's gradient row.
template <class DY, class DTable>
struct EmbeddingTableTeams {
  Kokkos::View<const std::int64_t*, MemSpace> offsets;
  Kokkos::View<std::int64_t*, MemSpace> order;
  DY dy;
  DTable dtable;
  std::int64_t rows, channels, capacity;

  KOKKOS_INLINE_FUNCTION static std::size_t sort_bytes(std::int64_t capacity) {
    return static_cast<std::size_t>(capacity) * sizeof(std::int64_t);
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member, std::int64_t v) const {
    auto* partial =
        static_cast<double*>(member.team_scratch(0).get_shmem(column_sums_bytes<double>()));
    auto* a = static_cast<std::int64_t*>(member.team_scratch(0).get_shmem(sort_bytes(capacity)));
    const std::int64_t first = offsets(v), n = offsets(v + 1) - first;
    if (n == 0) return;
    const std::int64_t* sorted = a;
    if (n > capacity) {
      Kokkos::single(Kokkos::PerTeam(member), [&] { heap_sort(order, first, n); });
      member.team_barrier();
      sorted = order.data() + first;
    } else {
      const std::int64_t size = power_of_two_at_least(n);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, size), [&](const std::int64_t i) {
        a[i] = i < n ? order(first + i) : rows;  // rows: past every row index
      });
      member.team_barrier();
      for (std::int64_t k = 2; k <= size; k *= 2)
        for (std::int64_t j = k / 2; j > 0; j /= 2) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(member, size), [&](const std::int64_t i) {
            const std::int64_t l = i ^ j;
            if (l > i && (a[i] > a[l]) == ((i & k) == 0)) {
              const std::int64_t t = a[i];
              a[i] = a[l];
              a[l] = t;
            }
          });
          member.team_barrier();
        }
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n),
                           [&](const std::int64_t i) { order(first + i) = a[i]; });
    }
    for (std::int64_t c0 = 0; c0 < channels; c0 += column_block)
      team_column_sums<double>(
          member, partial, n, column_block_width(channels, c0),
          [&](const std::int64_t i, const int j) { return double(widen(dy(sorted[i], c0 + j))); },
          [&](const int j, const double sum) { dtable(v, c0 + j) += static_cast<float>(sum); });
  }
};

// A GPU team's part of the position gradient for (position, block of
// column_block channels) (rank p * blocks + block): the column sums of the
// position's rows.
template <class DY, class DPositionTable>
struct EmbeddingPositionTeams {
  DY dy;
  DPositionTable dposition_table;
  std::int64_t positions, samples, channels, blocks;

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member, std::int64_t rank) const {
    const std::int64_t p = rank / blocks, c0 = (rank % blocks) * column_block;
    team_column_sums<double>(
        member, static_cast<double*>(member.team_scratch(0).get_shmem(column_sums_bytes<double>())),
        samples, column_block_width(channels, c0),
        [&](const std::int64_t i, const int j) {
          return double(widen(dy(i * positions + p, c0 + j)));
        },
        [&](const int j, const double sum) {
          dposition_table(p, c0 + j) += static_cast<float>(sum);
        });
  }
};

// The GPU's backward: the buckets (three launches), then one launch of
// teams: a team per token sorts its bucket and sums its rows, and a team
// per (position, block of 8 channels) sums the position's rows, each sum
// over fixed chunks of rows added in chunk order, in double. Work items at
// the tiny GPT's sizes (4096 rows, vocabulary 256, 128 channels, 128
// positions): 256 + 2048 teams.
template <class ExecSpace, class Ids, class DY, class DTable, class DPositionTable>
void embedding_backward_teams(const ExecSpace& exec, std::int64_t positions, const Ids& ids,
                              const DY& dy, const TokenBuckets& buckets, const DTable& dtable,
                              const DPositionTable& dposition_table, TeamShape shape = {}) {
  const std::int64_t rows = ids.extent(0), vocabulary = dtable.extent(0);
  const std::int64_t channels = dtable.extent(1);
  embedding_buckets(exec, ids, buckets, vocabulary);
  const std::int64_t blocks = (channels + column_block - 1) / column_block;
  const std::int64_t capacity = power_of_two_at_least(
      rows < embedding_sort_scratch_rows ? rows : embedding_sort_scratch_rows);
  using G = typename DY::non_const_value_type;
  using A = typename DTable::non_const_value_type;
  using P = typename DPositionTable::non_const_value_type;
  const std::int64_t tokens = embedding_tokens(rows, vocabulary);
  using Table = EmbeddingTableTeams<DY, DTable>;
  // Offsets read, the row indices read (and, for a bucket past the
  // scratch, sorted in place), dy read, the named tokens' gradient rows
  // read and written; the column sums of each named token.
  const Work table_work{bytes_of<std::int64_t>(vocabulary + 1) + bytes_of<std::int64_t>(rows) +
                            bytes_of<G>(rows * channels) + 2 * bytes_of<A>(tokens * channels),
                        embedding_column_sums_flops(rows, tokens, channels)};
  const bool with_positions = dposition_table.extent(0) > 0;
  // dy read, the position gradient read and written; the column sums of
  // each position.
  const Work position_work{bytes_of<G>(rows * channels) + 2 * bytes_of<P>(positions * channels),
                           embedding_column_sums_flops(rows, positions, channels)};
  parallel_teams(
      "tessera::kernels::embedding_grad_teams", exec, column_sums_shape<ExecSpace>(shape),
      team_part(vocabulary, table_work,
                Table{buckets.offsets, buckets.rows, dy, dtable, rows, channels, capacity},
                column_sums_bytes<double>() + Table::sort_bytes(capacity)),
      team_part(with_positions ? positions * blocks : 0, with_positions ? position_work : Work{},
                EmbeddingPositionTeams<DY, DPositionTable>{dy, dposition_table, positions,
                                                           rows / positions, channels, blocks},
                column_sums_bytes<double>()));
}
}  // namespace impl

// dtable(v, :) += sum of dy(r, :) over the rows r whose id is v, in row
// order; dposition(p, :) += sum of dy over the rows at position p, in row
// order (skipped when dposition is empty).
template <class ExecSpace, class Ids, class DY, class DTable, class DPositionTable>
void embedding_backward(const ExecSpace& exec, std::int64_t positions, const Ids& ids, const DY& dy,
                        const TokenBuckets& buckets, const DTable& dtable,
                        const DPositionTable& dposition_table) {
  ScopedRegion region("tessera::kernels::embedding_backward");
  const std::int64_t rows = ids.extent(0), vocabulary = dtable.extent(0);
  const std::int64_t channels = dtable.extent(1);
  TESSERA_REQUIRE(static_cast<std::int64_t>(dy.extent(0)) == rows &&
                      static_cast<std::int64_t>(dy.extent(1)) == channels &&
                      static_cast<std::int64_t>(buckets.fill.extent(0)) == vocabulary &&
                      static_cast<std::int64_t>(buckets.rows.extent(0)) >= rows && positions > 0 &&
                      rows % positions == 0 &&
                      (dposition_table.extent(0) == 0 ||
                       (static_cast<std::int64_t>(dposition_table.extent(0)) == positions &&
                        static_cast<std::int64_t>(dposition_table.extent(1)) == channels)),
                  "tessera::kernels::embedding_backward: ids ["
                      << rows << "], dy [" << dy.extent(0) << ", " << dy.extent(1) << "], dtable ["
                      << vocabulary << ", " << channels << "], buckets for a vocabulary of "
                      << buckets.fill.extent(0) << " and " << buckets.rows.extent(0)
                      << " rows, dposition table [" << dposition_table.extent(0) << ", "
                      << dposition_table.extent(1) << "], " << positions << " positions");
  if constexpr (host_fast_paths_v<ExecSpace>)
    impl::embedding_backward_rows(exec, positions, ids, dy, buckets, dtable, dposition_table);
  else
    impl::embedding_backward_teams(exec, positions, ids, dy, buckets, dtable, dposition_table);
}

}  // namespace tessera::kernels
