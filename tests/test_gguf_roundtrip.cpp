// Writer -> reader round trip with random content: every metadata type (scalars, strings, arrays of each
// element type), random tensors of every writable type, random alignment. Fresh seeds each run; the seed
// is printed on failure.
#include <doctest/doctest.h>

#include <cmath>

#include "helpers.h"

using minfer::gguf::ValueType;

namespace {

struct ExpectedKV {
    std::string key;
    ValueType type;
    ValueType elem = ValueType::U8;
    std::vector<uint8_t> raw;           // scalar bytes or fixed-size array bytes
    std::string str;                    // STRING
    std::vector<std::string> strings;   // array of strings
    uint64_t count = 0;
};

size_t size_of(ValueType t) {
    switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    default: return 8;
    }
}

std::string random_string(std::mt19937_64& rng, size_t max_len) {
    std::string s(rng() % (max_len + 1), '\0');
    for (char& c : s) c = static_cast<char>(rng() & 0xff);  // any bytes, NUL included
    return s;
}

// Random bytes for a scalar of type t; bools are 0/1 and floats are finite so equality is exact.
void random_scalar(std::mt19937_64& rng, ValueType t, uint8_t* out) {
    uint64_t v = rng();
    if (t == ValueType::BOOL) v &= 1;
    if (t == ValueType::F32) {
        float f = static_cast<float>(static_cast<int64_t>(v % 2000001) - 1000000) / 7.0f;
        std::memcpy(out, &f, 4);
        return;
    }
    if (t == ValueType::F64) {
        double d = static_cast<double>(static_cast<int64_t>(v)) / 3.0;
        std::memcpy(out, &d, 8);
        return;
    }
    std::memcpy(out, &v, size_of(t));
}

