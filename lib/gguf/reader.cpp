// GGUF reader: every length, count and offset is checked against the bytes that remain before it is
// used, so a hostile file yields Error(MINFER_ERR_BAD_MODEL) with the offset of the problem, never an
// out-of-bounds read, a huge allocation or a division by zero.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/types.h"

namespace minfer::gguf {
namespace {

class MappedFile final : public Storage {
public:
    MappedFile(void* p, uint64_t n) : p_(p), n_(n) {}
    ~MappedFile() override {
        if (p_) munmap(p_, n_);
    }
    const uint8_t* data() const override { return static_cast<const uint8_t*>(p_); }
    uint64_t size() const override { return n_; }

private:
    void* p_;
    uint64_t n_;
};

class OwnedBytes final : public Storage {
public:
    explicit OwnedBytes(std::span<const uint8_t> b) : b_(b.begin(), b.end()) {}
    const uint8_t* data() const override { return b_.data(); }
    uint64_t size() const override { return b_.size(); }

private:
    std::vector<uint8_t> b_;
};

size_t scalar_size(ValueType t) {
    switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    default: return 0;
    }
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::F64); }

// Bounds-checked little-endian cursor over the file.
struct Cursor {
    const uint8_t* base;
    uint64_t size;
    uint64_t pos = 0;

    uint64_t remaining() const { return size - pos; }

    void need(uint64_t n, const char* what) const {
        if (n > remaining())
            fail(MINFER_ERR_BAD_MODEL, "truncated file: %s at offset %" PRIu64 " needs %" PRIu64 " bytes, %" PRIu64 " remain",
                 what, pos, n, remaining());
    }
    template <class T>
    T read(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, base + pos, sizeof(T));
        pos += sizeof(T);
        return v;
    }
    std::string_view string(const char* what, uint64_t cap) {
        uint64_t at = pos;
        uint64_t len = read<uint64_t>(what);
        if (len > cap)
            fail(MINFER_ERR_BAD_MODEL, "%s at offset %" PRIu64 " has length %" PRIu64 ", above the limit of %" PRIu64, what, at,
                 len, cap);
        need(len, what);
        std::string_view s(reinterpret_cast<const char*>(base + pos), len);
        pos += len;
        return s;
    }
};

std::string printable(std::string_view s) {
    std::string out;
    for (char c : s.substr(0, 80)) {
        unsigned char u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f || u == '\\')
            out += strprintf("\\x%02x", u);
        else
            out += c;
    }
    if (s.size() > 80) out += "...";
    return out;
}

