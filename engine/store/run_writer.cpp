// RunWriter: producer queue and the batching writer thread.
#include "engine/store/run_writer.h"

#include <algorithm>
#include <string>
#include <utility>

#include "engine/store/metric_chunks.h"
#include "engine/store/run_ops.h"
#include "engine/store/schema.h"

namespace tb::store {
namespace {

using ::tb::detail::str_cat;
using Clock = std::chrono::steady_clock;

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

detail::Connection open_for_writer(const std::filesystem::path& db, const WriterOptions& o) {
  if (o.commit_interval.count() <= 0) {
    throw ValueError(str_cat("[store] ", db.string(), ": commit_interval must be > 0 ms, got ",
                             o.commit_interval.count()));
  }
  if (o.heartbeat_interval.count() <= 0) {
    throw ValueError(str_cat("[store] ", db.string(), ": heartbeat_interval must be > 0 ms, got ",
                             o.heartbeat_interval.count()));
  }
  if (o.max_queued_rows == 0) {
    throw ValueError(str_cat("[store] ", db.string(), ": max_queued_rows must be >= 1"));
  }
  detail::OpenOptions open;
  open.check = IntegrityCheck::kNone;  // the RunStore that created the run has checked the file
  open.busy_timeout_ms = o.busy_timeout_ms;
  return detail::open_database(db, open);
}

}  // namespace

RunWriter::RunWriter(const std::filesystem::path& db, std::int64_t run, WriterOptions options)
    : run_(run), options_(options), me_(current_process()), db_(open_for_writer(db, options)) {
  db_.exec("PRAGMA cache_size = -65536");  // 64 MiB: the metrics B-tree's hot pages stay cached
  {
    detail::Transaction tx(db_);
    const RunStatus from = detail::read_status(db_, run_);
    if (from == RunStatus::kRunning) {
      detail::Statement w =
          db_.prepare("SELECT writer_pid, writer_host, heartbeat_at FROM runs WHERE id = ?");
      w.bind(1, run_);
      w.step();
      const auto heard = w.opt_real(2);
      throw ValueError(
          str_cat("[store] ", db_.file(), ": run ", run_, " is already running (its writer is pid ",
                  w.opt_int64(0).value_or(0), " on ", w.text(1),
                  heard ? str_cat(", last heard from ",
                                  static_cast<std::int64_t>(wall_now() - *heard), " s ago")
                        : std::string(),
                  "); a writer on another host is taken as crashed once silent for ",
                  static_cast<std::int64_t>(kWriterSilenceLimit.count()), " s"));
    }
    if (options_.resume_after) {
      const std::int64_t after = *options_.resume_after;
      stats_.removed_points = detail::remove_points_after(db_, run_, after);
      detail::Statement gone =
          db_.prepare("SELECT COUNT(*) FROM checkpoints WHERE run_id = ?1 AND step > ?2");
      gone.bind(1, run_).bind(2, after);
      if (gone.step()) stats_.removed_checkpoints = gone.int64(0);
      db_.prepare("DELETE FROM checkpoints WHERE run_id = ?1 AND step > ?2")
          .bind(1, run_)
          .bind(2, after)
          .run();
      db_.prepare("UPDATE runs SET last_step = ?2 WHERE id = ?1 AND last_step > ?2")
          .bind(1, run_)
          .bind(2, after)
          .run();
    }
    if (options_.relabel) {
      const WriterOptions::Relabel& r = *options_.relabel;
      db_.prepare("UPDATE runs SET config = ?2 WHERE id = ?1")
          .bind(1, run_)
          .bind(2, r.config)
          .run();
      if (r.name) {
        detail::check_run_name(db_.file(), *r.name);
        db_.prepare("UPDATE runs SET name = ?2 WHERE id = ?1").bind(1, run_).bind(2, *r.name).run();
      }
      if (r.tags)
        db_.prepare("UPDATE runs SET tags = ?2 WHERE id = ?1")
            .bind(1, run_)
            .bind(2, detail::tags_to_json(*r.tags))
            .run();
    }
    detail::change_status(db_, run_, RunStatus::kRunning, "", wall_now(), &me_);
    stamp_heartbeat();
    tx.commit();
  }
  thread_ = std::thread([this] { run_thread(); });
}

RunWriter::~RunWriter() {
  try {
    close();
  } catch (...) {  // NOLINT(bugprone-empty-catch): reported to callers of close() only
  }
}

MetricKeyId RunWriter::intern_locked(std::string_view name) {
  if (auto it = key_ids_.find(name); it != key_ids_.end()) return it->second;
  const auto id = static_cast<MetricKeyId>(key_names_.size());
  key_names_.emplace_back(name);
  key_ids_.emplace(std::string(name), id);
  return id;
}

MetricKeyId RunWriter::key(std::string_view name) {
  std::lock_guard lock(mu_);
  return intern_locked(name);
}

void RunWriter::check_open_locked() const {
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      throw StoreError(str_cat("[store] ", db_.file(), ": the writer of run ", run_,
                               " has failed, nothing more is stored: ", e.what()));
    }
  }
  if (closed_ || stop_) {
    throw ValueError(str_cat("[store] ", db_.file(), ": the writer of run ", run_, " is closed"));
  }
}