void check_round_trip(uint64_t seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    minfer::gguf::Writer w;
    std::vector<ExpectedKV> want;
    const uint32_t alignments[] = {1, 8, 32, 64, 256, 4096};
    const uint32_t alignment = alignments[rng() % 6];
    if (alignment != 32 || rng() % 2) {
        w.set_alignment(alignment);
        ExpectedKV a;
        a.key = "general.alignment";
        a.type = ValueType::U32;
        a.raw.resize(4);
        std::memcpy(a.raw.data(), &alignment, 4);
        want.push_back(a);
    }
    const int n_kv = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n_kv; ++i) {
        ExpectedKV e;
        e.key = "k" + std::to_string(i) + "." + random_string(rng, 12);
        e.type = static_cast<ValueType>(rng() % 13);
        if (e.type == ValueType::STRING) {
            e.str = random_string(rng, 300);
            w.set_string(e.key, e.str);
        } else if (e.type == ValueType::ARRAY) {
            do e.elem = static_cast<ValueType>(rng() % 13);
            while (e.elem == ValueType::ARRAY);
            e.count = rng() % 50;
            if (e.elem == ValueType::STRING) {
                for (uint64_t k = 0; k < e.count; ++k) e.strings.push_back(random_string(rng, 20));
                w.set_array_strings(e.key, e.strings);
            } else {
                e.raw.resize(e.count * size_of(e.elem));
                for (uint64_t k = 0; k < e.count; ++k) random_scalar(rng, e.elem, e.raw.data() + k * size_of(e.elem));
                w.set_array(e.key, e.elem, e.raw.data(), e.count);
            }
        } else {
            e.raw.resize(size_of(e.type));
            random_scalar(rng, e.type, e.raw.data());
            switch (e.type) {
            case ValueType::U8: w.set_u8(e.key, e.raw[0]); break;
            case ValueType::I8: w.set_i8(e.key, static_cast<int8_t>(e.raw[0])); break;
            case ValueType::BOOL: w.set_bool(e.key, e.raw[0] != 0); break;
            case ValueType::U16: { uint16_t v; std::memcpy(&v, e.raw.data(), 2); w.set_u16(e.key, v); break; }
            case ValueType::I16: { int16_t v; std::memcpy(&v, e.raw.data(), 2); w.set_i16(e.key, v); break; }
            case ValueType::U32: { uint32_t v; std::memcpy(&v, e.raw.data(), 4); w.set_u32(e.key, v); break; }
            case ValueType::I32: { int32_t v; std::memcpy(&v, e.raw.data(), 4); w.set_i32(e.key, v); break; }
            case ValueType::F32: { float v; std::memcpy(&v, e.raw.data(), 4); w.set_f32(e.key, v); break; }
            case ValueType::U64: { uint64_t v; std::memcpy(&v, e.raw.data(), 8); w.set_u64(e.key, v); break; }
            case ValueType::I64: { int64_t v; std::memcpy(&v, e.raw.data(), 8); w.set_i64(e.key, v); break; }
            case ValueType::F64: { double v; std::memcpy(&v, e.raw.data(), 8); w.set_f64(e.key, v); break; }
            default: break;
            }
        }
        want.push_back(std::move(e));
    }

    struct WantTensor {
        std::string name;
        int32_t type;
        std::vector<int64_t> dims;
        std::vector<uint8_t> data;
    };
    std::vector<WantTensor> tensors;
    const int n_t = static_cast<int>(rng() % 12);
    for (int i = 0; i < n_t; ++i) {
        int32_t type;
        do type = static_cast<int32_t>(rng() % 40);
        while (minfer::quant::type_info(type).block_elems == 0);
        const auto& info = minfer::quant::type_info(type);
        WantTensor t{"t" + std::to_string(i) + random_string(rng, 0), type, {}, {}};
        const int nd = 1 + static_cast<int>(rng() % 4);
        t.dims.push_back(info.block_elems * (1 + static_cast<int64_t>(rng() % 3)));
        for (int d = 1; d < nd; ++d) t.dims.push_back(1 + static_cast<int64_t>(rng() % 3));
        uint64_t n = 1;
        for (int64_t d : t.dims) n *= static_cast<uint64_t>(d);
        t.data.resize(n / static_cast<uint64_t>(info.block_elems) * static_cast<uint64_t>(info.block_bytes));
        for (auto& b : t.data) b = static_cast<uint8_t>(rng());
        w.add_tensor(t.name, t.type, t.dims, t.data);
        tensors.push_back(std::move(t));
    }

    const std::vector<uint8_t> bytes = w.to_bytes();
    const auto f = minfer::gguf::File::parse(minfer::gguf::copy_bytes(bytes));
    CHECK(f->version() == 3);
    CHECK(f->alignment() == alignment);
    CHECK(f->data_offset() % alignment == 0);
    REQUIRE(f->kvs().size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        const ExpectedKV& e = want[i];
        const auto& kv = f->kvs()[i];
        CAPTURE(i);
        CHECK(std::string(kv.key) == e.key);
        REQUIRE(f->find(e.key) == &kv.value);
        REQUIRE(kv.value.type == e.type);
        if (e.type == ValueType::STRING) {
            CHECK(std::string(kv.value.str) == e.str);
        } else if (e.type == ValueType::ARRAY) {
            REQUIRE(kv.value.elem_type == e.elem);
            REQUIRE(kv.value.count == e.count);
            if (e.elem == ValueType::STRING) {
                REQUIRE(kv.value.strings.size() == e.strings.size());
                for (size_t k = 0; k < e.strings.size(); ++k) CHECK(std::string(kv.value.strings[k]) == e.strings[k]);
            } else if (e.count > 0) {
                CHECK(std::memcmp(kv.value.raw, e.raw.data(), e.raw.size()) == 0);
            }
        } else {
            // Compare the decoded scalar with the bytes written.
            uint64_t u = 0;
            std::memcpy(&u, e.raw.data(), e.raw.size());
            switch (e.type) {
            case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64: case ValueType::BOOL:
                CHECK(kv.value.u == u);
                break;
            case ValueType::I8: CHECK(kv.value.i == static_cast<int8_t>(u)); break;
            case ValueType::I16: CHECK(kv.value.i == static_cast<int16_t>(u)); break;
            case ValueType::I32: CHECK(kv.value.i == static_cast<int32_t>(u)); break;
            case ValueType::I64: CHECK(kv.value.i == static_cast<int64_t>(u)); break;
            case ValueType::F32: { float x; std::memcpy(&x, e.raw.data(), 4); CHECK(kv.value.f == static_cast<double>(x)); break; }
            case ValueType::F64: { double x; std::memcpy(&x, e.raw.data(), 8); CHECK(kv.value.f == x); break; }
            default: break;
            }
        }
    }
    REQUIRE(f->tensors().size() == tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& t = f->tensors()[i];
        CAPTURE(i);
        CHECK(t.name == tensors[i].name);
        CHECK(f->find_tensor(t.name) == &t);
        CHECK(t.type == tensors[i].type);
        CHECK(t.n_dims == static_cast<int>(tensors[i].dims.size()));
        for (size_t d = 0; d < 4; ++d) CHECK(t.ne[d] == (d < tensors[i].dims.size() ? tensors[i].dims[d] : 1));
        CHECK(t.offset % alignment == 0);
        REQUIRE(t.n_bytes == tensors[i].data.size());
        CHECK(std::memcmp(t.data, tensors[i].data.data(), t.n_bytes) == 0);
    }
}

}  // namespace

