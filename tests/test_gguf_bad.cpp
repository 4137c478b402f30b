// The bad-file corpus: one or more hand-made files per failure class of the reader. Each asserts the
// status and that the message names the problem. The corpus is also written to the build directory
// (tests/bad-*.gguf) and opened through the public API, as a user would.
#include <doctest/doctest.h>

#include "helpers.h"

using test::parse_error;
using test::Raw;

namespace {

struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    minfer_status status;
    const char* needle;  // the message must contain this
};

// A valid file with one f32 tensor "w" of 8 elements, as a base for targeted damage.
Raw good_prefix(uint64_t n_tensors = 1, uint64_t n_kv = 1) {
    Raw r;
    r.header(3, n_tensors, n_kv).kv_str("general.architecture", "qwen2");
    return r;
}

std::vector<uint8_t> one_tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset,
                                size_t data_bytes, uint32_t version = 3) {
    Raw r;
    r.header(version, 1, 0).tensor(name, dims, type, offset).pad_to(32);
    std::vector<uint8_t> data(data_bytes, 0x11);
    r.bytes(data.data(), data.size());
    return r.b;
}

std::vector<Case> corpus() {
    std::vector<Case> c;
    // Truncation and header.
    c.push_back({"empty-magic", {'G', 'G'}, MINFER_ERR_BAD_MODEL, "bad magic"});
    c.push_back({"bad-magic", Raw().u32(0x46554746).u32(3).u64(0).u64(0).b, MINFER_ERR_BAD_MODEL, "bad magic"});
    {
        Raw r;
        r.b = {'G', 'G', 'U', 'F'};
        c.push_back({"truncated-version", r.u16(3).b, MINFER_ERR_BAD_MODEL, "truncated file: version"});
    }
    c.push_back({"version-0", Raw().header(0, 0, 0).b, MINFER_ERR_BAD_MODEL, "unknown GGUF version 0"});
    c.push_back({"version-7", Raw().header(7, 0, 0).b, MINFER_ERR_BAD_MODEL, "unknown GGUF version 7"});
    c.push_back({"version-1", Raw().header(1, 0, 0).b, MINFER_ERR_UNSUPPORTED, "version 1 is not supported"});
    c.push_back({"big-endian", Raw().header(0x03000000, 0, 0).b, MINFER_ERR_UNSUPPORTED, "big-endian"});
    {
        Raw r;
        r.b = {'G', 'G', 'U', 'F'};
        c.push_back({"truncated-counts", r.u32(3).u64(0).b, MINFER_ERR_BAD_MODEL, "truncated file: metadata count"});
    }
    // Counts larger than the file could hold.
    c.push_back({"huge-kv-count", Raw().header(3, 0, uint64_t{1} << 40).b, MINFER_ERR_BAD_MODEL, "metadata count"});
    c.push_back({"kv-count-past-end", Raw().header(3, 0, 1000).kv_u32("a", 1).b, MINFER_ERR_BAD_MODEL, "metadata count 1000"});
    c.push_back({"huge-tensor-count", Raw().header(3, ~uint64_t{0}, 0).b, MINFER_ERR_BAD_MODEL, "tensor count"});
    c.push_back({"tensor-count-past-end", Raw().header(3, 5, 0).tensor("w", {8}, 0, 0).b, MINFER_ERR_BAD_MODEL,
                 "tensor count 5"});
    // Strings.
    c.push_back({"key-length-past-end", Raw().header(3, 0, 1).u64(1000).bytes("abc", 3).u32(4).u32(0).b, MINFER_ERR_BAD_MODEL,
                 "truncated file: metadata key"});
    c.push_back({"key-length-above-cap", Raw().header(3, 0, 1).u64(uint64_t{1} << 20).u32(4).u32(0).b, MINFER_ERR_BAD_MODEL,
                 "above the limit"});
    c.push_back({"key-empty", Raw().header(3, 0, 1).str("").u32(4).u32(1).b, MINFER_ERR_BAD_MODEL, "is empty"});
    c.push_back({"string-length-huge", Raw().header(3, 0, 1).str("k").u32(8).u64(~uint64_t{0}).b, MINFER_ERR_BAD_MODEL,
                 "string value at offset"});
    c.push_back({"string-past-end", Raw().header(3, 0, 1).str("k").u32(8).u64(100).bytes("xy", 2).b, MINFER_ERR_BAD_MODEL,
                 "truncated file: string value"});
    // Value types.
    c.push_back({"unknown-value-type", Raw().header(3, 0, 1).str("k").u32(13).u32(0).b, MINFER_ERR_BAD_MODEL,
                 "unknown value type 13"});
    c.push_back({"bool-not-0-1", Raw().header(3, 0, 1).str("k").u32(7).u8(2).b, MINFER_ERR_BAD_MODEL, "neither 0 nor 1"});
    c.push_back({"truncated-scalar", Raw().header(3, 0, 1).str("k").u32(10).u32(5).b, MINFER_ERR_BAD_MODEL, "truncated file: value"});
    // Arrays.
    c.push_back({"nested-array", Raw().header(3, 0, 1).str("k").u32(9).u32(9).u64(1).b, MINFER_ERR_BAD_MODEL, "nested arrays"});
    c.push_back({"array-unknown-elem", Raw().header(3, 0, 1).str("k").u32(9).u32(77).u64(1).b, MINFER_ERR_BAD_MODEL,
                 "unknown array element type 77"});
    c.push_back({"array-length-above-cap", Raw().header(3, 0, 1).str("k").u32(9).u32(0).u64(uint64_t{1} << 40).b,
                 MINFER_ERR_BAD_MODEL, "above the limit"});
    c.push_back({"array-data-past-end", Raw().header(3, 0, 1).str("k").u32(9).u32(4).u64(1000).u32(1).b, MINFER_ERR_BAD_MODEL,
                 "truncated file: array data"});
    c.push_back({"array-strings-past-end", Raw().header(3, 0, 1).str("k").u32(9).u32(8).u64(1u << 20).str("a").b,
                 MINFER_ERR_BAD_MODEL, "cannot fit"});
    c.push_back({"array-bool-not-0-1", Raw().header(3, 0, 1).str("k").u32(9).u32(7).u64(3).u8(1).u8(0).u8(5).b,
                 MINFER_ERR_BAD_MODEL, "bool element 2"});
    // Keys.
    c.push_back({"duplicate-key", Raw().header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2).b, MINFER_ERR_BAD_MODEL,
                 "duplicate metadata key 'a.b'"});
    c.push_back({"alignment-wrong-type", Raw().header(3, 0, 1).kv_str("general.alignment", "32").b, MINFER_ERR_BAD_MODEL,
                 "general.alignment' has type string"});
    // Alignment.
    c.push_back({"alignment-zero", Raw().header(3, 0, 1).kv_u32("general.alignment", 0).b, MINFER_ERR_BAD_MODEL,
                 "not a power of two"});
    c.push_back({"alignment-not-pow2", Raw().header(3, 0, 1).kv_u32("general.alignment", 48).b, MINFER_ERR_BAD_MODEL,
                 "not a power of two"});
    c.push_back({"alignment-absurd", Raw().header(3, 0, 1).kv_u32("general.alignment", 1u << 31).b, MINFER_ERR_BAD_MODEL,
                 "above the limit"});
    // Tensor infos.
    c.push_back({"tensor-name-empty", one_tensor("", {8}, 0, 0, 32), MINFER_ERR_BAD_MODEL, "empty name"});
    c.push_back({"tensor-name-too-long", one_tensor(std::string(200, 'x'), {8}, 0, 0, 32), MINFER_ERR_BAD_MODEL,
                 "tensor name at offset"});
    {
        Raw r;
        r.header(3, 2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad_to(32);
        r.b.resize(r.b.size() + 64, 0);
        c.push_back({"tensor-name-duplicate", r.b, MINFER_ERR_BAD_MODEL, "duplicate tensor name 'w'"});
    }
    c.push_back({"tensor-ndims-0", one_tensor("w", {}, 0, 0, 32), MINFER_ERR_BAD_MODEL, "n_dims = 0"});
    c.push_back({"tensor-ndims-5", one_tensor("w", {1, 1, 1, 1, 8}, 0, 0, 32), MINFER_ERR_BAD_MODEL, "n_dims = 5"});
    c.push_back({"tensor-dim-zero", one_tensor("w", {8, 0}, 0, 0, 32), MINFER_ERR_BAD_MODEL, "dimension 1 is 0"});
    c.push_back({"tensor-dim-negative", one_tensor("w", {8, ~uint64_t{0}}, 0, 0, 32), MINFER_ERR_BAD_MODEL, "dimension 1 is -1"});
    c.push_back({"tensor-elems-overflow", one_tensor("w", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0, 32), MINFER_ERR_BAD_MODEL,
                 "element count overflows"});
    c.push_back({"tensor-bytes-overflow", one_tensor("w", {uint64_t{1} << 62}, 0, 0, 32), MINFER_ERR_BAD_MODEL,
                 "byte size overflows"});
    c.push_back({"tensor-row-not-block-multiple", one_tensor("w", {48, 2}, 8, 0, 128), MINFER_ERR_BAD_MODEL,
                 "row length 48 is not a multiple of the q8_0 block size 32"});
    c.push_back({"tensor-type-unknown", one_tensor("w", {8}, 200, 0, 32), MINFER_ERR_BAD_MODEL, "unknown type id 200"});
    c.push_back({"tensor-type-huge", one_tensor("w", {8}, 0xffffffffu, 0, 32), MINFER_ERR_BAD_MODEL, "unknown type id 4294967295"});
    c.push_back({"tensor-type-removed", one_tensor("w", {32}, 4, 0, 32), MINFER_ERR_BAD_MODEL, "was removed"});
    c.push_back({"tensor-type-removed-q4_0_4_4", one_tensor("w", {32}, 31, 0, 32), MINFER_ERR_BAD_MODEL, "q4_0_4_4"});
    c.push_back({"tensor-offset-misaligned", one_tensor("w", {8}, 0, 4, 64), MINFER_ERR_BAD_MODEL,
                 "not a multiple of the alignment 32"});
    c.push_back({"tensor-data-past-end", one_tensor("w", {8}, 0, 0, 16), MINFER_ERR_BAD_MODEL, "runs past the end"});
    c.push_back({"tensor-offset-past-end", one_tensor("w", {8}, 0, uint64_t{1} << 62, 32), MINFER_ERR_BAD_MODEL,
                 "runs past the end"});
    c.push_back({"tensor-offset-wraps", one_tensor("w", {8}, 0, ~uint64_t{31}, 32), MINFER_ERR_BAD_MODEL, "runs past the end"});
    {
        Raw r;
        r.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).pad_to(32);
        r.b.resize(r.b.size() + 96, 0);
        c.push_back({"tensor-overlap", r.b, MINFER_ERR_BAD_MODEL, "'a' and 'b' overlap"});
    }
    {
        Raw r;  // header ends mid-way: data would start past the end
        r.header(3, 1, 0).tensor("w", {8}, 0, 0);
        c.push_back({"tensor-data-start-past-end", r.b, MINFER_ERR_BAD_MODEL, "truncated file"});
    }
    // The first info is long enough that the count check passes; the second ends inside its dimensions.
    c.push_back({"truncated-tensor-info",
                 Raw().header(3, 2, 0).tensor(std::string(100, 'a'), {8}, 0, 0).str("w").u32(2).u64(8).b,
                 MINFER_ERR_BAD_MODEL, "truncated file: tensor dimension"});
    return c;
}

}  // namespace

