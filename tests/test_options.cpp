// Options: parsing per type, validation errors that change nothing, process defaults vs per-model
// values, load-time options locked after open, and the enumeration API.
#include <doctest/doctest.h>

#include "helpers.h"
#include "options/options.h"

namespace {

std::string get(const minfer_model* m, const char* key) {
    char buf[64];
    size_t len = 0;
    REQUIRE(minfer_get_option(m, key, buf, sizeof buf, &len) == MINFER_OK);
    CHECK(len == std::strlen(buf));
    return buf;
}

// Restores a process default when the test ends.
struct DefaultGuard {
    std::string key, value;
    explicit DefaultGuard(const char* k) : key(k), value(get(nullptr, k)) {}
    ~DefaultGuard() { minfer_set_option(nullptr, key.c_str(), value.c_str()); }
};

}  // namespace

TEST_SUITE("options") {
    TEST_CASE("every type parses its forms and canonicalises") {
        using namespace minfer::options;
        const Def& fused = def(Id::fused_b);
        for (const char* t : {"true", "TRUE", "1", "on", "yes"}) CHECK(parse(fused, t) == 1);
        for (const char* f : {"false", "0", "Off", "no"}) CHECK(parse(fused, f) == 0);
        const Def& dev = def(Id::device);
        CHECK(parse(dev, "auto") == kDeviceAuto);
        CHECK(parse(dev, "CPU") == kDeviceCpu);
        CHECK(parse(dev, "cuda") == kDeviceCuda);
        CHECK(format(dev, kDeviceCuda) == "cuda");
        const Def& threads = def(Id::threads);
        CHECK(parse(threads, "0") == 0);
        CHECK(parse(threads, "+16") == 16);
        CHECK(parse(threads, "1024") == 1024);
        const Def& bytes = def(Id::w16_enable_bytes);
        CHECK(parse(bytes, "2147483648") == int64_t{2} << 30);
        CHECK(parse(bytes, "2G") == int64_t{2} << 30);
        CHECK(parse(bytes, "3GiB") == int64_t{3} << 30);
        CHECK(parse(bytes, "512m") == int64_t{512} << 20);
        CHECK(parse(bytes, "64KiB") == 64 * 1024);
        CHECK(parse(bytes, "0") == 0);
        CHECK(format(bytes, int64_t{2} << 30) == "2147483648");
        const Def& level = def(Id::log_level);
        CHECK(parse(level, "off") == 0);
        CHECK(parse(level, "debug") == MINFER_LOG_DEBUG);
        CHECK(parse(level, "warn") == MINFER_LOG_WARN);
    }

    TEST_CASE("bad values are refused with a message naming the option and the value") {
        using namespace minfer::options;
        struct Bad {
            Id id;
            const char* text;
            const char* needle;
        };
        const Bad bad[] = {
            {Id::fused_b, "maybe", "expects a boolean"},
            {Id::fused_b, "", "expects a boolean"},
            {Id::device, "gpu", "expects one of auto|cpu|cuda, got 'gpu'"},
            {Id::device, "cpu ", "got 'cpu '"},
            {Id::threads, "-1", "out of range [0, 1024]"},
            {Id::threads, "1025", "out of range"},
            {Id::threads, "4x", "expects an integer"},
            {Id::threads, "", "expects an integer"},
            {Id::threads, "99999999999999999999999", "expects an integer"},
            {Id::threads, "3.5", "expects an integer"},
            {Id::w16_enable_bytes, "2Q", "byte count"},
            {Id::w16_enable_bytes, "-1G", "byte count"},
            {Id::w16_enable_bytes, "9999999999T", "byte count"},
            {Id::w16_enable_bytes, "2GiBB", "byte count"},
            {Id::log_level, "verbose", "expects one of off|error|warn|info|debug"},
            {Id::ctx_len, "abc\n", "got 'abc\\x0a'"},
        };
        for (const Bad& b : bad) {
            const std::string label = b.text;
            CAPTURE(label);
            try {
                parse(def(b.id), b.text);
                FAIL("accepted");
            } catch (const minfer::Error& e) {
                CHECK(e.status() == MINFER_ERR_OPTION_VALUE);
                CHECK(std::string(e.what()).find(def(b.id).name) != std::string::npos);
                CHECK_MESSAGE(std::string(e.what()).find(b.needle) != std::string::npos, e.what());
            }
        }
    }

    TEST_CASE("process defaults: set, read back, and errors change nothing") {
        DefaultGuard g1("threads"), g2("device");
        CHECK(minfer_set_option(nullptr, "threads", "3") == MINFER_OK);
        CHECK(get(nullptr, "threads") == "3");
        CHECK(minfer_set_option(nullptr, "threads", "lots") == MINFER_ERR_OPTION_VALUE);
        CHECK(std::string(minfer_last_error()).find("threads") != std::string::npos);
        CHECK(get(nullptr, "threads") == "3");
        CHECK(minfer_set_option(nullptr, "thread", "3") == MINFER_ERR_UNKNOWN_OPTION);
        CHECK(std::string(minfer_last_error()).find("unknown option 'thread'") != std::string::npos);
        CHECK(std::string(minfer_last_error()).find("threads") != std::string::npos);  // lists the known ones
        CHECK(minfer_set_option(nullptr, nullptr, "1") == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_set_option(nullptr, "threads", nullptr) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_set_option(nullptr, "device", "CPU") == MINFER_OK);
        CHECK(get(nullptr, "device") == "cpu");
    }

    TEST_CASE("a model takes the defaults at open; runtime options change per model; load options are locked") {
        DefaultGuard g1("threads"), g2("ctx_len"), g3("device");
        const std::string path = test::tmp_path("options-model.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "f32", 1) == MINFER_OK);
        REQUIRE(minfer_set_option(nullptr, "threads", "2") == MINFER_OK);
        REQUIRE(minfer_set_option(nullptr, "device", "cpu") == MINFER_OK);
        minfer_model* a = nullptr;
        REQUIRE(minfer_open(path.c_str(), &a) == MINFER_OK);
        minfer_model* b = nullptr;
        const char* keys[] = {"threads", "ctx_len"};
        const char* values[] = {"5", "100"};
        REQUIRE(minfer_open_with_options(path.c_str(), keys, values, 2, &b) == MINFER_OK);
        CHECK(get(a, "threads") == "2");
        CHECK(get(b, "threads") == "5");
        CHECK(get(b, "ctx_len") == "100");
        CHECK(get(nullptr, "threads") == "2");  // open options do not leak into the defaults

        // Later default changes do not reach open models.
        REQUIRE(minfer_set_option(nullptr, "threads", "7") == MINFER_OK);
        CHECK(get(a, "threads") == "2");
        // Runtime option on one model only.
        CHECK(minfer_set_option(a, "threads", "9") == MINFER_OK);
        CHECK(get(a, "threads") == "9");
        CHECK(get(b, "threads") == "5");
        // Load-time options are refused after open, and nothing changes.
        for (const char* key : {"device", "mmap", "w16_cache", "w16_enable_bytes", "fused_b", "mmq", "gemm"}) {
            const std::string label = key;
            CAPTURE(label);
            const std::string before = get(a, key);
            const char* value = std::string(key) == "w16_enable_bytes" ? "1G" : std::string(key) == "fused_b" ? "true" : "cpu";
            if (std::string(key) == "mmap") value = "false";
            if (std::string(key) == "w16_cache" || std::string(key) == "mmq") value = "on";
            if (std::string(key) == "gemm") value = "own";
            CHECK(minfer_set_option(a, key, value) == MINFER_ERR_OPTION_LOCKED);
            CHECK(std::string(minfer_last_error()).find(key) != std::string::npos);
            CHECK(std::string(minfer_last_error()).find("minfer_open") != std::string::npos);
            CHECK(get(a, key) == before);
        }
        // A bad value on a model is a value error, not a lock error, and changes nothing.
        CHECK(minfer_set_option(a, "threads", "2000") == MINFER_ERR_OPTION_VALUE);
        CHECK(get(a, "threads") == "9");
        // One bad pair in open options fails the whole open.
        const char* bad_keys[] = {"threads", "device"};
        const char* bad_values[] = {"1", "tpu"};
        minfer_model* c = reinterpret_cast<minfer_model*>(0x1);
        CHECK(minfer_open_with_options(path.c_str(), bad_keys, bad_values, 2, &c) == MINFER_ERR_OPTION_VALUE);
        CHECK(c == nullptr);
        minfer_close(a);
        minfer_close(b);
    }

    TEST_CASE("ctx_len sizes new contexts; 0 uses the training length") {
        const std::string path = test::tmp_path("options-ctx.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen3-tiny", "f16", 1) == MINFER_OK);
        const char* keys[] = {"ctx_len", "device"};
        const char* values[] = {"0", "cpu"};
        minfer_model* m = nullptr;
        REQUIRE(minfer_open_with_options(path.c_str(), keys, values, 2, &m) == MINFER_OK);
        minfer_context* c1 = nullptr;
        REQUIRE(minfer_context_create(m, &c1) == MINFER_OK);
        CHECK(minfer_context_n_ctx(c1) == 2048);
        REQUIRE(minfer_set_option(m, "ctx_len", "300") == MINFER_OK);
        minfer_context* c2 = nullptr;
        REQUIRE(minfer_context_create(m, &c2) == MINFER_OK);
        CHECK(minfer_context_n_ctx(c2) == 300);
        CHECK(minfer_context_n_ctx(c1) == 2048);
        minfer_context_free(c1);
        minfer_context_free(c2);
        minfer_close(m);
    }

    TEST_CASE("enumeration lists every option with consistent metadata") {
        const size_t n = minfer_option_count();
        CHECK(n == 14);
        std::set<std::string> names;
        for (size_t i = 0; i < n; ++i) {
            const char *name = nullptr, *def = nullptr, *lo = nullptr, *hi = nullptr, *choices = nullptr, *doc = nullptr;
            minfer_option_type type{};
            minfer_option_scope scope{};
            REQUIRE(minfer_option_info(i, &name, &type, &scope, &def, &lo, &hi, &choices, &doc) == MINFER_OK);
            names.insert(name);
            CHECK(std::strlen(doc) > 10);
            // The default is itself a valid value and is what a fresh model reports.
            const auto* d = minfer::options::find(name);
            REQUIRE(d != nullptr);
            CHECK(minfer::options::format(*d, minfer::options::parse(*d, def)) == def);
            if (type == MINFER_OPTION_ENUM) CHECK(std::string(choices).find('|') != std::string::npos);
            if (type == MINFER_OPTION_INT || type == MINFER_OPTION_BYTES) {
                CHECK(std::strlen(lo) > 0);
                CHECK(std::strlen(hi) > 0);
                CHECK(minfer::options::parse(*d, hi) == d->max);
            } else {
                CHECK(std::string(lo).empty());
            }
        }
        for (const char* want : {"device", "mmap", "threads", "ctx_len", "w16_cache", "w16_enable_bytes", "fused_b", "mmq", "gemm", "log_level", "cuda_graph",
                                 "matvec_int8", "gemm_tune", "prefill_chunk"})
            CHECK(names.count(want) == 1);
        CHECK(minfer_option_info(n, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr) == MINFER_ERR_NOT_FOUND);
        CHECK(get(nullptr, "w16_enable_bytes") == "2147483648");
    }

    TEST_CASE("get_option reports buffer size needs") {
        char small[3];
        size_t len = 0;
        CHECK(minfer_get_option(nullptr, "w16_enable_bytes", small, sizeof small, &len) == MINFER_ERR_BUFFER_TOO_SMALL);
        CHECK(len == 10);
        CHECK(minfer_get_option(nullptr, "nope", small, sizeof small, &len) == MINFER_ERR_UNKNOWN_OPTION);
    }
}
