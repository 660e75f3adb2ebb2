// The key-value benchmark's LevelDB driver: LevelDB through its own C++
// API (Debian's libleveldb-dev), one workload, one JSON line of results.
//
//   kv_leveldb --dir DIR --workload fillrandom|readrandom|readwhilewriting
//              --records N --key-bytes K --value-bytes V [--batch 1000]
//              [--sync always|none] [--seed 42] [--reads N] [--seconds T]
//
// The operations, keys and values are those of bench/kv-driver (its module
// docs define them); bench/run.py kv refuses a run in which the engines' GETs
// found different numbers of keys, so a drift between the two drivers shows.
// LevelDB runs with its defaults except: no compression, a 10-bit Bloom
// filter, and as many open files as RocksDB gets. It has one background
// thread of its own and reports no stall time (the JSON says null).

#include <leveldb/cache.h>
#include <leveldb/db.h>
#include <leveldb/filter_policy.h>
#include <leveldb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <vector>

namespace {

struct Args {
  std::string dir;
  std::string workload;
  uint64_t records = 0;
  size_t key_bytes = 0;
  size_t value_bytes = 0;
  size_t batch = 1000;
  bool sync = false;
  uint64_t seed = 42;
  uint64_t reads = 1000000;
  double seconds = 10.0;
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "kv_leveldb: %s\n", what.c_str());
  std::exit(1);
}

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The key of `index`: big-endian, padded with '0' (or its low bytes, for keys under 8 bytes).
void key_of(uint64_t index, char* key, size_t len) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; i++) bytes[i] = static_cast<unsigned char>(index >> (56 - 8 * i));
  if (len >= 8) {
    std::memcpy(key, bytes, 8);
    std::memset(key + 8, '0', len - 8);
  } else {
    std::memcpy(key, bytes + 8 - len, len);
  }
}

// The value of operation `n`: successive splitmix64 words, little-endian.
void value_of(uint64_t n, char* value, size_t len) {
  uint64_t word = splitmix64(n ^ 0xA5A5A5A5A5A5A5A5ULL);
  for (size_t at = 0; at < len; at += 8) {
    unsigned char bytes[8];
    for (int i = 0; i < 8; i++) bytes[i] = static_cast<unsigned char>(word >> (8 * i));
    std::memcpy(value + at, bytes, std::min<size_t>(8, len - at));
    word = splitmix64(word);
  }
}

uint64_t fill_index(uint64_t seed, uint64_t n, uint64_t records) {
  return splitmix64(seed * 0x00000100000001B3ULL + n) % records;
}

uint64_t read_index(uint64_t seed, uint64_t r, uint64_t records) {
  return splitmix64(seed * 0xC2B2AE3D27D4EB4FULL + r) % (2 * records);
}

uint64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Io {
  uint64_t read_bytes = 0;
  uint64_t write_bytes = 0;
};

Io read_io() {
  std::ifstream in("/proc/self/io");
  if (!in) fail("cannot read /proc/self/io");
  Io io;
  std::string name;
  uint64_t value;
  while (in >> name >> value) {
    if (name == "read_bytes:") io.read_bytes = value;
    if (name == "write_bytes:") io.write_bytes = value;
  }
  return io;
}

uint64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

std::string latency_json(std::vector<uint64_t>& samples) {
  if (samples.empty()) return "{\"count\":0}";
  std::sort(samples.begin(), samples.end());
  size_t count = samples.size();
  auto at = [&](double q) { return samples[static_cast<size_t>(q * static_cast<double>(count - 1))]; };
  long double total = 0;
  for (uint64_t ns : samples) total += ns;
  char text[256];
  std::snprintf(text, sizeof text,
                "{\"count\":%zu,\"mean\":%.1f,\"p50\":%" PRIu64 ",\"p99\":%" PRIu64 ",\"p999\":%" PRIu64
                ",\"max\":%" PRIu64 "}",
                count, static_cast<double>(total / count), at(0.50), at(0.99), at(0.999), samples[count - 1]);
  return text;
}

void check(const leveldb::Status& status, const char* what) {
  if (!status.ok()) fail(std::string(what) + ": " + status.ToString());
}

// Puts operations [first, end) in batches (or until `stop`); returns the write latencies.
std::vector<uint64_t> fill(leveldb::DB* db, const Args& args, uint64_t first, uint64_t end,
                           const std::atomic<bool>* stop, std::atomic<uint64_t>& done) {
  std::vector<uint64_t> latencies;
  latencies.reserve(std::min<uint64_t>((end - first) / args.batch + 1, 1ULL << 26));
  leveldb::WriteOptions options;
  options.sync = args.sync;
  std::string key(args.key_bytes, '\0');
  std::string value(args.value_bytes, '\0');
  leveldb::WriteBatch batch;
  for (uint64_t n = first; n < end;) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) break;
    batch.Clear();
    uint64_t batch_end = std::min<uint64_t>(n + args.batch, end);
    for (uint64_t op = n; op < batch_end; op++) {
      key_of(fill_index(args.seed, op, args.records), &key[0], key.size());
      value_of(op, &value[0], value.size());
      batch.Put(key, value);
    }
    uint64_t started = now_ns();
    check(db->Write(options, &batch), "write");
    latencies.push_back(now_ns() - started);
    done.fetch_add(batch_end - n, std::memory_order_relaxed);
    n = batch_end;
  }
  return latencies;
}

struct Reads {
  std::vector<uint64_t> latencies;
  uint64_t hits = 0;
  uint64_t misses = 0;
};