TEST_SUITE("gguf_bad") {
    TEST_CASE("every bad file is rejected with its status and a message naming the problem") {
        for (const Case& k : corpus()) {
            const std::string label = k.name;
            CAPTURE(label);
            minfer::Error e = parse_error(k.bytes);
            CHECK_MESSAGE(e.status() == k.status, k.name, ": status ", minfer_status_string(e.status()), " message ", e.what());
            CHECK_MESSAGE(std::string(e.what()).find(k.needle) != std::string::npos, k.name, ": message '", e.what(),
                          "' lacks '", k.needle, "'");
        }
    }

    TEST_CASE("the corpus on disk gives the same status through minfer_open") {
        for (const Case& k : corpus()) {
            const std::string label = k.name;
            CAPTURE(label);
            std::string msg;
            minfer_status st = test::open_bytes(k.bytes, std::string("bad-") + k.name + ".gguf", &msg);
            CHECK(st == k.status);
            CHECK(msg.find(k.needle) != std::string::npos);
            CHECK(msg.find("bad-") != std::string::npos);  // the path is named
        }
    }

    TEST_CASE("the base shapes of the corpus are valid when undamaged") {
        // Guards the corpus itself: the damaged fields are the only reason each case fails.
        CHECK_NOTHROW(minfer::gguf::File::parse(minfer::gguf::copy_bytes(one_tensor("w", {8}, 0, 0, 32))));
        CHECK_NOTHROW(minfer::gguf::File::parse(minfer::gguf::copy_bytes(one_tensor("w", {32, 2}, 8, 0, 68))));
        CHECK_NOTHROW(minfer::gguf::File::parse(minfer::gguf::copy_bytes(good_prefix(0, 1).b)));
        CHECK_NOTHROW(minfer::gguf::File::parse(minfer::gguf::copy_bytes(Raw().header(3, 0, 1).kv_u32("general.alignment", 64).b)));
        CHECK_NOTHROW(minfer::gguf::File::parse(minfer::gguf::copy_bytes(Raw().header(2, 0, 1).kv_u32("k", 1).b)));
    }

    TEST_CASE("every truncation of a valid model is rejected, never read past") {
        test::TinyModel tm;
        tm.n_layer = 1;
        std::vector<uint8_t> full = tm.build();
        REQUIRE_NOTHROW(minfer::gguf::File::parse(minfer::gguf::copy_bytes(full)));
        // Every prefix inside the header and metadata, then a stride through the data.
        const auto f = minfer::gguf::File::parse(minfer::gguf::copy_bytes(full));
        const size_t header_end = static_cast<size_t>(f->data_offset());
        for (size_t n = 0; n < full.size(); n += (n < header_end + 64 ? 1 : 97)) {
            std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
            try {
                minfer::gguf::File::parse(minfer::gguf::copy_bytes(cut));
                FAIL("prefix of ", n, " bytes was accepted");
            } catch (const minfer::Error& e) {
                CHECK(e.status() == MINFER_ERR_BAD_MODEL);
            }
        }
    }

    TEST_CASE("random single-byte damage never crashes and never yields an unknown status") {
        test::TinyModel tm;
        tm.n_layer = 1;
        std::vector<uint8_t> full = tm.build();
        const auto f = minfer::gguf::File::parse(minfer::gguf::copy_bytes(full));
        const size_t header_end = static_cast<size_t>(f->data_offset());
        const uint64_t seed = test::seed();
        CAPTURE(seed);
        std::mt19937_64 rng(seed);
        for (int i = 0; i < 3000; ++i) {
            std::vector<uint8_t> b = full;
            size_t at = rng() % header_end;
            b[at] = static_cast<uint8_t>(rng());
            try {
                minfer::gguf::File::parse(minfer::gguf::copy_bytes(b));
            } catch (const minfer::Error& e) {
                CHECK((e.status() == MINFER_ERR_BAD_MODEL || e.status() == MINFER_ERR_UNSUPPORTED));
                CHECK(std::strlen(e.what()) > 10);
            }
        }
    }
}