void read_value(Cursor& c, ValueType t, Value& v, std::string_view key) {
    v.type = t;
    const std::string k = printable(key);
    switch (t) {
    case ValueType::U8: v.u = c.read<uint8_t>("value"); break;
    case ValueType::I8: v.i = c.read<int8_t>("value"); break;
    case ValueType::U16: v.u = c.read<uint16_t>("value"); break;
    case ValueType::I16: v.i = c.read<int16_t>("value"); break;
    case ValueType::U32: v.u = c.read<uint32_t>("value"); break;
    case ValueType::I32: v.i = c.read<int32_t>("value"); break;
    case ValueType::U64: v.u = c.read<uint64_t>("value"); break;
    case ValueType::I64: v.i = c.read<int64_t>("value"); break;
    case ValueType::F32: v.f = c.read<float>("value"); break;
    case ValueType::F64: v.f = c.read<double>("value"); break;
    case ValueType::BOOL: {
        uint64_t at = c.pos;
        v.u = c.read<uint8_t>("value");
        if (v.u > 1)
            fail(MINFER_ERR_BAD_MODEL, "key '%s': bool value %" PRIu64 " at offset %" PRIu64 " is neither 0 nor 1", k.c_str(), v.u,
                 at);
        break;
    }
    case ValueType::STRING: v.str = c.string("string value", kMaxStringBytes); break;
    case ValueType::ARRAY: {
        uint64_t at = c.pos;
        uint32_t et = c.read<uint32_t>("array element type");
        if (et == static_cast<uint32_t>(ValueType::ARRAY))
            fail(MINFER_ERR_BAD_MODEL, "key '%s': nested arrays are not supported (offset %" PRIu64 ")", k.c_str(), at);
        if (!valid_type(et))
            fail(MINFER_ERR_BAD_MODEL, "key '%s': unknown array element type %u at offset %" PRIu64, k.c_str(), et, at);
        v.elem_type = static_cast<ValueType>(et);
        at = c.pos;
        v.count = c.read<uint64_t>("array length");
        if (v.count > kMaxArrayLen)
            fail(MINFER_ERR_BAD_MODEL, "key '%s': array length %" PRIu64 " at offset %" PRIu64 " is above the limit of %" PRIu64,
                 k.c_str(), v.count, at, kMaxArrayLen);
        if (v.elem_type == ValueType::STRING) {
            // Each string takes at least its 8-byte length: reject impossible counts before allocating.
            if (v.count > c.remaining() / 8)
                fail(MINFER_ERR_BAD_MODEL, "key '%s': array of %" PRIu64 " strings at offset %" PRIu64 " cannot fit in the %" PRIu64
                     " bytes left", k.c_str(), v.count, at, c.remaining());
            v.strings.reserve(v.count);
            for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(c.string("array string", kMaxStringBytes));
        } else {
            uint64_t n = v.count * scalar_size(v.elem_type);  // no overflow: count <= 2^25, size <= 8
            c.need(n, "array data");
            v.raw = c.base + c.pos;
            if (v.elem_type == ValueType::BOOL)
                for (uint64_t i = 0; i < v.count; ++i)
                    if (v.raw[i] > 1)
                        fail(MINFER_ERR_BAD_MODEL, "key '%s': bool element %" PRIu64 " is neither 0 nor 1", k.c_str(), i);
            c.pos += n;
        }
        break;
    }
    }
}

}  // namespace

const char* value_type_name(ValueType t) {
    static const char* const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
    uint32_t i = static_cast<uint32_t>(t);
    return i < sizeof names / sizeof names[0] ? names[i] : "unknown";
}

bool is_integer(ValueType t) {
    switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16: case ValueType::U32:
    case ValueType::I32: case ValueType::U64: case ValueType::I64: return true;
    default: return false;
    }
}

bool is_float(ValueType t) { return t == ValueType::F32 || t == ValueType::F64; }

bool Value::as_int(int64_t* out) const {
    switch (type) {
    case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64: *out = i; return true;
    case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64: case ValueType::BOOL:
        if (u > static_cast<uint64_t>(INT64_MAX)) return false;
        *out = static_cast<int64_t>(u);
        return true;
    default: return false;
    }
}

bool Value::as_float(double* out) const {
    if (!is_float(type)) return false;
    *out = f;
    return true;
}

namespace {

// What a path that is not a regular file is, for the message.
const char* file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "another kind of file";
}

[[noreturn]] void not_regular(const std::string& path, mode_t mode) {
    fail(MINFER_ERR_IO, "cannot open '%s': it is not a regular file but %s", path.c_str(), file_kind(mode));
}

// Reads n bytes from fd into dst; throws Error(MINFER_ERR_IO) on a read error or when the file ends early.
void read_all(int fd, const std::string& path, uint8_t* dst, uint64_t n) {
    uint64_t done = 0;
    while (done < n) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(n - done, uint64_t{1} << 30));
        const ssize_t got = ::pread(fd, dst + done, want, static_cast<off_t>(done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) fail(MINFER_ERR_IO, "cannot read '%s' at offset %" PRIu64 ": %s", path.c_str(), done, std::strerror(errno));
        if (got == 0)
            fail(MINFER_ERR_IO, "cannot read '%s': the file ended at offset %" PRIu64 " of %" PRIu64 " (did it shrink while loading?)",
                 path.c_str(), done, n);
        done += static_cast<uint64_t>(got);
    }
}

// Takes ownership of a mapping of `size` bytes at p (unmapped if even that fails).
std::shared_ptr<Storage> adopt(void* p, uint64_t size) {
    try {
        return std::make_shared<MappedFile>(p, size);
    } catch (...) {
        munmap(p, static_cast<size_t>(size));
        throw;
    }
}

