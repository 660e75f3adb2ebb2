// Group-by-key aggregation peer built on Google sparsehash (google::sparse_hash_map).
//
//     g++ -O2 -std=c++17 -pthread bench/agg_sparsehash.cc -o agg_sparsehash
//     agg_sparsehash DIR
//
// DIR holds a generated aggregation input:
//   meta.json   {"shape": "int" | "bytes", "records": N, ...}
//   values.i64  N little-endian int64 values
//   keys.u64    (shape "int")   N little-endian uint64 keys
//   keys.off    (shape "bytes") N+1 little-endian uint64 offsets into keys.dat, from 0 to its size
//   keys.dat    (shape "bytes") the key bytes, key i is keys.dat[off[i]..off[i+1]]
//
// Computes, per distinct key, sum(value) and count(*), and prints one JSON line:
//   {"engine": "sparsehash", "groups": G, "sum_of_sums": S, "sum_of_counts": C,
//    "count_squares": Q, "sum_squares": R, "load_s": 0, "aggregate_s": A}
// where Q and R are the sums over groups of count^2 and sum^2, in wrapping unsigned 64-bit
// arithmetic (the sum taken as unsigned 64-bit).
//
// Every key is a byte string (an "int" key is its 8 little-endian bytes), as in the other
// native drivers of the benchmark. Two threads split the keys by hash: each one streams the
// whole input itself, in chunks of CHUNK_RECORDS records read into reused buffers, and
// aggregates only the keys of its half into its own map. The input is never held in memory at
// once, so peak RSS is the hash tables' plus a fixed cost for the buffers, independent of the
// input's size: per thread, 8 bytes per record of a chunk for values and for keys (or offsets),
// and for "bytes" keys the chunk's key bytes (CHUNK_RECORDS times the mean key length).
// Reading is interleaved with aggregation, so it is all counted in aggregate_s (from starting
// the threads to the last one finishing its stream) and load_s is 0.
// Folding the two maps into the summary fields is not timed.

#include <sparsehash/sparse_hash_map>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "values.i64 and keys.u64 are read as native integers");

namespace {

constexpr int THREADS = 2;
constexpr uint64_t CHUNK_RECORDS = 1000000;
using Clock = std::chrono::steady_clock;

struct State {
    int64_t sum = 0;
    uint64_t count = 0;
};

using KeyHash = std::hash<std::string>;
using Map = google::sparse_hash_map<std::string, State, KeyHash>;

// A failure with its message, carried out of the worker threads.
struct Failure {
    std::string message;
};

[[noreturn]] void fail(const std::string& message) { throw Failure{message}; }

std::string errno_text() { return std::strerror(errno); }

enum class Shape { Int, Bytes };

struct Meta {
    Shape shape;
    uint64_t records;
};

// The raw text of a top-level field's value in a flat JSON object (enough for meta.json).
std::string json_field(const std::string& text, const std::string& path, const std::string& name) {
    const std::string quoted = "\"" + name + "\"";
    size_t at = text.find(quoted);
    if (at == std::string::npos) fail(path + ": no \"" + name + "\" field");
    at = text.find_first_not_of(" \t\r\n", at + quoted.size());
    if (at == std::string::npos || text[at] != ':') fail(path + ": malformed \"" + name + "\" field");
    at = text.find_first_not_of(" \t\r\n", at + 1);
    if (at == std::string::npos) fail(path + ": malformed \"" + name + "\" field");
    if (text[at] == '"') {
        size_t end = text.find('"', at + 1);
        if (end == std::string::npos) fail(path + ": malformed \"" + name + "\" field");
        return text.substr(at + 1, end - at - 1);
    }
    size_t end = text.find_first_of(",}] \t\r\n", at);
    return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

Meta read_meta(const std::string& dir) {
    const std::string path = dir + "/meta.json";
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path + ": cannot open: " + errno_text());
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string text = buffer.str();

    Meta meta{};
    const std::string shape = json_field(text, path, "shape");
    if (shape == "int") {
        meta.shape = Shape::Int;
    } else if (shape == "bytes") {
        meta.shape = Shape::Bytes;
    } else {
        fail(path + ": unknown shape \"" + shape + "\" (expected \"int\" or \"bytes\")");
    }
    const std::string records = json_field(text, path, "records");
    if (records.empty() || records.find_first_not_of("0123456789") != std::string::npos)
        fail(path + ": \"records\" is not a non-negative integer: " + records);
    errno = 0;
    char* end = nullptr;
    meta.records = std::strtoull(records.c_str(), &end, 10);
    if (errno != 0 || *end != '\0') fail(path + ": \"records\" is out of range: " + records);
    return meta;
}

// A read-only file, read with pread at explicit offsets (so threads never share a position).
class File {
  public:
    explicit File(std::string path) : path_(std::move(path)) {
        fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd_ < 0) fail(path_ + ": cannot open: " + errno_text());
        struct stat st {};
        if (::fstat(fd_, &st) != 0) {
            const std::string why = errno_text();
            ::close(fd_);
            fail(path_ + ": cannot stat: " + why);
        }
        size_ = static_cast<uint64_t>(st.st_size);
        ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    ~File() { ::close(fd_); }

