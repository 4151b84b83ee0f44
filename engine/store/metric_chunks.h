// Metric points stored as packed chunks (schema v3): one row of `metric_chunks` holds up to
// kMaxChunkPoints consecutive points of one (run, metric) as a blob, so a commit writes one row per
// metric instead of one per point and a series reads back with one memcpy per chunk. Rows that
// schema v1/v2 wrote one per point (`metrics`) stay where they are and are read alongside; a point
// written later replaces an earlier one for the same step, whichever table holds it.
//
// Blob layout: `count` records of 24 bytes, little-endian — step (int64), value (float64, NaN
// kept), time (float64 Unix seconds) — with strictly increasing steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/store/database.h"
#include "engine/store/types.h"

namespace tb::store::detail {

/// Most points one chunk row holds (a longer batch of one metric becomes several rows).
inline constexpr std::size_t kMaxChunkPoints = 4096;

/// Bytes of one point in a chunk blob.
inline constexpr std::size_t kChunkRecordBytes = 24;

/// Appends `points` (one metric of one run, steps strictly increasing) to `metric_chunks` as rows
/// of at most kMaxChunkPoints points. `insert` is the prepared statement of chunk_insert_sql().
void insert_chunks(Statement& insert, std::int64_t run, std::int64_t key_id,
                   std::span<const SeriesPoint> points);

/// The INSERT statement insert_chunks runs.
const char* chunk_insert_sql();

/// The points of (run, key_id) with step >= from_step in step order, from both tables, a later
/// write replacing an earlier one for the same step.
std::vector<SeriesPoint> read_series(const Connection& db, std::int64_t run, std::int64_t key_id,
                                     std::int64_t from_step);

/// Removes every point of `run` with step > `after` from both metric tables: chunks wholly after
/// it are deleted, one that straddles it keeps its earlier points (its row rewritten in place, so
/// its write order holds). Returns the number of points removed. Run inside a transaction.
std::int64_t remove_points_after(Connection& db, std::int64_t run, std::int64_t after);

/// (key id, name) of every metric the run has points for, sorted by name.
std::vector<std::pair<std::int64_t, std::string>> run_metric_keys(const Connection& db,
                                                                  std::int64_t run);

/// The earliest time of any point of the run (nullopt without points).
std::optional<double> first_point_time(const Connection& db, std::int64_t run);

/// Decodes a chunk blob of `count` points, appending those with step >= from_step to `out`.
/// Throws StoreError naming `file` when the blob's size does not match `count`.
void decode_chunk(std::span<const unsigned char> blob, std::int64_t count, std::int64_t from_step,
                  std::vector<SeriesPoint>& out, const std::string& file);

}  // namespace tb::store::detail
