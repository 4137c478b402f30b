// Reader unit tests: header fields, alignment, value accessors, tensor geometry, file errors.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include "helpers.h"

using minfer::gguf::File;
using minfer::gguf::ValueType;
using test::Raw;

TEST_SUITE("gguf_reader") {
    TEST_CASE("default alignment is 32 and the data section starts on it") {
        Raw r;
        r.header(3, 1, 1).kv_u32("x", 5).tensor("w", {3}, 0, 0).pad_to(32);
        const size_t data_at = r.b.size();
        const float v[3] = {1.5f, -2.0f, 3.25f};
        r.bytes(v, sizeof v);
        auto f = File::parse(minfer::gguf::copy_bytes(r.b));
        CHECK(f->alignment() == 32);
        CHECK(f->data_offset() == data_at);
        REQUIRE(f->tensors().size() == 1);
        const auto& t = f->tensors()[0];
        CHECK(t.n_elems == 3);
        CHECK(t.n_bytes == 12);
        float got[3];
        std::memcpy(got, t.data, 12);
        CHECK(got[0] == 1.5f);
        CHECK(got[2] == 3.25f);
    }

    TEST_CASE("general.alignment moves the data section and the offsets") {
        Raw r;
        r.header(3, 2, 1).kv_u32("general.alignment", 256).tensor("a", {32}, 8, 0).tensor("b", {2, 2}, 1, 256).pad_to(256);
        const size_t data_at = r.b.size();
        std::vector<uint8_t> a(34, 0x21), pad(256 - 34, 0), b(8, 0x3c);
        r.bytes(a.data(), a.size()).bytes(pad.data(), pad.size()).bytes(b.data(), b.size());
        auto f = File::parse(minfer::gguf::copy_bytes(r.b));
        CHECK(f->alignment() == 256);
        CHECK(f->data_offset() == data_at);
        CHECK(f->data_offset() % 256 == 0);
        CHECK(f->find_tensor("b")->data == f->bytes() + data_at + 256);
        CHECK(f->find_tensor("a")->n_bytes == 34);
        CHECK(f->find_tensor("missing") == nullptr);
    }

    TEST_CASE("version 2 files are read like version 3") {
        Raw r;
        r.header(2, 0, 2).kv_u32("a", 1).kv_str("b", "hello");
        auto f = File::parse(minfer::gguf::copy_bytes(r.b));
        CHECK(f->version() == 2);
        CHECK(f->find("b")->str == "hello");
    }

    TEST_CASE("value accessors widen integers and refuse what does not fit") {
        Raw r;
        r.header(3, 0, 6);
        r.str("i8").u32(1).u8(0xff);                     // -1
        r.str("u64big").u32(10).u64(~uint64_t{0});       // above INT64_MAX
        r.str("u16").u32(2).u16(65535);
        r.str("f64").u32(12).f64(0.125);
        r.str("bool").u32(7).u8(1);
        r.str("s").u32(8).str("x");
        auto f = File::parse(minfer::gguf::copy_bytes(r.b));
        int64_t i = 0;
        double d = 0;
        CHECK(f->find("i8")->as_int(&i));
        CHECK(i == -1);
        CHECK_FALSE(f->find("u64big")->as_int(&i));
        CHECK(f->find("u16")->as_int(&i));
        CHECK(i == 65535);
        CHECK(f->find("f64")->as_float(&d));
        CHECK(d == 0.125);
        CHECK_FALSE(f->find("f64")->as_int(&i));
        CHECK(f->find("bool")->as_int(&i));
        CHECK(i == 1);
        CHECK_FALSE(f->find("s")->as_float(&d));
        CHECK(f->kvs()[3].key == "f64");  // file order is kept
    }

    TEST_CASE("arrays keep their elements") {
        Raw r;
        r.header(3, 0, 2);
        r.str("ints").u32(9).u32(5).u64(3).u32(static_cast<uint32_t>(-7)).u32(0).u32(9);
        r.str("strs").u32(9).u32(8).u64(2).str("ab").str("");
        auto f = File::parse(minfer::gguf::copy_bytes(r.b));
        const auto* ints = f->find("ints");
        REQUIRE(ints->type == ValueType::ARRAY);
        CHECK(ints->elem_type == ValueType::I32);
        CHECK(ints->count == 3);
        int32_t x[3];
        std::memcpy(x, ints->raw, 12);
        CHECK(x[0] == -7);
        CHECK(x[2] == 9);
        const auto* strs = f->find("strs");
        REQUIRE(strs->strings.size() == 2);
        CHECK(strs->strings[0] == "ab");
        CHECK(strs->strings[1].empty());
    }

    TEST_CASE("every known type's block geometry is checked on the row length") {
        for (int32_t id = 0; id < 40; ++id) {
            const auto& info = minfer::quant::type_info(id);
            if (info.status == minfer::quant::TypeStatus::removed) continue;
            CAPTURE(id);
            Raw r;
            r.header(3, 1, 0).tensor("w", {static_cast<uint64_t>(info.block_elems * 2), 3}, static_cast<uint32_t>(id), 0).pad_to(32);
            std::vector<uint8_t> data(static_cast<size_t>(info.block_bytes) * 6, 0);
            r.bytes(data.data(), data.size());
            auto f = File::parse(minfer::gguf::copy_bytes(r.b));
            CHECK(f->tensors()[0].n_bytes == data.size());
            if (info.block_elems > 1) {
                Raw bad;
                bad.header(3, 1, 0).tensor("w", {static_cast<uint64_t>(info.block_elems + 1)}, static_cast<uint32_t>(id), 0).pad_to(32);
                bad.bytes(data.data(), data.size());
                CHECK(test::parse_error(bad.b).status() == MINFER_ERR_BAD_MODEL);
            }
        }
    }

    TEST_CASE("file errors are IO errors naming the path") {
        try {
            File::open("/nonexistent/model.gguf");
            FAIL("opened a missing file");
        } catch (const minfer::Error& e) {
            CHECK(e.status() == MINFER_ERR_IO);
            CHECK(std::string(e.what()).find("/nonexistent/model.gguf") != std::string::npos);
        }
        for (bool copy : {false, true}) {
            try {
                File::open(MINFER_TEST_TMPDIR, copy);
                FAIL("opened a directory");
            } catch (const minfer::Error& e) {
                CHECK(e.status() == MINFER_ERR_IO);
                CHECK(std::string(e.what()).find("not a regular file but a directory") != std::string::npos);
            }
        }
        const std::string empty = test::tmp_path("empty.gguf");
        test::write_bytes(empty, {});
        for (bool copy : {false, true}) {
            try {
                File::open(empty, copy);
                FAIL("opened an empty file");
            } catch (const minfer::Error& e) {
                CHECK(e.status() == MINFER_ERR_BAD_MODEL);
                CHECK(std::string(e.what()).find("empty") != std::string::npos);
            }
        }
    }

    TEST_CASE("a copied file holds the bytes of the mapped one") {
        const std::string path = test::tmp_path("reader-copy.gguf");
        const std::vector<uint8_t> bytes = test::TinyModel().build();
        test::write_bytes(path, bytes);
        const auto mapped = File::open(path, false);
        const auto copied = File::open(path, true);
        REQUIRE(copied->size() == bytes.size());
        CHECK(std::memcmp(copied->bytes(), bytes.data(), bytes.size()) == 0);
        CHECK(std::memcmp(mapped->bytes(), bytes.data(), bytes.size()) == 0);
        CHECK(reinterpret_cast<uintptr_t>(copied->bytes()) % 4096 == 0);  // page-aligned, like a mapping
        REQUIRE(copied->tensors().size() == mapped->tensors().size());
        for (size_t i = 0; i < copied->tensors().size(); ++i) {
            CHECK(copied->tensors()[i].data - copied->bytes() == mapped->tensors()[i].data - mapped->bytes());
        }
    }
}