    uint64_t size() const { return size_; }
    const std::string& path() const { return path_; }

    // Reads exactly `length` bytes at `offset` into `into`.
    void read_at(uint64_t offset, void* into, uint64_t length) const {
        char* cursor = static_cast<char*>(into);
        while (length > 0) {
            const ssize_t got = ::pread(fd_, cursor, length, static_cast<off_t>(offset));
            if (got < 0) {
                if (errno == EINTR) continue;
                fail(path_ + ": read failed: " + errno_text());
            }
            if (got == 0) fail(path_ + ": unexpected end of file");
            cursor += got;
            offset += static_cast<uint64_t>(got);
            length -= static_cast<uint64_t>(got);
        }
    }

    uint64_t u64_at(uint64_t index) const {
        unsigned char raw[8];
        read_at(index * 8, raw, 8);
        return little_u64(raw);
    }

    static uint64_t little_u64(const unsigned char* raw) {
        uint64_t value = 0;
        for (int i = 7; i >= 0; --i) value = (value << 8) | raw[i];
        return value;
    }

  private:
    std::string path_;
    int fd_ = -1;
    uint64_t size_ = 0;
};

void expect_size(const File& file, uint64_t expected, const char* what, uint64_t records) {
    if (file.size() != expected)
        fail(file.path() + ": " + std::to_string(file.size()) + " bytes, expected " + std::to_string(expected) +
             " (" + what + " for " + std::to_string(records) + " records in meta.json)");
}

// Checks that the files agree with meta.json before any thread starts.
void check_input(const std::string& dir, const Meta& meta) {
    const uint64_t n = meta.records;
    if (n > (UINT64_MAX / 8) - 1) fail(dir + "/meta.json: too many records");
    File values(dir + "/values.i64");
    expect_size(values, n * 8, "8 bytes per value", n);
    if (meta.shape == Shape::Int) {
        File keys(dir + "/keys.u64");
        expect_size(keys, n * 8, "8 bytes per key", n);
    } else {
        File offsets(dir + "/keys.off");
        File data(dir + "/keys.dat");
        expect_size(offsets, (n + 1) * 8, "8 bytes per offset, one more than the records", n);
        if (offsets.u64_at(0) != 0) fail(offsets.path() + ": the first offset is not 0");
        const uint64_t last = offsets.u64_at(n);
        if (last != data.size())
            fail(offsets.path() + ": the last offset is " + std::to_string(last) + " but " + data.path() + " has " +
                 std::to_string(data.size()) + " bytes");
    }
}

// Which thread owns a key: one bit of its hash. A high bit rather than hash % 2, because the map
// indexes its buckets with the hash's low bits, and a partition on the lowest bit would leave every
// key of a map starting its probe on the same half of the buckets.
// The hash is std::hash<std::string_view> of the key's bytes, which the standard makes equal to the
// map's std::hash<std::string> of the same bytes, without building a string for keys we skip.
inline int owner(size_t hash) { return static_cast<int>((hash >> (sizeof(size_t) * 8 - 1)) & 1); }

struct Summary {
    uint64_t groups = 0;
    int64_t sum_of_sums = 0;
    uint64_t sum_of_counts = 0;
    uint64_t count_squares = 0;
    uint64_t sum_squares = 0;
};

struct Worker {
    int index = 0;
    Map map;
    Clock::time_point finished;
    bool failed = false;
    std::string error;
};

inline void add(Map& map, std::string& key, const char* bytes, size_t length, int64_t value) {
    key.assign(bytes, length);
    State& state = map[key];
    state.sum += value;
    state.count += 1;
}

void aggregate(const std::string& dir, const Meta& meta, Worker& worker) {
    const int me = worker.index;
    const uint64_t n = meta.records;
    File values(dir + "/values.i64");
    std::vector<int64_t> value_chunk(static_cast<size_t>(std::min(n, CHUNK_RECORDS)));
    std::string key;

    if (meta.shape == Shape::Int) {
        File keys(dir + "/keys.u64");
        std::vector<char> key_chunk(value_chunk.size() * 8);
        for (uint64_t first = 0; first < n; first += CHUNK_RECORDS) {
            const uint64_t count = std::min(CHUNK_RECORDS, n - first);
            keys.read_at(first * 8, key_chunk.data(), count * 8);
            values.read_at(first * 8, value_chunk.data(), count * 8);
            for (uint64_t i = 0; i < count; ++i) {
                const char* bytes = key_chunk.data() + i * 8;
                if (owner(std::hash<std::string_view>{}(std::string_view(bytes, 8))) != me) continue;
                add(worker.map, key, bytes, 8, value_chunk[i]);
            }
        }
    } else {
        File offsets(dir + "/keys.off");
        File data(dir + "/keys.dat");
        std::vector<uint64_t> bounds(value_chunk.size() + 1);
        std::vector<char> key_chunk;
        for (uint64_t first = 0; first < n; first += CHUNK_RECORDS) {
            const uint64_t count = std::min(CHUNK_RECORDS, n - first);
            offsets.read_at(first * 8, bounds.data(), (count + 1) * 8);
            for (uint64_t i = 1; i <= count; ++i) {
                if (bounds[i] < bounds[i - 1])
                    fail(offsets.path() + ": offsets decrease at record " + std::to_string(first + i - 1));
            }
            const uint64_t start = bounds[0];
            const uint64_t length = bounds[count] - start;
            if (bounds[count] > data.size())
                fail(offsets.path() + ": offset " + std::to_string(bounds[count]) + " is past the end of " +
                     data.path());
            if (key_chunk.size() < length) key_chunk.resize(length);
            data.read_at(start, key_chunk.data(), length);
            values.read_at(first * 8, value_chunk.data(), count * 8);
            for (uint64_t i = 0; i < count; ++i) {
                const char* bytes = key_chunk.data() + (bounds[i] - start);
                const size_t size = static_cast<size_t>(bounds[i + 1] - bounds[i]);
                if (owner(std::hash<std::string_view>{}(std::string_view(bytes, size))) != me) continue;
                add(worker.map, key, bytes, size, value_chunk[i]);
            }
        }
    }
}

Summary summarize(const Map& map) {
    Summary summary;
    for (const auto& entry : map) {
        const State& state = entry.second;
        summary.groups += 1;
        summary.sum_of_sums += state.sum;
        summary.sum_of_counts += state.count;
        summary.count_squares += state.count * state.count;
        const uint64_t sum = static_cast<uint64_t>(state.sum);
        summary.sum_squares += sum * sum;
    }
    return summary;
}

int run(const std::string& dir) {
    const Meta meta = read_meta(dir);
    check_input(dir, meta);

    std::vector<Worker> workers(THREADS);
    const Clock::time_point started = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < THREADS; ++t) {
        workers[t].index = t;
        threads.emplace_back([&dir, &meta, &worker = workers[t]] {
            try {
                aggregate(dir, meta, worker);
            } catch (const Failure& failure) {
                worker.failed = true;
                worker.error = failure.message;
            } catch (const std::exception& error) {
                worker.failed = true;
                worker.error = std::string("aggregation failed: ") + error.what();
            }
            worker.finished = Clock::now();
        });
    }
    for (std::thread& thread : threads) thread.join();
    Clock::time_point finished = started;
    for (const Worker& worker : workers) {
        if (worker.failed) fail(worker.error);
        finished = std::max(finished, worker.finished);
    }
    const double aggregate_s = std::chrono::duration<double>(finished - started).count();

