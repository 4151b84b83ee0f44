// Packed metric chunks: encoding, writing and the merged read of both metric tables.
#include "engine/store/metric_chunks.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <limits>

#include "engine/core/error.h"
#include "engine/store/store_error.h"

namespace tb::store::detail {
namespace {

using ::tb::detail::str_cat;

static_assert(sizeof(SeriesPoint) == kChunkRecordBytes && offsetof(SeriesPoint, value) == 8 &&
                  offsetof(SeriesPoint, time) == 16,
              "SeriesPoint must match the chunk record (step, value, time) for memcpy decoding");

template <typename T>
T byteswap_bits(T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  std::reverse(b, b + sizeof(T));
  std::memcpy(&v, b, sizeof(T));
  return v;
}

// Little-endian records: a memcpy on little-endian machines, byte swaps elsewhere.
void encode(std::span<const SeriesPoint> points, std::vector<unsigned char>& out) {
  out.resize(points.size() * kChunkRecordBytes);
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out.data(), points.data(), out.size());
  } else {
    unsigned char* p = out.data();
    for (const SeriesPoint& pt : points) {
      const SeriesPoint s{byteswap_bits(pt.step), byteswap_bits(pt.value), byteswap_bits(pt.time)};
      std::memcpy(p, &s, kChunkRecordBytes);
      p += kChunkRecordBytes;
    }
  }
}

}  // namespace

const char* chunk_insert_sql() {
  return "INSERT INTO metric_chunks (run_id, key_id, first_step, last_step, count, points) "
         "VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
}

void insert_chunks(Statement& insert, std::int64_t run, std::int64_t key_id,
                   std::span<const SeriesPoint> points) {
  thread_local std::vector<unsigned char> blob;
  for (std::size_t i = 0; i < points.size(); i += kMaxChunkPoints) {
    const std::span<const SeriesPoint> part =
        points.subspan(i, std::min(kMaxChunkPoints, points.size() - i));
    encode(part, blob);
    insert.bind(1, run)
        .bind(2, key_id)
        .bind(3, part.front().step)
        .bind(4, part.back().step)
        .bind(5, static_cast<std::int64_t>(part.size()))
        .bind_blob(6, blob.data(), blob.size());
    insert.run();
  }
}

void decode_chunk(std::span<const unsigned char> blob, std::int64_t count, std::int64_t from_step,
                  std::vector<SeriesPoint>& out, const std::string& file) {
  if (count < 0 || blob.size() != static_cast<std::size_t>(count) * kChunkRecordBytes) {
    throw StoreError(str_cat("[store] ", file, ": a metric chunk holds ", blob.size(),
                             " bytes for ", count, " points (expected ",
                             count * static_cast<std::int64_t>(kChunkRecordBytes),
                             "); the database is damaged"));
  }
  const std::size_t old = out.size();
  out.resize(old + static_cast<std::size_t>(count));
  SeriesPoint* dst = out.data() + old;
  std::memcpy(static_cast<void*>(dst), blob.data(), blob.size());
  if constexpr (std::endian::native != std::endian::little) {
    for (std::int64_t i = 0; i < count; ++i) {
      dst[i] = {byteswap_bits(dst[i].step), byteswap_bits(dst[i].value),
                byteswap_bits(dst[i].time)};
    }
  }
  if (count > 0 && dst[0].step < from_step) {  // only the chunk that straddles from_step
    const auto first =
        std::lower_bound(dst, dst + count, from_step,
                         [](const SeriesPoint& p, std::int64_t s) { return p.step < s; });
    const std::size_t drop = static_cast<std::size_t>(first - dst);
    std::memmove(static_cast<void*>(dst), first, (count - drop) * sizeof(SeriesPoint));
    out.resize(out.size() - drop);
  }
}

