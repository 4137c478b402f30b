// GGUF v3 writer. Produces files the reader accepts: aligned offsets in declaration order, padding with
// zeros, general.alignment written when it differs from the default.
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/types.h"

namespace minfer::gguf {
namespace {

template <class T>
void put_le(std::vector<uint8_t>& out, T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
    put_le<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct VectorSink {
    std::vector<uint8_t>& out;
    void write(const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); }
};

struct FileSink {
    FILE* fp;
    const std::string& path;
    void write(const uint8_t* p, size_t n) {
        if (n && std::fwrite(p, 1, n, fp) != n) fail(MINFER_ERR_IO, "cannot write '%s': %s", path.c_str(), std::strerror(errno));
    }
};

}  // namespace

void Writer::put(std::string_view key, std::vector<uint8_t> encoded) {
    if (key.empty() || key.size() > kMaxKeyBytes) fail(MINFER_ERR_INVALID_ARGUMENT, "metadata key length %zu is invalid", key.size());
    for (Entry& e : entries_) {
        if (e.key == key) {
            e.encoded = std::move(encoded);
            return;
        }
    }
    entries_.push_back({std::string(key), std::move(encoded)});
}

void Writer::set_scalar(std::string_view key, ValueType t, const void* v, size_t n) {
    std::vector<uint8_t> enc;
    put_le<uint32_t>(enc, static_cast<uint32_t>(t));
    const uint8_t* b = static_cast<const uint8_t*>(v);
    enc.insert(enc.end(), b, b + n);
    put(key, std::move(enc));
}

void Writer::set_string(std::string_view key, std::string_view v) {
    if (v.size() > kMaxStringBytes) fail(MINFER_ERR_INVALID_ARGUMENT, "string value of '%.*s' is too long", int(key.size()), key.data());
    std::vector<uint8_t> enc;
    put_le<uint32_t>(enc, static_cast<uint32_t>(ValueType::STRING));
    put_string(enc, v);
    put(key, std::move(enc));
}

void Writer::set_array(std::string_view key, ValueType elem, const void* bytes, uint64_t count) {
    size_t size = 0;
    switch (elem) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: size = 1; break;
    case ValueType::U16: case ValueType::I16: size = 2; break;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: size = 4; break;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: size = 8; break;
    default: fail(MINFER_ERR_INVALID_ARGUMENT, "set_array: element type %s is not a fixed-size type", value_type_name(elem));
    }
    if (count > kMaxArrayLen) fail(MINFER_ERR_INVALID_ARGUMENT, "array '%.*s' is too long", int(key.size()), key.data());
    std::vector<uint8_t> enc;
    put_le<uint32_t>(enc, static_cast<uint32_t>(ValueType::ARRAY));
    put_le<uint32_t>(enc, static_cast<uint32_t>(elem));
    put_le<uint64_t>(enc, count);
    const uint8_t* b = static_cast<const uint8_t*>(bytes);
    enc.insert(enc.end(), b, b + count * size);
    put(key, std::move(enc));
}

void Writer::set_array_strings(std::string_view key, const std::vector<std::string>& v) {
    if (v.size() > kMaxArrayLen) fail(MINFER_ERR_INVALID_ARGUMENT, "array '%.*s' is too long", int(key.size()), key.data());
    std::vector<uint8_t> enc;
    put_le<uint32_t>(enc, static_cast<uint32_t>(ValueType::ARRAY));
    put_le<uint32_t>(enc, static_cast<uint32_t>(ValueType::STRING));
    put_le<uint64_t>(enc, v.size());
    for (const std::string& s : v) put_string(enc, s);
    put(key, std::move(enc));
}

void Writer::set_alignment(uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kMaxAlignment)
        fail(MINFER_ERR_INVALID_ARGUMENT, "alignment %u is not a power of two up to %u", alignment, kMaxAlignment);
    alignment_ = alignment;
    set_u32("general.alignment", alignment);
}

size_t Writer::add_tensor(std::string_view name, int32_t type, std::span<const int64_t> dims) {
    const quant::TypeInfo& info = quant::type_info(type);
    if (info.block_elems == 0) fail(MINFER_ERR_INVALID_ARGUMENT, "tensor '%.*s': type id %d cannot be written", int(name.size()), name.data(), type);
    if (name.empty() || name.size() > kMaxTensorNameBytes)
        fail(MINFER_ERR_INVALID_ARGUMENT, "tensor name length %zu is invalid", name.size());
    for (const Tensor& t : tensors_)
        if (t.name == name) fail(MINFER_ERR_INVALID_ARGUMENT, "tensor '%.*s' is declared twice", int(name.size()), name.data());
    if (dims.empty() || dims.size() > 4) fail(MINFER_ERR_INVALID_ARGUMENT, "tensor '%.*s' has %zu dimensions", int(name.size()), name.data(), dims.size());
    int64_t n = 1;
    for (int64_t d : dims)
        if (d < 1 || __builtin_mul_overflow(n, d, &n))
            fail(MINFER_ERR_INVALID_ARGUMENT, "tensor '%.*s' has an invalid shape", int(name.size()), name.data());
    if (dims[0] % info.block_elems != 0)
        fail(MINFER_ERR_INVALID_ARGUMENT, "tensor '%.*s': row length %" PRId64 " is not a multiple of the %s block size %d",
             int(name.size()), name.data(), dims[0], info.name, info.block_elems);
    Tensor t{std::string(name), type, std::vector<int64_t>(dims.begin(), dims.end()),
             static_cast<uint64_t>(n / info.block_elems) * static_cast<uint64_t>(info.block_bytes), {}, false};
    tensors_.push_back(std::move(t));
    return tensors_.size() - 1;
}