void RunWriter::admit_locked(std::unique_lock<std::mutex>& lock, std::size_t rows) {
  check_open_locked();
  if (pending_.rows.size() + rows > options_.max_queued_rows && !pending_.rows.empty()) {
    ++stats_.producer_waits;
    work_cv_.notify_one();
    space_cv_.wait(lock, [&] {
      return error_ || pending_.rows.size() + rows <= options_.max_queued_rows ||
             pending_.rows.empty();
    });
    check_open_locked();
  }
  if (pending_.rows.empty() && pending_.ops.empty()) {
    first_pending_ = Clock::now();
    work_cv_.notify_one();
  }
  ++logged_seq_;
}

void RunWriter::log_metrics(std::int64_t step, std::span<const MetricValue> values) {
  if (values.empty()) return;
  const double now = wall_now();
  std::unique_lock lock(mu_);
  admit_locked(lock, values.size());
  for (const MetricValue& v : values) {
    pending_.rows.push_back({step, v.value, now, intern_locked(v.key)});
  }
  stats_.rows_logged += values.size();
}

void RunWriter::log_metrics(std::int64_t step, std::span<const KeyedValue> values) {
  if (values.empty()) return;
  const double now = wall_now();
  std::unique_lock lock(mu_);
  for (const KeyedValue& v : values) {
    if (v.key >= key_names_.size()) {
      throw ValueError(str_cat("[store] ", db_.file(), ": run ", run_, ": metric key handle ",
                               v.key, " was not made by key()"));
    }
  }
  admit_locked(lock, values.size());
  for (const KeyedValue& v : values)
    pending_.rows.push_back({step, v.value, now, v.key});
  stats_.rows_logged += values.size();
}

void RunWriter::enqueue_op_locked(Op op) {
  pending_.ops.push_back(std::move(op));
}

void RunWriter::log_event(EventLevel level, std::string_view text) {
  std::unique_lock lock(mu_);
  admit_locked(lock, 0);
  enqueue_op_locked(EventOp{wall_now(), level, std::string(text)});
}

void RunWriter::add_checkpoint(std::int64_t step, std::string_view path,
                               std::string_view metadata) {
  std::unique_lock lock(mu_);
  admit_locked(lock, 0);
  enqueue_op_locked(CheckpointOp{wall_now(), step, std::string(path), std::string(metadata)});
}

void RunWriter::set_status(RunStatus status, std::string_view message) {
  std::unique_lock lock(mu_);
  check_open_locked();
  if (!is_allowed_transition(status_, status)) {
    throw ValueError(str_cat("[store] ", db_.file(), ": run ", run_, " cannot go from '",
                             to_string(status_), "' to '", to_string(status), "'"));
  }
  admit_locked(lock, 0);
  status_ = status;
  enqueue_op_locked(StatusOp{wall_now(), status, std::string(message)});
}

void RunWriter::flush() {
  std::unique_lock lock(mu_);
  if (closed_ && !error_) return;
  const std::uint64_t target = logged_seq_;
  flush_requested_ = true;
  work_cv_.notify_one();
  done_cv_.wait(lock, [&] { return error_ || committed_seq_ >= target; });
  if (error_) check_open_locked();
}

void RunWriter::close() {
  {
    std::unique_lock lock(mu_);
    if (closed_) return;
    if (!error_ && status_ == RunStatus::kRunning) {
      status_ = RunStatus::kFailed;
      admit_locked(lock, 0);
      enqueue_op_locked(StatusOp{wall_now(), RunStatus::kFailed,
                                 "the run's writer was closed while the run was still running"});
    }
    stop_ = true;
    work_cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  std::unique_lock lock(mu_);
  closed_ = true;
  if (error_) {
    std::exception_ptr e = error_;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      throw StoreError(
          str_cat("[store] ", db_.file(), ": the writer of run ", run_,
                  " failed; what was logged after its last commit is lost: ", ex.what()));
    }
  }
}

WriterStats RunWriter::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void RunWriter::stamp_heartbeat() {
  detail::Statement hb = db_.prepare("UPDATE runs SET heartbeat_at = ? WHERE id = ?");
  hb.bind(1, wall_now()).bind(2, run_);
  hb.run();
}