// Asks for 2 MiB pages (transparent huge pages; the kernel's "madvise" mode gives them only on request):
// the CPU backend streams every weight row once per matmul, and on 4 KiB pages each page's first read
// missed the TLB and stopped the hardware prefetcher. For the file mapping the page cache's read-ahead
// then fills large folios that map whole, where the file system has them (ext4 on Linux 6.18: 488 of
// 504 MiB of a q8_0 file read fresh, 374 without the advice). Advice only: nothing fails without it.
void huge_pages(void* p, uint64_t size) {
#ifdef MADV_HUGEPAGE
    madvise(p, static_cast<size_t>(size), MADV_HUGEPAGE);
#else
    (void)p, (void)size;
#endif
}

}  // namespace

std::shared_ptr<Storage> load_file(const std::string& path, bool copy) {
    // Refuse what is not a regular file before opening it: opening a FIFO blocks until a writer comes,
    // and opening a device can have effects of its own. The open itself is non-blocking, and the check
    // is repeated on the descriptor, for a path that changes in between.
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) fail(MINFER_ERR_IO, "cannot open '%s': %s", path.c_str(), std::strerror(errno));
    if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) fail(MINFER_ERR_IO, "cannot open '%s': %s", path.c_str(), std::strerror(errno));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    if (fstat(fd, &st) != 0) fail(MINFER_ERR_IO, "cannot stat '%s': %s", path.c_str(), std::strerror(errno));
    if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
    // Reads of a regular file block as usual.
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
        fail(MINFER_ERR_IO, "cannot open '%s': fcntl: %s", path.c_str(), std::strerror(errno));
    if (st.st_size == 0) fail(MINFER_ERR_BAD_MODEL, "%s: the file is empty, not a GGUF file", path.c_str());
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size > std::numeric_limits<size_t>::max())
        fail(MINFER_ERR_IO, "cannot map '%s': %" PRIu64 " bytes do not fit in the address space", path.c_str(), size);
    if (!copy) {
        void* p = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) fail(MINFER_ERR_IO, "cannot map '%s': %s", path.c_str(), std::strerror(errno));
        huge_pages(p, size);
        return adopt(p, size);
    }
    // A private anonymous mapping: page-aligned like the file mapping, and zero pages are not written
    // twice (the read fills them).
    void* p = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        fail(MINFER_ERR_OUT_OF_MEMORY, "cannot allocate %" PRIu64 " bytes to copy '%s' into: %s", size, path.c_str(), std::strerror(errno));
    auto storage = adopt(p, size);  // unmaps on a failed read
    huge_pages(p, size);
    read_all(fd, path, static_cast<uint8_t*>(p), size);
    if (mprotect(p, static_cast<size_t>(size), PROT_READ) != 0)
        fail(MINFER_ERR_IO, "cannot make the copy of '%s' read-only: %s", path.c_str(), std::strerror(errno));
    return storage;
}

std::shared_ptr<Storage> copy_bytes(std::span<const uint8_t> bytes) { return std::make_shared<OwnedBytes>(bytes); }

