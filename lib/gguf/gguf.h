// GGUF files (versions 2 and 3): the reader validates everything before anyone touches a tensor, and the
// writer produces valid files for tests and `minfer synth`.
//
// Layout (little-endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv_count metadata
// pairs (string key, u32 value type, value), tensor_count infos (string name, u32 n_dims, u64 dims[n_dims],
// u32 type, u64 offset), padding to `general.alignment` (default 32), then the tensor data; each offset
// is relative to the data start and a multiple of the alignment. Strings are u64 length + bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace minfer::gguf {

enum class ValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
    U64 = 10, I64 = 11, F64 = 12,
};
const char* value_type_name(ValueType t);
bool is_integer(ValueType t);  // U8..I64 (not BOOL)
bool is_float(ValueType t);    // F32, F64

// Limits that keep hostile files from allocating or looping without bound.
inline constexpr uint64_t kMaxKeyBytes = 65535;
inline constexpr uint64_t kMaxStringBytes = uint64_t{1} << 24;  // 16 MiB
inline constexpr uint64_t kMaxArrayLen = uint64_t{1} << 25;     // 33.5 M elements
inline constexpr uint64_t kMaxTensorNameBytes = 127;
inline constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
inline constexpr uint64_t kMaxKVs = uint64_t{1} << 20;
inline constexpr uint32_t kMaxAlignment = uint32_t{1} << 20;
inline constexpr uint32_t kDefaultAlignment = 32;

struct Value {
    ValueType type = ValueType::U8;
    // Scalars (integers widened; bool as 0/1).
    uint64_t u = 0;   // unsigned integer types and bool
    int64_t i = 0;    // signed integer types
    double f = 0.0;   // F32, F64
    std::string_view str;  // STRING (points into the file)
    // Arrays.
    ValueType elem_type = ValueType::U8;
    uint64_t count = 0;
    const uint8_t* raw = nullptr;            // fixed-size elements, little-endian, count * size bytes
    std::vector<std::string_view> strings;   // STRING elements

    // Integer value of an integer or bool scalar; false if another type or an unsigned value above
    // INT64_MAX.
    bool as_int(int64_t* out) const;
    bool as_float(double* out) const;  // F32 or F64
};

struct KV {
    std::string_view key;
    Value value;
};

struct TensorInfo {
    std::string name;
    int32_t type = 0;
    int n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
    uint64_t offset = 0;           // relative to the data section
    uint64_t n_elems = 0;
    uint64_t n_bytes = 0;
    const uint8_t* data = nullptr;  // points into the file
};

// Backing bytes of a file: a mapping of the file, a copy of it in anonymous memory, or an owned buffer.
class Storage {
public:
    virtual ~Storage() = default;
    virtual const uint8_t* data() const = 0;
    virtual uint64_t size() const = 0;
};
// The bytes of the regular file at `path`: mapped read-only (copy false; a page of the file that
// vanishes while mapped, e.g. because the file is truncated, raises SIGBUS when read), or read into
// process memory (copy true; later changes to the file do not reach it). Anything but a regular file
// (a FIFO, a directory, a device) is refused before it is opened. Throws Error(MINFER_ERR_IO; an empty
// file MINFER_ERR_BAD_MODEL; no memory for the copy MINFER_ERR_OUT_OF_MEMORY).
std::shared_ptr<Storage> load_file(const std::string& path, bool copy);
std::shared_ptr<Storage> copy_bytes(std::span<const uint8_t> bytes);

// A parsed, validated GGUF file. Immutable; views point into the storage, which it keeps alive.
class File {
public:
    // Throws Error(MINFER_ERR_BAD_MODEL or MINFER_ERR_UNSUPPORTED) with a message naming the problem and
    // its byte offset. Never reads outside the storage.
    static std::shared_ptr<const File> parse(std::shared_ptr<Storage> storage);
    static std::shared_ptr<const File> open(const std::string& path, bool copy = false) {
        return parse(load_file(path, copy));
    }

    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // start of the tensor data in the file
    uint64_t size() const { return storage_->size(); }
    const uint8_t* bytes() const { return storage_->data(); }

