// TensorBoard event files of a run: what `trainbench-cli export RUN --format tensorboard DIR`
// writes, so that users who keep their history in TensorBoard can open TrainBench runs there.
//
// The file is TensorFlow's TFRecord framing (tensorflow/core/lib/io/record_writer.cc): per
// record the length as uint64 little endian, its masked CRC-32C, the bytes, their masked CRC-32C;
// each record an `Event` protocol buffer (tensorflow/core/util/event.proto): first
// file_version "brain.Event:2", then one event per step holding every metric logged at that step
// as a scalar (Summary.Value.simple_value) with the step's wall time, and the run's config as a
// text summary (plugin "text", a scalar string tensor) at the first step. The messages are
// encoded here directly (varints and length-delimited fields): no protobuf dependency.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tb::store {

class RunStore;

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`: crc32c("123456789") is
/// 0xE3069283.
std::uint32_t crc32c(std::string_view data);

/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
std::uint32_t masked_crc32c(std::string_view data);

/// One TFRecord: length, masked CRC of the length, `data`, masked CRC of `data`.
std::string tfrecord(std::string_view data);

/// The event file's bytes for `run` of `store` (every metric of every step; the config as text).
/// Throws what the store throws for an unknown run.
std::string tensorboard_events(const RunStore& store, std::int64_t run);

/// Writes tensorboard_events() to DIR/events.out.tfevents.CREATED.trainbench-runID (CREATED: the
/// run's creation time in Unix seconds; DIR created if needed) and returns the file's path. A write
/// that fails is a tb::Error naming the file; nothing else in DIR is touched.
std::filesystem::path write_tensorboard(const RunStore& store, std::int64_t run,
                                        const std::filesystem::path& dir);

}  // namespace tb::store