const Value* File::find(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::shared_ptr<const File> File::parse(std::shared_ptr<Storage> storage) {
    std::shared_ptr<File> f(new File());
    f->storage_ = std::move(storage);
    Cursor c{f->storage_->data(), f->storage_->size()};

    // Header.
    if (c.size < 4 || std::memcmp(c.base, "GGUF", 4) != 0) {
        std::string got = printable(std::string_view(reinterpret_cast<const char*>(c.base), std::min<uint64_t>(c.size, 4)));
        fail(MINFER_ERR_BAD_MODEL, "bad magic: expected 'GGUF', found '%s' (not a GGUF file)", got.c_str());
    }
    c.pos = 4;
    f->version_ = c.read<uint32_t>("version");
    if (f->version_ == 1)
        fail(MINFER_ERR_UNSUPPORTED, "GGUF version 1 is not supported (versions 2 and 3 are); convert the file again");
    if (f->version_ == 0x02000000u || f->version_ == 0x03000000u)
        fail(MINFER_ERR_UNSUPPORTED, "big-endian GGUF files are not supported");
    if (f->version_ != 2 && f->version_ != 3)
        fail(MINFER_ERR_BAD_MODEL, "unknown GGUF version %u at offset 4 (versions 2 and 3 are supported)", f->version_);
    uint64_t n_tensors = c.read<uint64_t>("tensor count");
    uint64_t n_kv = c.read<uint64_t>("metadata count");
    // The smallest KV is 8 (key length) + 1 (key) + 4 (type) + 1 (u8 value) bytes; the smallest tensor
    // info is 8 + 1 + 4 + 8 + 4 + 8.
    if (n_kv > kMaxKVs || n_kv > c.remaining() / 14)
        fail(MINFER_ERR_BAD_MODEL, "metadata count %" PRIu64 " at offset 16 is larger than the file could hold", n_kv);
    if (n_tensors > kMaxTensors || n_tensors > c.remaining() / 33)
        fail(MINFER_ERR_BAD_MODEL, "tensor count %" PRIu64 " at offset 8 is larger than the file could hold", n_tensors);

    // Metadata.
    f->kvs_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
        uint64_t at = c.pos;
        std::string_view key = c.string("metadata key", kMaxKeyBytes);
        if (key.empty()) fail(MINFER_ERR_BAD_MODEL, "metadata key %" PRIu64 " at offset %" PRIu64 " is empty", i, at);
        uint64_t type_at = c.pos;
        uint32_t t = c.read<uint32_t>("value type");
        if (!valid_type(t))
            fail(MINFER_ERR_BAD_MODEL, "key '%s': unknown value type %u at offset %" PRIu64, printable(key).c_str(), t, type_at);
        KV kv;
        kv.key = key;
        read_value(c, static_cast<ValueType>(t), kv.value, key);
        if (!f->kv_index_.emplace(key, f->kvs_.size()).second)
            fail(MINFER_ERR_BAD_MODEL, "duplicate metadata key '%s' at offset %" PRIu64, printable(key).c_str(), at);
        f->kvs_.push_back(std::move(kv));
    }

    if (const Value* a = f->find("general.alignment")) {
        if (a->type != ValueType::U32)
            fail(MINFER_ERR_BAD_MODEL, "key 'general.alignment' has type %s, expected u32", value_type_name(a->type));
        if (a->u == 0 || (a->u & (a->u - 1)) != 0)
            fail(MINFER_ERR_BAD_MODEL, "general.alignment = %" PRIu64 " is not a power of two", a->u);
        if (a->u > kMaxAlignment)
            fail(MINFER_ERR_BAD_MODEL, "general.alignment = %" PRIu64 " is above the limit of %u", a->u, kMaxAlignment);
        f->alignment_ = static_cast<uint32_t>(a->u);
    }

    // Tensor infos.
    f->tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        uint64_t at = c.pos;
        TensorInfo ti;
        std::string_view name = c.string("tensor name", kMaxTensorNameBytes);
        if (name.empty()) fail(MINFER_ERR_BAD_MODEL, "tensor %" PRIu64 " at offset %" PRIu64 " has an empty name", i, at);
        ti.name = std::string(name);
        const std::string pn = printable(name);
        uint32_t n_dims = c.read<uint32_t>("tensor n_dims");
        if (n_dims == 0 || n_dims > 4)
            fail(MINFER_ERR_BAD_MODEL, "tensor '%s': n_dims = %u, expected 1 to 4", pn.c_str(), n_dims);
        ti.n_dims = static_cast<int>(n_dims);
        int64_t n_elems = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            uint64_t dim = c.read<uint64_t>("tensor dimension");
            if (dim == 0 || dim > static_cast<uint64_t>(INT64_MAX))
                fail(MINFER_ERR_BAD_MODEL, "tensor '%s': dimension %u is %" PRId64 ", expected at least 1", pn.c_str(), d,
                     static_cast<int64_t>(dim));
            ti.ne[d] = static_cast<int64_t>(dim);
            if (__builtin_mul_overflow(n_elems, ti.ne[d], &n_elems))
                fail(MINFER_ERR_BAD_MODEL, "tensor '%s': element count overflows 64 bits", pn.c_str());
        }
        uint64_t type_at = c.pos;
        uint32_t type = c.read<uint32_t>("tensor type");
        const quant::TypeInfo& info = quant::type_info(static_cast<int32_t>(std::min<uint32_t>(type, INT32_MAX)));
        if (info.status == quant::TypeStatus::unknown)
            fail(MINFER_ERR_BAD_MODEL, "tensor '%s': unknown type id %u at offset %" PRIu64, pn.c_str(), type, type_at);
        if (info.status == quant::TypeStatus::removed)
            fail(MINFER_ERR_BAD_MODEL, "tensor '%s': type id %u (%s) was removed from the GGUF format", pn.c_str(), type,
                 info.name);
        ti.type = static_cast<int32_t>(type);
        if (ti.ne[0] % info.block_elems != 0)
            fail(MINFER_ERR_BAD_MODEL, "tensor '%s': row length %" PRId64 " is not a multiple of the %s block size %d", pn.c_str(),
                 ti.ne[0], info.name, info.block_elems);
        int64_t n_bytes = 0;
        if (__builtin_mul_overflow(n_elems / info.block_elems, static_cast<int64_t>(info.block_bytes), &n_bytes))
            fail(MINFER_ERR_BAD_MODEL, "tensor '%s': byte size overflows 64 bits", pn.c_str());
        ti.n_elems = static_cast<uint64_t>(n_elems);
        ti.n_bytes = static_cast<uint64_t>(n_bytes);
        ti.offset = c.read<uint64_t>("tensor offset");
        if (ti.offset % f->alignment_ != 0)
            fail(MINFER_ERR_BAD_MODEL, "tensor '%s': data offset %" PRIu64 " is not a multiple of the alignment %u", pn.c_str(),
                 ti.offset, f->alignment_);
        f->tensors_.push_back(std::move(ti));
    }
    // The index keys view the names held by tensors_, which no longer grows; reject duplicates.
    for (size_t i = 0; i < f->tensors_.size(); ++i) {
        const std::string& name = f->tensors_[i].name;
        if (!f->tensor_index_.emplace(std::string_view(name), i).second)
            fail(MINFER_ERR_BAD_MODEL, "duplicate tensor name '%s'", printable(name).c_str());
    }

    // Data section.
    uint64_t data = c.pos;
    uint64_t rem = data % f->alignment_;
    if (rem != 0) data += f->alignment_ - rem;  // no overflow: pos <= size and alignment <= 2^20
    f->data_offset_ = data;
    if (n_tensors == 0) return f;
    if (data > c.size)
        fail(MINFER_ERR_BAD_MODEL, "truncated file: tensor data would start at offset %" PRIu64 " but the file has %" PRIu64 " bytes",
             data, c.size);
    const uint64_t data_size = c.size - data;
    std::vector<size_t> order(f->tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (TensorInfo& ti : f->tensors_) {
        if (ti.offset > data_size || ti.n_bytes > data_size - ti.offset)
            fail(MINFER_ERR_BAD_MODEL, "tensor '%s': data [%" PRIu64 ", +%" PRIu64 ") runs past the end of the file (%" PRIu64
                 " data bytes)", printable(ti.name).c_str(), ti.offset, ti.n_bytes, data_size);
        ti.data = c.base + data + ti.offset;
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return f->tensors_[a].offset < f->tensors_[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
        const TensorInfo& prev = f->tensors_[order[k - 1]];
        const TensorInfo& next = f->tensors_[order[k]];
        if (prev.offset + prev.n_bytes > next.offset)
            fail(MINFER_ERR_BAD_MODEL, "tensors '%s' and '%s' overlap (offsets %" PRIu64 " +%" PRIu64 " and %" PRIu64 ")",
                 printable(prev.name).c_str(), printable(next.name).c_str(), prev.offset, prev.n_bytes, next.offset);
    }
    return f;
}

}  // namespace minfer::gguf