    const std::vector<KV>& kvs() const { return kvs_; }
    const Value* find(std::string_view key) const;
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find_tensor(std::string_view name) const;

    File(const File&) = delete;  // tensor_index_ views names owned by tensors_
    File& operator=(const File&) = delete;

private:
    File() = default;
    std::shared_ptr<Storage> storage_;
    uint32_t version_ = 0;
    uint32_t alignment_ = kDefaultAlignment;
    uint64_t data_offset_ = 0;
    std::vector<KV> kvs_;
    std::unordered_map<std::string_view, size_t> kv_index_;
    std::vector<TensorInfo> tensors_;
    std::unordered_map<std::string_view, size_t> tensor_index_;
};

// Writes GGUF v3 files. Metadata keeps insertion order; setting a key again replaces its value.
class Writer {
public:
    void set_u8(std::string_view key, uint8_t v) { set_scalar(key, ValueType::U8, &v, 1); }
    void set_i8(std::string_view key, int8_t v) { set_scalar(key, ValueType::I8, &v, 1); }
    void set_u16(std::string_view key, uint16_t v) { set_scalar(key, ValueType::U16, &v, 2); }
    void set_i16(std::string_view key, int16_t v) { set_scalar(key, ValueType::I16, &v, 2); }
    void set_u32(std::string_view key, uint32_t v) { set_scalar(key, ValueType::U32, &v, 4); }
    void set_i32(std::string_view key, int32_t v) { set_scalar(key, ValueType::I32, &v, 4); }
    void set_u64(std::string_view key, uint64_t v) { set_scalar(key, ValueType::U64, &v, 8); }
    void set_i64(std::string_view key, int64_t v) { set_scalar(key, ValueType::I64, &v, 8); }
    void set_f32(std::string_view key, float v) { set_scalar(key, ValueType::F32, &v, 4); }
    void set_f64(std::string_view key, double v) { set_scalar(key, ValueType::F64, &v, 8); }
    void set_bool(std::string_view key, bool v) {
        uint8_t b = v ? 1 : 0;
        set_scalar(key, ValueType::BOOL, &b, 1);
    }
    void set_string(std::string_view key, std::string_view v);
    // Arrays of fixed-size elements: `bytes` holds count little-endian elements of `elem`.
    void set_array(std::string_view key, ValueType elem, const void* bytes, uint64_t count);
    void set_array_strings(std::string_view key, const std::vector<std::string>& v);

    void set_alignment(uint32_t alignment);  // also written as general.alignment when not 32

    // Declares a tensor; its bytes are produced at write time by the fill callback (so a 15 GB model
    // never sits in memory) or given now. Throws Error(MINFER_ERR_INVALID_ARGUMENT) on a bad shape/type.
    size_t add_tensor(std::string_view name, int32_t type, std::span<const int64_t> dims);
    size_t add_tensor(std::string_view name, int32_t type, std::span<const int64_t> dims,
                      std::span<const uint8_t> data);
    uint64_t tensor_bytes(size_t index) const { return tensors_[index].n_bytes; }

    using Fill = void (*)(void* user, size_t tensor_index, uint8_t* dst, uint64_t n_bytes);
    // Writes to `path` atomically (a temporary beside it, then rename). Throws Error(MINFER_ERR_IO).
    void write_file(const std::string& path, Fill fill = nullptr, void* user = nullptr) const;
    std::vector<uint8_t> to_bytes(Fill fill = nullptr, void* user = nullptr) const;

private:
    struct Entry {
        std::string key;
        std::vector<uint8_t> encoded;  // type + value, as in the file
    };
    struct Tensor {
        std::string name;
        int32_t type;
        std::vector<int64_t> dims;
        uint64_t n_bytes;
        std::vector<uint8_t> data;  // empty when filled at write time
        bool has_data;
    };
    void set_scalar(std::string_view key, ValueType t, const void* v, size_t n);
    void put(std::string_view key, std::vector<uint8_t> encoded);
    std::vector<uint8_t> header() const;
    template <class Sink>
    void emit(Sink& sink, Fill fill, void* user) const;

    std::vector<Entry> entries_;
    std::vector<Tensor> tensors_;
    uint32_t alignment_ = kDefaultAlignment;
};

}  // namespace minfer::gguf