TEST_SUITE("gguf_roundtrip") {
    TEST_CASE("random content survives writer -> reader") {
        const uint64_t base = test::seed();  // each file i is made from base + i (CAPTUREd inside)
        for (uint64_t i = 0; i < 200; ++i) check_round_trip(base + i);
    }

    TEST_CASE("write_file produces the same bytes as to_bytes and reads back through mmap") {
        test::TinyModel tm;
        std::vector<uint8_t> bytes = tm.build();
        const auto mem = minfer::gguf::File::parse(minfer::gguf::copy_bytes(bytes));
        const std::string path = test::tmp_path("roundtrip-file.gguf");
        test::write_bytes(path, bytes);
        const auto mapped = minfer::gguf::File::open(path);
        CHECK(mapped->size() == bytes.size());
        REQUIRE(mapped->tensors().size() == mem->tensors().size());
        for (size_t i = 0; i < mem->tensors().size(); ++i)
            CHECK(std::memcmp(mapped->tensors()[i].data, mem->tensors()[i].data, mem->tensors()[i].n_bytes) == 0);

        // Writer::write_file with a fill callback: the same bytes as to_bytes with the same callback.
        minfer::gguf::Writer w;
        w.set_string("general.architecture", "none");
        const int64_t dims[] = {64, 3};
        w.add_tensor("a", 8, dims);  // q8_0, filled at write time
        w.add_tensor("b", 0, dims);
        auto fill = [](void*, size_t index, uint8_t* dst, uint64_t n) {
            for (uint64_t k = 0; k < n; ++k) dst[k] = static_cast<uint8_t>((k * 31 + index * 7) & 0x3f);
        };
        const std::string p2 = test::tmp_path("roundtrip-fill.gguf");
        w.write_file(p2, fill);
        const std::vector<uint8_t> expect = w.to_bytes(fill);
        const auto f2 = minfer::gguf::File::open(p2);
        REQUIRE(f2->size() == expect.size());
        CHECK(std::memcmp(f2->bytes(), expect.data(), expect.size()) == 0);
        CHECK(f2->tensors()[0].n_bytes == 2 * 3 * 34);
    }

    TEST_CASE("the writer refuses what the reader would reject") {
        minfer::gguf::Writer w;
        const int64_t bad_row[] = {48};
        CHECK_THROWS_AS(w.add_tensor("q", 8, bad_row), minfer::Error);
        const int64_t zero[] = {0};
        CHECK_THROWS_AS(w.add_tensor("z", 0, zero), minfer::Error);
        const int64_t ok[] = {8};
        CHECK_THROWS_AS(w.add_tensor("r", 4, ok), minfer::Error);  // removed type
        w.add_tensor("x", 0, ok);
        CHECK_THROWS_AS(w.add_tensor("x", 0, ok), minfer::Error);  // duplicate
        CHECK_THROWS_AS(w.add_tensor(std::string(200, 'n'), 0, ok), minfer::Error);
        std::vector<uint8_t> short_data(7);
        CHECK_THROWS_AS(w.add_tensor("y", 0, ok, short_data), minfer::Error);
        CHECK_THROWS_AS(w.set_alignment(48), minfer::Error);
        CHECK_THROWS_AS(w.to_bytes(), minfer::Error);  // "x" has no data and there is no fill callback
        CHECK_THROWS_AS(w.write_file("/nonexistent-dir/x.gguf", nullptr), minfer::Error);
    }
}