std::int64_t remove_points_after(Connection& db, std::int64_t run, std::int64_t after) {
  std::int64_t removed = 0;
  const auto count = [&](const char* sql) {
    Statement n = db.prepare(sql);
    n.bind(1, run).bind(2, after);
    if (n.step() && !n.is_null(0)) removed += n.int64(0);
  };
  count("SELECT COUNT(*) FROM metrics WHERE run_id = ?1 AND step > ?2");
  count("SELECT SUM(count) FROM metric_chunks WHERE run_id = ?1 AND first_step > ?2");
  db.prepare("DELETE FROM metrics WHERE run_id = ?1 AND step > ?2")
      .bind(1, run)
      .bind(2, after)
      .run();
  db.prepare("DELETE FROM metric_chunks WHERE run_id = ?1 AND first_step > ?2")
      .bind(1, run)
      .bind(2, after)
      .run();
  struct Cut {
    std::int64_t id;
    std::vector<SeriesPoint> kept;
  };
  std::vector<Cut> cuts;
  {
    Statement straddling = db.prepare(
        "SELECT id, count, points FROM metric_chunks WHERE run_id = ?1 AND last_step > ?2");
    straddling.bind(1, run).bind(2, after);
    while (straddling.step()) {
      Cut c{straddling.int64(0), {}};
      const std::int64_t n = straddling.int64(1);
      decode_chunk(straddling.blob(2), n, std::numeric_limits<std::int64_t>::min(), c.kept,
                   db.file());
      const auto end =
          std::upper_bound(c.kept.begin(), c.kept.end(), after,
                           [](std::int64_t s, const SeriesPoint& p) { return s < p.step; });
      c.kept.erase(end, c.kept.end());
      removed += n - static_cast<std::int64_t>(c.kept.size());
      cuts.push_back(std::move(c));
    }
  }
  Statement update =
      db.prepare("UPDATE metric_chunks SET last_step = ?2, count = ?3, points = ?4 WHERE id = ?1");
  std::vector<unsigned char> blob;
  for (const Cut& c : cuts) {
    if (c.kept.empty()) continue;  // first_step > after: deleted above
    encode(c.kept, blob);
    update.bind(1, c.id)
        .bind(2, c.kept.back().step)
        .bind(3, static_cast<std::int64_t>(c.kept.size()))
        .bind_blob(4, blob.data(), blob.size());
    update.run();
  }
  return removed;
}