    Summary total;
    for (const Worker& worker : workers) {
        const Summary part = summarize(worker.map);
        total.groups += part.groups;
        total.sum_of_sums += part.sum_of_sums;
        total.sum_of_counts += part.sum_of_counts;
        total.count_squares += part.count_squares;
        total.sum_squares += part.sum_squares;
    }
    if (total.sum_of_counts != meta.records)
        fail("internal error: counted " + std::to_string(total.sum_of_counts) + " records, expected " +
             std::to_string(meta.records));

    std::printf(
        "{\"engine\": \"sparsehash\", \"groups\": %" PRIu64 ", \"sum_of_sums\": %" PRId64
        ", \"sum_of_counts\": %" PRIu64 ", \"count_squares\": %" PRIu64 ", \"sum_squares\": %" PRIu64
        ", \"load_s\": 0.0, \"aggregate_s\": %.6f}\n",
        total.groups, total.sum_of_sums, total.sum_of_counts, total.count_squares, total.sum_squares, aggregate_s);
    std::fflush(stdout);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s DIR\n", argc > 0 ? argv[0] : "agg_sparsehash");
        return 2;
    }
    try {
        return run(argv[1]);
    } catch (const Failure& failure) {
        std::fprintf(stderr, "agg_sparsehash: %s\n", failure.message.c_str());
        return 1;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "agg_sparsehash: %s\n", error.what());
        return 1;
    }
}