Reads read(leveldb::DB* db, const Args& args, uint64_t count, const std::atomic<bool>* stop) {
  Reads reads;
  reads.latencies.reserve(std::min<uint64_t>(count, 1ULL << 26));
  std::string key(args.key_bytes, '\0');
  std::string value;
  leveldb::ReadOptions options;
  for (uint64_t r = 0; r < count; r++) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) break;
    key_of(read_index(args.seed, r, args.records), &key[0], key.size());
    uint64_t started = now_ns();
    leveldb::Status status = db->Get(options, key, &value);
    reads.latencies.push_back(now_ns() - started);
    if (status.ok()) {
      reads.hits++;
    } else if (status.IsNotFound()) {
      reads.misses++;
    } else {
      check(status, "get");
    }
  }
  return reads;
}

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; i++) {
    std::string flag = argv[i];
    if (i + 1 >= argc) fail("missing a value after " + flag);
    std::string value = argv[++i];
    char* end = nullptr;
    auto number = [&]() {
      uint64_t parsed = std::strtoull(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0') fail("not a number for " + flag + ": " + value);
      return parsed;
    };
    if (flag == "--dir") args.dir = value;
    else if (flag == "--workload") args.workload = value;
    else if (flag == "--records") args.records = number();
    else if (flag == "--key-bytes") args.key_bytes = number();
    else if (flag == "--value-bytes") args.value_bytes = number();
    else if (flag == "--batch") args.batch = number();
    else if (flag == "--seed") args.seed = number();
    else if (flag == "--reads") args.reads = number();
    else if (flag == "--seconds") {
      args.seconds = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(args.seconds >= 0)) fail("not a number of seconds for --seconds: " + value);
    }
    else if (flag == "--sync") {
      if (value != "always" && value != "none") fail("--sync must be always or none, not " + value);
      args.sync = value == "always";
    } else {
      fail("unknown flag " + flag);
    }
  }
  if (args.dir.empty()) fail("--dir is required");
  if (args.workload != "fillrandom" && args.workload != "readrandom" && args.workload != "readwhilewriting")
    fail("--workload must be fillrandom, readrandom or readwhilewriting, not '" + args.workload + "'");
  if (args.batch == 0 || args.records == 0 || args.key_bytes < 4 || args.key_bytes > 1024)
    fail("--batch and --records must be positive and --key-bytes between 4 and 1024");
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  bool create = args.workload == "fillrandom";
  struct stat info;
  if (!create && stat(args.dir.c_str(), &info) != 0) fail(args.dir + " holds no store: run fillrandom first");

  Io before = read_io();
  std::unique_ptr<const leveldb::FilterPolicy> filter(leveldb::NewBloomFilterPolicy(10));
  leveldb::Options options;
  options.create_if_missing = create;
  options.compression = leveldb::kNoCompression;
  options.filter_policy = filter.get();
  options.max_open_files = 10000;
  leveldb::DB* raw = nullptr;
  check(leveldb::DB::Open(options, args.dir, &raw), ("opening LevelDB in " + args.dir).c_str());
  std::unique_ptr<leveldb::DB> db(raw);

  uint64_t started = now_ns();
  std::atomic<uint64_t> done{0};
  std::vector<uint64_t> latencies;
  uint64_t hits = 0, misses = 0, writer_operations = 0;
  if (args.workload == "fillrandom") {
    latencies = fill(db.get(), args, 0, args.records, nullptr, done);
    writer_operations = args.records;
  } else if (args.workload == "readrandom") {
    Reads reads = read(db.get(), args, args.reads, nullptr);
    latencies = std::move(reads.latencies);
    hits = reads.hits;
    misses = reads.misses;
  } else {
    std::atomic<bool> stop{false};
    std::vector<uint64_t> ignored;
    std::thread writer([&] { ignored = fill(db.get(), args, args.records, UINT64_MAX, &stop, done); });
    Reads reads;
    std::thread reader([&] { reads = read(db.get(), args, UINT64_MAX, &stop); });
    std::this_thread::sleep_for(std::chrono::duration<double>(args.seconds));
    stop.store(true);
    writer.join();
    reader.join();
    latencies = std::move(reads.latencies);
    hits = reads.hits;
    misses = reads.misses;
    writer_operations = done.load();
  }
  double seconds = static_cast<double>(now_ns() - started) / 1e9;
  std::string memory;
  db->GetProperty("leveldb.approximate-memory-usage", &memory);
  db.reset();  // closes the store
  Io after = read_io();

  uint64_t operations = args.workload == "fillrandom" ? args.records : latencies.size();
  uint64_t user_bytes = args.workload == "readrandom" ? 0 : writer_operations * (args.key_bytes + args.value_bytes);
  std::printf(
      "{\"engine\":\"leveldb\",\"workload\":\"%s\",\"records\":%" PRIu64 ",\"key_bytes\":%zu,\"value_bytes\":%zu,"
      "\"batch\":%zu,\"sync\":\"%s\",\"operations\":%" PRIu64 ",\"seconds\":%.6f,\"operations_per_second\":%.3f,"
      "\"latency_ns\":%s,\"hits\":%" PRIu64 ",\"misses\":%" PRIu64 ",\"writer_operations\":%" PRIu64
      ",\"read_bytes\":%" PRIu64 ",\"write_bytes\":%" PRIu64 ",\"user_bytes\":%" PRIu64 ",\"peak_rss_bytes\":%" PRIu64
      ",\"stall_seconds\":null,\"engine_stats\":{\"approximate_memory_bytes\":%s}}\n",
      args.workload.c_str(), args.records, args.key_bytes, args.value_bytes, args.batch, args.sync ? "always" : "none",
      operations, seconds, static_cast<double>(operations) / seconds, latency_json(latencies).c_str(), hits, misses,
      writer_operations, after.read_bytes - before.read_bytes, after.write_bytes - before.write_bytes, user_bytes,
      peak_rss_bytes(), memory.empty() ? "null" : memory.c_str());
  return 0;
}