void RunWriter::run_thread() {
  std::unique_lock lock(mu_);
  Batch batch;
  // Under the lock: the writer stops, and every waiting caller gets the error.
  const auto stop_on = [&](std::exception_ptr failure) {
    error_ = std::move(failure);
    space_cv_.notify_all();
    done_cv_.notify_all();
  };
  for (;;) {
    const bool woken = work_cv_.wait_for(lock, options_.heartbeat_interval, [&] {
      return stop_ || !pending_.rows.empty() || !pending_.ops.empty();
    });
    if (!woken) {  // idle: a sign of life only
      lock.unlock();
      std::exception_ptr failure;
      try {
        detail::Transaction tx(db_);
        stamp_heartbeat();
        tx.commit();
      } catch (...) {
        failure = std::current_exception();
      }
      lock.lock();
      if (failure) return stop_on(failure);
      continue;
    }
    const bool empty = pending_.rows.empty() && pending_.ops.empty();
    if (empty && stop_) break;
    // Collect for up to commit_interval after the first queued item, unless told to hurry.
    work_cv_.wait_until(lock, first_pending_ + options_.commit_interval, [&] {
      return stop_ || flush_requested_ || pending_.rows.size() >= options_.max_queued_rows / 2;
    });
    std::swap(batch, pending_);
    pending_.rows.clear();
    pending_.ops.clear();
    pending_.new_keys.clear();
    batch.new_keys.assign(key_names_.begin() + static_cast<std::ptrdiff_t>(keys_sent_),
                          key_names_.end());
    keys_sent_ = key_names_.size();
    const std::uint64_t seq = logged_seq_;
    flush_requested_ = false;
    space_cv_.notify_all();
    lock.unlock();

    const auto t0 = Clock::now();
    std::exception_ptr failure;
    try {
      commit(batch);
    } catch (...) {
      failure = std::current_exception();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();

    lock.lock();
    if (failure) return stop_on(failure);
    committed_seq_ = seq;
    ++stats_.batches;
    stats_.rows_committed += batch.rows.size();
    stats_.largest_batch = std::max(stats_.largest_batch, batch.rows.size());
    stats_.slowest_commit_s = std::max(stats_.slowest_commit_s, seconds);
    done_cv_.notify_all();
    batch.rows.clear();  // keep the capacity for the next swap
    batch.ops.clear();
  }
}

void RunWriter::commit(Batch& batch) {
  detail::Transaction tx(db_);
  stamp_heartbeat();
  if (!batch.new_keys.empty()) {
    detail::Statement ins = db_.prepare("INSERT OR IGNORE INTO metric_keys (name) VALUES (?)");
    detail::Statement sel = db_.prepare("SELECT id FROM metric_keys WHERE name = ?");
    for (const std::string& name : batch.new_keys) {
      ins.bind(1, name);
      ins.run();
      sel.bind(1, name);
      sel.step();
      db_key_ids_.push_back(sel.int64(0));
      sel.reset();
    }
  }
  if (!batch.rows.empty()) {
    // One chunk row per key (metric_chunks.h): the batch sorted by key, then step. Stable, so
    // that of two values for the same (key, step) the later one is kept.
    std::stable_sort(batch.rows.begin(), batch.rows.end(),
                     [](const MetricRow& a, const MetricRow& b) {
                       return a.key != b.key ? a.key < b.key : a.step < b.step;
                     });
    detail::Statement ins = db_.prepare(detail::chunk_insert_sql());
    std::size_t begin = 0;
    while (begin < batch.rows.size()) {
      const MetricKeyId key = batch.rows[begin].key;
      points_.clear();
      std::size_t end = begin;
      for (; end < batch.rows.size() && batch.rows[end].key == key; ++end) {
        const MetricRow& row = batch.rows[end];
        if (!points_.empty() && points_.back().step == row.step) {
          points_.back() = {row.step, row.value, row.time};
        } else {
          points_.push_back({row.step, row.value, row.time});
        }
      }
      detail::insert_chunks(ins, run_, db_key_ids_[key], points_);
      begin = end;
    }
    std::int64_t max_step = batch.rows.front().step;
    for (const MetricRow& row : batch.rows)
      max_step = std::max(max_step, row.step);
    detail::Statement last =
        db_.prepare("UPDATE runs SET last_step = MAX(COALESCE(last_step, ?1), ?1) WHERE id = ?2");
    last.bind(1, max_step).bind(2, run_);
    last.run();
  }
  for (const Op& op : batch.ops) {
    if (const auto* e = std::get_if<EventOp>(&op)) {
      detail::insert_event(db_, run_, e->time, e->level, e->text);
    } else if (const auto* c = std::get_if<CheckpointOp>(&op)) {
      detail::Statement st = db_.prepare(
          "INSERT INTO checkpoints (run_id, step, path, created_at, metadata) "
          "VALUES (?, ?, ?, ?, ?)");
      st.bind(1, run_).bind(2, c->step).bind(3, c->path).bind(4, c->time).bind(5, c->metadata);
      st.run();
    } else if (const auto* s = std::get_if<StatusOp>(&op)) {
      try {
        detail::change_status(db_, run_, s->status, s->message, s->time, &me_);
      } catch (const ValueError& refused) {
        // Someone else changed the status meanwhile (e.g. another process marked it): keep the
        // metrics of this batch and record why the change did not happen.
        detail::insert_event(
            db_, run_, s->time, EventLevel::kWarning,
            str_cat("status change to '", to_string(s->status), "' not applied: ", refused.what()));
      }
    }
  }
  tx.commit();
}

}  // namespace tb::store