size_t Writer::add_tensor(std::string_view name, int32_t type, std::span<const int64_t> dims, std::span<const uint8_t> data) {
    size_t i = add_tensor(name, type, dims);
    if (data.size() != tensors_[i].n_bytes) {
        uint64_t expected = tensors_[i].n_bytes;
        tensors_.pop_back();
        fail(MINFER_ERR_INVALID_ARGUMENT, "tensor '%.*s': %zu data bytes given, %" PRIu64 " expected", int(name.size()), name.data(),
             data.size(), expected);
    }
    tensors_[i].data.assign(data.begin(), data.end());
    tensors_[i].has_data = true;
    return i;
}

std::vector<uint8_t> Writer::header() const {
    std::vector<uint8_t> h;
    put_le<uint32_t>(h, 0x46554747u);  // "GGUF" 
    put_le<uint32_t>(h, 3);
    put_le<uint64_t>(h, tensors_.size());
    put_le<uint64_t>(h, entries_.size());
    for (const Entry& e : entries_) {
        put_string(h, e.key);
        h.insert(h.end(), e.encoded.begin(), e.encoded.end());
    }
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
        put_string(h, t.name);
        put_le<uint32_t>(h, static_cast<uint32_t>(t.dims.size()));
        for (int64_t d : t.dims) put_le<uint64_t>(h, static_cast<uint64_t>(d));
        put_le<uint32_t>(h, static_cast<uint32_t>(t.type));
        put_le<uint64_t>(h, offset);
        offset = align_up(offset + t.n_bytes, alignment_);
    }
    h.resize(align_up(h.size(), alignment_), 0);
    return h;
}

template <class Sink>
void Writer::emit(Sink& sink, Fill fill, void* user) const {
    std::vector<uint8_t> h = header();
    sink.write(h.data(), h.size());
    std::vector<uint8_t> buf;
    static const uint8_t zeros[kMaxAlignment > 4096 ? 4096 : kMaxAlignment] = {};
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const Tensor& t = tensors_[i];
        if (t.has_data) {
            sink.write(t.data.data(), t.data.size());
        } else {
            if (!fill) fail(MINFER_ERR_INVALID_ARGUMENT, "tensor '%s' has no data and no fill callback was given", t.name.c_str());
            buf.assign(t.n_bytes, 0);
            fill(user, i, buf.data(), t.n_bytes);
            sink.write(buf.data(), buf.size());
        }
        uint64_t pad = align_up(t.n_bytes, alignment_) - t.n_bytes;
        if (i + 1 == tensors_.size()) pad = 0;  // no trailing padding after the last tensor
        while (pad > 0) {
            size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof zeros));
            sink.write(zeros, n);
            pad -= n;
        }
    }
}

std::vector<uint8_t> Writer::to_bytes(Fill fill, void* user) const {
    std::vector<uint8_t> out;
    VectorSink sink{out};
    emit(sink, fill, user);
    return out;
}

void Writer::write_file(const std::string& path, Fill fill, void* user) const {
    const std::string tmp = path + ".tmp" + std::to_string(::getpid());
    FILE* fp = std::fopen(tmp.c_str(), "wb");
    if (!fp) fail(MINFER_ERR_IO, "cannot create '%s': %s", tmp.c_str(), std::strerror(errno));
    try {
        FileSink sink{fp, tmp};
        emit(sink, fill, user);
        if (std::fflush(fp) != 0) fail(MINFER_ERR_IO, "cannot write '%s': %s", tmp.c_str(), std::strerror(errno));
    } catch (...) {
        std::fclose(fp);
        std::remove(tmp.c_str());
        throw;
    }
    if (std::fclose(fp) != 0) {
        int e = errno;
        std::remove(tmp.c_str());
        fail(MINFER_ERR_IO, "cannot write '%s': %s", tmp.c_str(), std::strerror(e));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        int e = errno;
        std::remove(tmp.c_str());
        fail(MINFER_ERR_IO, "cannot rename '%s' to '%s': %s", tmp.c_str(), path.c_str(), std::strerror(e));
    }
}

}  // namespace minfer::gguf