std::vector<SeriesPoint> read_series(const Connection& db, std::int64_t run, std::int64_t key_id,
                                     std::int64_t from_step) {
  // Chunks in index order (run, key, last_step), which needs no sort; `id` is the write order,
  // used only when chunks overlap (steps written again, e.g. by a resumed run).
  Statement chunks = db.prepare(
      "SELECT id, first_step, last_step, count, points FROM metric_chunks "
      "WHERE run_id = ?1 AND key_id = ?2 AND last_step >= ?3 ORDER BY last_step");
  chunks.bind(1, run).bind(2, key_id).bind(3, from_step);
  std::vector<SeriesPoint> out;
  {
    // The size first (the counts sit before the blobs in each row, so no blob is read): one
    // allocation instead of a doubling series of copies.
    Statement total = db.prepare(
        "SELECT SUM(count) FROM metric_chunks WHERE run_id = ?1 AND key_id = ?2 AND "
        "last_step >= ?3");
    total.bind(1, run).bind(2, key_id).bind(3, from_step);
    if (total.step() && !total.is_null(0)) out.reserve(static_cast<std::size_t>(total.int64(0)));
  }
  struct Span {
    std::int64_t id;
    std::size_t begin, end;
  };
  std::vector<Span> spans;
  bool ordered = true;  // each chunk starts after the previous one ends
  std::int64_t last = 0;
  while (chunks.step()) {
    const std::int64_t first_step = chunks.int64(1);
    if (!spans.empty() && first_step <= last) ordered = false;
    last = chunks.int64(2);
    const std::size_t begin = out.size();
    decode_chunk(chunks.blob(4), chunks.int64(3), from_step, out, db.file());
    spans.push_back({chunks.int64(0), begin, out.size()});
  }
  if (!ordered) {
    // Keep each step's latest write: sort by (step, write order), the last of each step wins.
    std::vector<std::pair<std::int64_t, SeriesPoint>> tagged;
    tagged.reserve(out.size());
    for (const Span& sp : spans) {
      for (std::size_t i = sp.begin; i < sp.end; ++i)
        tagged.emplace_back(sp.id, out[i]);
    }
    std::sort(tagged.begin(), tagged.end(), [](const auto& a, const auto& b) {
      return a.second.step != b.second.step ? a.second.step < b.second.step : a.first < b.first;
    });
    out.clear();
    for (const auto& [id, p] : tagged) {
      if (!out.empty() && out.back().step == p.step) {
        out.back() = p;
      } else {
        out.push_back(p);
      }
    }
  }
  // Points of the per-row table (schema v1/v2 files): older than every chunk.
  Statement rows = db.prepare(
      "SELECT step, value, time FROM metrics WHERE run_id = ?1 AND key_id = ?2 AND step >= ?3 "
      "ORDER BY step");
  rows.bind(1, run).bind(2, key_id).bind(3, from_step);
  std::vector<SeriesPoint> old;
  while (rows.step())
    old.push_back({rows.int64(0), rows.real(1), rows.real(2)});
  if (old.empty()) return out;
  std::vector<SeriesPoint> merged;
  merged.reserve(old.size() + out.size());
  std::size_t i = 0, j = 0;
  while (i < old.size() || j < out.size()) {
    if (j == out.size() || (i < old.size() && old[i].step < out[j].step)) {
      merged.push_back(old[i++]);
    } else {
      if (i < old.size() && old[i].step == out[j].step) ++i;  // the chunk's later write wins
      merged.push_back(out[j++]);
    }
  }
  return merged;
}

std::vector<std::pair<std::int64_t, std::string>> run_metric_keys(const Connection& db,
                                                                  std::int64_t run) {
  Statement st = db.prepare(
      "SELECT k.id, k.name FROM metric_keys k WHERE "
      "EXISTS (SELECT 1 FROM metric_chunks c WHERE c.run_id = ?1 AND c.key_id = k.id) OR "
      "EXISTS (SELECT 1 FROM metrics m WHERE m.run_id = ?1 AND m.key_id = k.id) ORDER BY k.name");
  st.bind(1, run);
  std::vector<std::pair<std::int64_t, std::string>> out;
  while (st.step())
    out.emplace_back(st.int64(0), st.text(1));
  return out;
}

std::optional<double> first_point_time(const Connection& db, std::int64_t run) {
  // Each key's first point: the chunk with the smallest first step (its first record), and the
  // first row of the per-row table.
  std::optional<double> best;
  Statement chunk = db.prepare(
      "SELECT (SELECT c.points FROM metric_chunks c WHERE c.run_id = ?1 AND c.key_id = k.id "
      "ORDER BY c.first_step LIMIT 1) FROM metric_keys k");
  chunk.bind(1, run);
  std::vector<SeriesPoint> first;
  while (chunk.step()) {
    const std::span<const unsigned char> blob = chunk.blob(0);
    if (blob.size() < kChunkRecordBytes) continue;
    first.clear();
    decode_chunk(blob.first(kChunkRecordBytes), 1, std::numeric_limits<std::int64_t>::min(), first,
                 db.file());
    if (!best || first[0].time < *best) best = first[0].time;
  }
  Statement rows = db.prepare(
      "SELECT MIN(t) FROM (SELECT (SELECT m.time FROM metrics m WHERE m.run_id = ?1 AND "
      "m.key_id = k.id ORDER BY m.step LIMIT 1) AS t FROM metric_keys k)");
  rows.bind(1, run);
  if (rows.step() && !rows.is_null(0) && (!best || rows.real(0) < *best)) best = rows.real(0);
  return best;
}

}  // namespace tb::store::detail
