// The C API as a service sees it: argument checks, statuses and messages, metadata queries, contexts,
// callbacks, thread-local errors, synth.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <future>
#include <iterator>
#include <thread>

#include "cpu/cpu_ops.h"
#include "device/device.h"
#include "helpers.h"

namespace {

std::string tiny_path(const char* preset = "qwen2-tiny", const char* mix = "f16") {
    const std::string path = test::tmp_path(std::string("api-") + preset + "-" + mix + ".gguf");
    REQUIRE(minfer_synth(path.c_str(), preset, mix, 11) == MINFER_OK);
    return path;
}

minfer_model* open_cpu(const std::string& path) {
    const char* k[] = {"device"};
    const char* v[] = {"cpu"};
    minfer_model* m = nullptr;
    REQUIRE_MESSAGE(minfer_open_with_options(path.c_str(), k, v, 1, &m) == MINFER_OK, minfer_last_error());
    return m;
}

std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> logits_of(minfer_context* ctx, const minfer_model* m) {
    std::vector<float> out(static_cast<size_t>(minfer_model_n_vocab(m)));
    REQUIRE(minfer_context_logits(ctx, out.data(), out.size()) == MINFER_OK);
    return out;
}

// A fresh empty directory under the build's test directory.
std::string temp_dir(const char* name) {
    std::string pattern = test::tmp_path(std::string(name) + "-XXXXXX");
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    return pattern;
}

}  // namespace

TEST_SUITE("api") {
    TEST_CASE("status strings are distinct and unknown values are named as such") {
        std::set<std::string> seen;
        for (int s = 0; s <= 16; ++s) {
            std::string name = minfer_status_string(static_cast<minfer_status>(s));
            CHECK(name.rfind("MINFER_", 0) == 0);
            CHECK(name != "MINFER_ERR_UNKNOWN_STATUS");
            seen.insert(name);
        }
        CHECK(seen.size() == 17);
        CHECK(std::string(minfer_status_string(static_cast<minfer_status>(999))) == "MINFER_ERR_UNKNOWN_STATUS");
    }

    TEST_CASE("open checks its arguments and names the file") {
        minfer_model* m = reinterpret_cast<minfer_model*>(0x1);
        CHECK(minfer_open(nullptr, &m) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(m == nullptr);
        CHECK(std::string(minfer_last_error()).find("path") != std::string::npos);
        CHECK(minfer_open("x.gguf", nullptr) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_open("/no/such/dir/model.gguf", &m) == MINFER_ERR_IO);
        CHECK(std::string(minfer_last_error()).find("/no/such/dir/model.gguf") != std::string::npos);
        CHECK(std::string(minfer_last_error()).find("No such file") != std::string::npos);
        const char* k[] = {"device"};
        CHECK(minfer_open_with_options("x.gguf", k, nullptr, 1, &m) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_open_with_options(tiny_path().c_str(), nullptr, nullptr, 0, &m) == MINFER_OK);
        minfer_close(m);
    }

    TEST_CASE("getters on NULL handles are harmless") {
        CHECK(std::string(minfer_model_architecture(nullptr)).empty());
        CHECK(minfer_model_n_vocab(nullptr) == 0);
        CHECK(minfer_model_n_params(nullptr) == 0);
        CHECK(minfer_model_tensor_count(nullptr) == 0);
        CHECK(minfer_model_meta_count(nullptr) == 0);
        CHECK(minfer_model_meta_key(nullptr, 0) == nullptr);
        CHECK(minfer_context_n_ctx(nullptr) == 0);
        CHECK(minfer_model_tensor_info(nullptr, 0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr) ==
              MINFER_ERR_INVALID_ARGUMENT);
        minfer_close(nullptr);
        minfer_context_free(nullptr);
        int32_t tok = 0;
        CHECK(minfer_decode(nullptr, &tok) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_prefill(nullptr, &tok, 1) == MINFER_ERR_INVALID_ARGUMENT);
    }

    TEST_CASE("metadata queries: types, values, errors, buffers") {
        minfer_model* m = open_cpu(tiny_path());
        const size_t n = minfer_model_meta_count(m);
        REQUIRE(n > 10);
        CHECK(std::string(minfer_model_meta_key(m, 0)) == "general.architecture");
        CHECK(minfer_model_meta_key(m, n) == nullptr);

        minfer_meta_type type, elem;
        uint64_t len = 0;
        REQUIRE(minfer_model_meta_type(m, "tokenizer.ggml.tokens", &type, &elem, &len) == MINFER_OK);
        CHECK(type == MINFER_META_ARRAY);
        CHECK(elem == MINFER_META_STRING);
        CHECK(len == 512);
        REQUIRE(minfer_model_meta_type(m, "qwen2.block_count", &type, nullptr, &len) == MINFER_OK);
        CHECK(type == MINFER_META_UINT32);
        CHECK(len == 0);

        int64_t i = 0;
        CHECK(minfer_model_meta_int(m, "qwen2.block_count", &i) == MINFER_OK);
        CHECK(i == 2);
        CHECK(minfer_model_meta_int(m, "minfer.synth.seed", &i) == MINFER_OK);
        CHECK(i == 11);
        CHECK(minfer_model_meta_int(m, "general.architecture", &i) == MINFER_ERR_WRONG_TYPE);
        CHECK(std::string(minfer_last_error()).find("general.architecture") != std::string::npos);
        CHECK(minfer_model_meta_int(m, "no.such.key", &i) == MINFER_ERR_NOT_FOUND);
        CHECK(std::string(minfer_last_error()).find("no.such.key") != std::string::npos);
        double d = 0;
        CHECK(minfer_model_meta_float(m, "qwen2.rope.freq_base", &d) == MINFER_OK);
        CHECK(d == 1000000.0);
        CHECK(minfer_model_meta_float(m, "qwen2.block_count", &d) == MINFER_ERR_WRONG_TYPE);

        char buf[128];
        size_t slen = 0;
        CHECK(minfer_model_meta_string(m, "general.architecture", buf, sizeof buf, &slen) == MINFER_OK);
        CHECK(std::string(buf) == "qwen2");
        CHECK(slen == 5);
        CHECK(minfer_model_meta_string(m, "qwen2.block_count", buf, sizeof buf, &slen) == MINFER_OK);
        CHECK(std::string(buf) == "2");
        CHECK(minfer_model_meta_string(m, "tokenizer.ggml.add_bos_token", buf, sizeof buf, &slen) == MINFER_OK);
        CHECK(std::string(buf) == "false");
        CHECK(minfer_model_meta_string(m, "tokenizer.ggml.tokens", buf, sizeof buf, &slen) == MINFER_ERR_WRONG_TYPE);
        std::memset(buf, 'Z', sizeof buf);
        CHECK(minfer_model_meta_string(m, "general.name", buf, 4, &slen) == MINFER_ERR_BUFFER_TOO_SMALL);
        CHECK(slen == std::strlen("minfer synthetic qwen2-tiny f16 (random weights)"));
        CHECK(buf[0] == 'Z');  // nothing written
        std::vector<char> big(slen + 1);
        CHECK(minfer_model_meta_string(m, "general.name", big.data(), big.size(), &slen) == MINFER_OK);
        CHECK(std::string(big.data()) == "minfer synthetic qwen2-tiny f16 (random weights)");
        minfer_close(m);
    }

    TEST_CASE("tensor queries match the file bytes") {
        const std::string path = tiny_path("qwen3-tiny", "f32");
        minfer_model* m = open_cpu(path);
        const std::vector<uint8_t> file = read_file(path);
        const size_t n = minfer_model_tensor_count(m);
        REQUIRE(n == 1 + 2 * 11 + 1);  // embedding, 11 per qwen3 layer, output norm (tied)
        uint64_t params = 0;
        for (size_t k = 0; k < n; ++k) {
            const char* name = nullptr;
            int32_t type = -1, nd = 0;
            int64_t dims[4];
            uint64_t off = 0, nb = 0;
            REQUIRE(minfer_model_tensor_info(m, k, &name, &type, &nd, dims, &off, &nb) == MINFER_OK);
            CHECK(type == 0);
            CHECK(off + nb <= file.size());
            CHECK(nb == static_cast<uint64_t>(dims[0] * dims[1] * dims[2] * dims[3]) * 4);
            params += nb / 4;
            if (std::string(name).find("norm") != std::string::npos) {
                // Norm weights are near 1 in the synthetic file: read them back from the file bytes.
                float v;
                std::memcpy(&v, file.data() + off, 4);
                CHECK(v == doctest::Approx(1.0).epsilon(0.2));
            }
        }
        CHECK(params == minfer_model_n_params(m));
        CHECK(minfer_model_tensor_info(m, n, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr) == MINFER_ERR_NOT_FOUND);
        int32_t types[1];
        size_t nt = 0;
        CHECK(minfer_model_tensor_types(m, types, 0, &nt) == MINFER_OK);
        CHECK(nt == 1);
        CHECK(std::string(minfer_type_name(12)) == "q4_K");
        CHECK(std::string(minfer_type_name(4)) == "q4_2");
        CHECK(std::string(minfer_type_name(-3)).empty());
        CHECK(std::string(minfer_type_name(1000)).empty());
        minfer_close(m);
    }

    TEST_CASE("contexts validate tokens and room before anything else, and change nothing on error") {
        minfer_model* m = open_cpu(tiny_path());
        REQUIRE(minfer_set_option(m, "ctx_len", "4") == MINFER_OK);
        minfer_context* ctx = nullptr;
        REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
        CHECK(minfer_context_n_ctx(ctx) == 4);
        CHECK(minfer_context_n_past(ctx) == 0);
        const int32_t bad[] = {1, 2, 512};
        CHECK(minfer_prefill(ctx, bad, 3) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(std::string(minfer_last_error()).find("token 512 at index 2") != std::string::npos);
        const int32_t neg[] = {-1};
        CHECK(minfer_prefill(ctx, neg, 1) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_prefill(ctx, nullptr, 2) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_prefill(ctx, bad, 0) == MINFER_ERR_INVALID_ARGUMENT);
        const int32_t five[] = {1, 2, 3, 4, 5};
        CHECK(minfer_prefill(ctx, five, 5) == MINFER_ERR_CONTEXT_FULL);
        CHECK(std::string(minfer_last_error()).find("do not fit") != std::string::npos);
        CHECK(minfer_context_n_past(ctx) == 0);
        int32_t tok = -5;
        CHECK(minfer_decode(ctx, &tok) == MINFER_ERR_INVALID_ARGUMENT);  // no logits yet
        CHECK(tok == -5);
        REQUIRE(minfer_prefill(ctx, five, 4) == MINFER_OK);
        CHECK(minfer_context_n_past(ctx) == 4);
        CHECK(minfer_decode(ctx, nullptr) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_decode(ctx, &tok) == MINFER_ERR_CONTEXT_FULL);
        CHECK(minfer_context_n_past(ctx) == 4);
        minfer_context_free(ctx);
        minfer_context* none = reinterpret_cast<minfer_context*>(0x1);
        CHECK(minfer_context_create(nullptr, &none) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(none == nullptr);
        minfer_close(m);
    }

    TEST_CASE("a context keeps its model alive after minfer_close") {
        minfer_model* m = open_cpu(tiny_path());
        minfer_context* ctx = nullptr;
        REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
        minfer_close(m);
        const int32_t t[] = {600};
        CHECK(minfer_prefill(ctx, t, 1) == MINFER_ERR_INVALID_ARGUMENT);  // reads the model's vocabulary
        CHECK(std::string(minfer_last_error()).find("[0, 512)") != std::string::npos);
        minfer_context_free(ctx);
    }

    TEST_CASE("the library is silent by default; the log callback gets lines by level") {
        const std::string path = tiny_path();
        static std::vector<std::string> lines;
        lines.clear();
        minfer_set_log_callback(nullptr, nullptr);
        minfer_close(open_cpu(path));
        CHECK(lines.empty());
        minfer_set_log_callback([](minfer_log_level, const char* msg, void*) { lines.emplace_back(msg); }, nullptr);
        minfer_close(open_cpu(path));
        REQUIRE(lines.size() >= 1);
        CHECK(lines.back().find("loaded") != std::string::npos);
        lines.clear();
        const char* k[] = {"device", "log_level"};
        const char* v[] = {"cpu", "warn"};
        minfer_model* m = nullptr;
        REQUIRE(minfer_open_with_options(path.c_str(), k, v, 2, &m) == MINFER_OK);
        CHECK(lines.empty());
        minfer_close(m);
        minfer_set_log_callback(nullptr, nullptr);
    }

    TEST_CASE("progress reports load stages and can cancel") {
        const std::string path = tiny_path();
        static std::vector<uint64_t> done;
        done.clear();
        minfer_set_progress_callback(
            [](const char* stage, uint64_t d, uint64_t total, void*) {
                CHECK(std::string(stage) == "load");
                CHECK(d <= total);
                done.push_back(d);
                return 0;
            },
            nullptr);
        minfer_close(open_cpu(path));
        CHECK(done.size() >= 2);
        CHECK(done.back() == 3);
        minfer_set_progress_callback([](const char*, uint64_t d, uint64_t, void*) { return d >= 1 ? 1 : 0; }, nullptr);
        minfer_model* m = reinterpret_cast<minfer_model*>(0x1);
        CHECK(minfer_open(path.c_str(), &m) == MINFER_ERR_CANCELLED);
        CHECK(m == nullptr);
        CHECK(std::string(minfer_last_error()).find("cancelled") != std::string::npos);
        minfer_set_progress_callback(nullptr, nullptr);
    }

    TEST_CASE("the last error is per thread") {
        CHECK(minfer_set_option(nullptr, "main.thread.key", "1") == MINFER_ERR_UNKNOWN_OPTION);
        const std::string mine = minfer_last_error();
        std::string theirs;
        std::thread t([&] {
            CHECK(std::string(minfer_last_error()).empty());
            minfer_set_option(nullptr, "other.thread.key", "1");
            theirs = minfer_last_error();
        });
        t.join();
        CHECK(theirs.find("other.thread.key") != std::string::npos);
        CHECK(std::string(minfer_last_error()) == mine);
    }

    TEST_CASE("one model, many threads: contexts and queries in parallel") {
        minfer_model* m = open_cpu(tiny_path());
        std::atomic<int> ok{0};
        std::vector<std::thread> ts;
        for (int i = 0; i < 8; ++i)
            ts.emplace_back([&] {
                for (int k = 0; k < 50; ++k) {
                    minfer_context* c = nullptr;
                    if (minfer_context_create(m, &c) != MINFER_OK) return;
                    int64_t layers = 0;
                    const int32_t bad[] = {9999};
                    if (minfer_model_meta_int(m, "qwen2.block_count", &layers) == MINFER_OK && layers == 2 &&
                        minfer_prefill(c, bad, 1) == MINFER_ERR_INVALID_ARGUMENT)
                        ++ok;
                    minfer_context_free(c);
                }
            });
        for (auto& t : ts) t.join();
        CHECK(ok == 400);
        minfer_close(m);
    }

    TEST_CASE("device=cuda says why it cannot be used here; device=auto falls back to the CPU") {
        // TinyModel has head_dim 8, which the CUDA attention kernels do not take: device=cuda is refused
        // with the reason on every machine, and device=auto runs it on the CPU.
        const std::string path = test::tmp_path("api-head-dim-8.gguf");
        test::write_bytes(path, test::TinyModel().build());
        const char* k[] = {"device"};
        const char* v[] = {"cuda"};
        minfer_model* m = nullptr;
        const minfer_status st = minfer_open_with_options(path.c_str(), k, v, 1, &m);
        const std::string msg = minfer_last_error();
        CHECK(m == nullptr);
        const minfer::device::Probe probe = minfer::device::probe_cuda();
        if (!probe.built) {
            CHECK(st == MINFER_ERR_UNSUPPORTED);
            CHECK(msg.find("no CUDA backend") != std::string::npos);
        } else if (probe.n_devices == 0) {
            CHECK(st == MINFER_ERR_DEVICE);
            CHECK(msg.find("device=cuda: no usable GPU") != std::string::npos);
        } else {
            CHECK(st == MINFER_ERR_UNSUPPORTED);
            CHECK_MESSAGE(msg.find("head_dim 8") != std::string::npos, msg);
        }
        const char* va[] = {"auto"};
        REQUIRE(minfer_open_with_options(path.c_str(), k, va, 1, &m) == MINFER_OK);
        CHECK(std::string(minfer_model_device(m)) == "cpu");
        minfer_close(m);
        // A model the kernels cover opens on the GPU where there is one.
        m = nullptr;
        const minfer_status st2 = minfer_open_with_options(tiny_path().c_str(), k, v, 1, &m);
        CHECK(st2 == (probe.n_devices > 0 ? MINFER_OK : st));
        if (st2 == MINFER_OK) CHECK(std::string(minfer_model_device(m)) == "cuda");
        minfer_close(m);
    }

    TEST_CASE("open refuses what is not a regular file at once: a FIFO with no writer, a directory, a device") {
        const std::string dir = temp_dir("api-not-regular");
        const std::string fifo = dir + "/model.gguf";
        REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
        // In a thread with a time limit, so that a regression fails here instead of hanging the suite.
        auto opened = std::async(std::launch::async, [&] {
            minfer_model* m = nullptr;
            const minfer_status st = minfer_open(fifo.c_str(), &m);
            const std::string msg = minfer_last_error();
            minfer_close(m);
            return std::make_pair(st, msg);
        });
        if (opened.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
            // Unblock the reader: open the FIFO for writing, then close it.
            for (int i = 0; i < 100 && opened.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout; ++i) {
                const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
                if (fd >= 0) ::close(fd);
            }
            FAIL_CHECK("minfer_open blocked on a FIFO with no writer");
        }
        const auto [st, msg] = opened.get();
        CHECK(st == MINFER_ERR_IO);
        CHECK_MESSAGE(msg.find("FIFO") != std::string::npos, msg);
        CHECK(msg.find(fifo) != std::string::npos);

        minfer_model* m = reinterpret_cast<minfer_model*>(0x1);
        CHECK(minfer_open(dir.c_str(), &m) == MINFER_ERR_IO);
        CHECK(m == nullptr);
        std::string why = minfer_last_error();
        CHECK_MESSAGE(why.find("directory") != std::string::npos, why);
        for (const char* dev : {"/dev/zero", "/dev/null"}) {
            CHECK(minfer_open(dev, &m) == MINFER_ERR_IO);
            why = minfer_last_error();
            CHECK_MESSAGE(why.find("character device") != std::string::npos, why);
        }
        ::unlink(fifo.c_str());
        ::rmdir(dir.c_str());
    }

    TEST_CASE("prefill checks room before it reads a token: a huge n reads nothing") {
        minfer_model* m = open_cpu(tiny_path());
        REQUIRE(minfer_set_option(m, "ctx_len", "4") == MINFER_OK);
        minfer_context* ctx = nullptr;
        REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
        // One valid token on the heap, and n far beyond it: reading past it is what ASan would report.
        const std::vector<int32_t> one(1, 1);
        CHECK(minfer_prefill(ctx, one.data(), size_t{1} << 30) == MINFER_ERR_CONTEXT_FULL);
        CHECK(std::string(minfer_last_error()).find("do not fit") != std::string::npos);
        CHECK(minfer_prefill(ctx, one.data(), SIZE_MAX) == MINFER_ERR_CONTEXT_FULL);
        // Room is checked first: too many tokens with a bad one among them is CONTEXT_FULL.
        const int32_t bad[] = {1, 2, 512, 3, 4};
        CHECK(minfer_prefill(ctx, bad, 5) == MINFER_ERR_CONTEXT_FULL);
        CHECK(minfer_prefill(ctx, bad, 4) == MINFER_ERR_INVALID_ARGUMENT);
        REQUIRE(minfer_prefill(ctx, one.data(), 1) == MINFER_OK);
        CHECK(minfer_prefill(ctx, bad, 4) == MINFER_ERR_CONTEXT_FULL);
        CHECK(minfer_context_n_past(ctx) == 1);
        minfer_context_free(ctx);
        minfer_close(m);
    }

    TEST_CASE("a decode whose forward fails leaves the context unchanged, its generator included") {
        minfer_model* m = open_cpu(tiny_path());
        minfer_sampler_params p;
        minfer_sampler_params_init(&p);
        p.temperature = 1.5f;
        p.top_k = 0;
        p.top_p = 1.0f;
        p.min_p = 0.0f;
        p.seed = 1234;
        minfer_context *a = nullptr, *b = nullptr;
        REQUIRE(minfer_context_create(m, &a) == MINFER_OK);
        REQUIRE(minfer_context_create(m, &b) == MINFER_OK);
        const int32_t prompt[] = {10, 20, 30};
        for (minfer_context* c : {a, b}) {
            REQUIRE(minfer_context_set_sampler(c, &p) == MINFER_OK);
            REQUIRE(minfer_prefill(c, prompt, 3) == MINFER_OK);
        }
        const std::vector<float> before = logits_of(a, m);
        int32_t tok = -7;
        minfer::cpu::testing::fail_next_forwards(1);
        CHECK(minfer_decode(a, &tok) == MINFER_ERR_INTERNAL);
        minfer::cpu::testing::fail_next_forwards(0);
        CHECK(std::string(minfer_last_error()).find("injected fault") != std::string::npos);
        CHECK(tok == -7);
        CHECK(minfer_context_n_past(a) == 3);
        CHECK(logits_of(a, m) == before);
        CHECK(minfer_context_stop_reason(a) == MINFER_STOP_NONE);
        // The failed decode drew nothing: from here a and b, alike so far, sample the same tokens.
        std::vector<int32_t> ta, tb;
        for (int i = 0; i < 16; ++i) {
            int32_t x = -1, y = -1;
            REQUIRE(minfer_decode(a, &x) == MINFER_OK);
            REQUIRE(minfer_decode(b, &y) == MINFER_OK);
            ta.push_back(x);
            tb.push_back(y);
        }
        CHECK(ta == tb);
        CHECK(logits_of(a, m) == logits_of(b, m));
        // A failed prefill changes nothing either.
        minfer::cpu::testing::fail_next_forwards(1);
        CHECK(minfer_prefill(a, prompt, 3) == MINFER_ERR_INTERNAL);
        minfer::cpu::testing::fail_next_forwards(0);
        CHECK(minfer_context_n_past(a) == 19);
        CHECK(logits_of(a, m) == logits_of(b, m));
        minfer_context_free(a);
        minfer_context_free(b);
        minfer_close(m);
    }

    // The CPU backend sets up its threads and their buffers anew when the threads option changes; a setup
    // that fails (here made to throw std::bad_alloc) must leave the old pair whole, or the next forward
    // would run the new threads on buffers sized for the old count (ASan sees the overflow).
    TEST_CASE("a forward whose thread setup fails reports OUT_OF_MEMORY and leaves the context whole") {
        minfer_model* m = open_cpu(tiny_path());
        REQUIRE(minfer_set_option(m, "threads", "1") == MINFER_OK);
        minfer_context *a = nullptr, *b = nullptr;
        REQUIRE(minfer_context_create(m, &a) == MINFER_OK);
        REQUIRE(minfer_context_create(m, &b) == MINFER_OK);
        const int32_t prompt[] = {10, 20, 30, 40, 50, 60, 70, 80};
        for (minfer_context* c : {a, b}) REQUIRE(minfer_prefill(c, prompt, 8) == MINFER_OK);
        const std::vector<float> before = logits_of(a, m);
        REQUIRE(minfer_set_option(m, "threads", "3") == MINFER_OK);
        int32_t tok = -7;
        minfer::cpu::testing::fail_next_thread_setups(1);
        CHECK(minfer_decode(a, &tok) == MINFER_ERR_OUT_OF_MEMORY);
        minfer::cpu::testing::fail_next_thread_setups(0);
        CHECK(std::string(minfer_last_error()).find("out of host memory") != std::string::npos);
        CHECK(tok == -7);
        CHECK(minfer_context_n_past(a) == 8);
        CHECK(logits_of(a, m) == before);
        // Three threads from here on, for both: the same greedy tokens and logits.
        for (int i = 0; i < 8; ++i) {
            int32_t x = -1, y = -1;
            REQUIRE(minfer_decode(a, &x) == MINFER_OK);
            REQUIRE(minfer_decode(b, &y) == MINFER_OK);
            CHECK(x == y);
        }
        CHECK(logits_of(a, m) == logits_of(b, m));
        // A context whose setup fails at its creation is not made.
        minfer_context* c = nullptr;
        minfer::cpu::testing::fail_next_thread_setups(1);
        CHECK(minfer_context_create(m, &c) == MINFER_ERR_OUT_OF_MEMORY);
        minfer::cpu::testing::fail_next_thread_setups(0);
        CHECK(c == nullptr);
        minfer_context_free(a);
        minfer_context_free(b);
        minfer_close(m);
    }

    TEST_CASE("decode refuses when every token is banned, and changes nothing") {
        minfer_model* m = open_cpu(tiny_path());
        const int32_t n_vocab = minfer_model_n_vocab(m);
        minfer_context *ctx = nullptr, *ref = nullptr;
        REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
        REQUIRE(minfer_context_create(m, &ref) == MINFER_OK);
        const int32_t prompt[] = {10, 20, 30};
        minfer_sampler_params p;
        minfer_sampler_params_init(&p);
        p.seed = 99;
        for (float temperature : {0.0f, 0.8f}) {
            CAPTURE(temperature);
            p.temperature = temperature;
            for (minfer_context* c : {ctx, ref}) {
                REQUIRE(minfer_context_reset(c) == MINFER_OK);
                REQUIRE(minfer_context_set_sampler(c, &p) == MINFER_OK);
                REQUIRE(minfer_prefill(c, prompt, 3) == MINFER_OK);
            }
            for (int32_t t = 0; t < n_vocab; ++t) REQUIRE(minfer_context_set_logit_bias(ctx, t, -INFINITY) == MINFER_OK);
            const std::vector<float> before = logits_of(ctx, m);
            int32_t tok = -7;
            CHECK(minfer_decode(ctx, &tok) == MINFER_ERR_INVALID_ARGUMENT);
            const std::string why = minfer_last_error();
            CHECK_MESSAGE(why.find("every token is banned") != std::string::npos, why);
            CHECK(tok == -7);
            CHECK(minfer_context_n_past(ctx) == 3);
            CHECK(logits_of(ctx, m) == before);
            // Lifting the bans: the same tokens as a context that never had them (no random number was
            // drawn by the refused call).
            REQUIRE(minfer_context_clear_logit_bias(ctx) == MINFER_OK);
            for (int i = 0; i < 8; ++i) {
                int32_t x = -1, y = -1;
                REQUIRE(minfer_decode(ctx, &x) == MINFER_OK);
                REQUIRE(minfer_decode(ref, &y) == MINFER_OK);
                CHECK(x == y);
            }
        }
        // One token left unbanned is the one chosen.
        REQUIRE(minfer_context_reset(ctx) == MINFER_OK);
        REQUIRE(minfer_prefill(ctx, prompt, 3) == MINFER_OK);
        for (int32_t t = 0; t < n_vocab; ++t)
            REQUIRE(minfer_context_set_logit_bias(ctx, t, t == 77 ? 0.0f : -INFINITY) == MINFER_OK);
        int32_t tok = -1;
        REQUIRE(minfer_decode(ctx, &tok) == MINFER_OK);
        CHECK(tok == 77);
        minfer_context_free(ctx);
        minfer_context_free(ref);
        minfer_close(m);
    }

    TEST_CASE("mmap=false copies the file at load: truncating it on disk afterwards changes nothing") {
        const std::string path = test::tmp_path("api-load-copy.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q8_0", 21) == MINFER_OK);
        const int32_t prompt[] = {10, 20, 30, 40};
        auto run = [&](minfer_model* m, std::vector<float>* logits) {
            minfer_context* ctx = nullptr;
            REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
            std::vector<int32_t> toks;
            REQUIRE(minfer_prefill(ctx, prompt, 4) == MINFER_OK);
            for (int i = 0; i < 4; ++i) {
                int32_t t = -1;
                REQUIRE(minfer_decode(ctx, &t) == MINFER_OK);
                toks.push_back(t);
            }
            *logits = logits_of(ctx, m);
            minfer_context_free(ctx);
            return toks;
        };
        const char* k[] = {"device", "mmap"};
        const char* v[] = {"cpu", "false"};
        minfer_model* m = nullptr;
        REQUIRE_MESSAGE(minfer_open_with_options(path.c_str(), k, v, 2, &m) == MINFER_OK, std::string(minfer_last_error()));
        char buf[16];
        size_t len = 0;
        REQUIRE(minfer_get_option(m, "mmap", buf, sizeof buf, &len) == MINFER_OK);
        CHECK(std::string(buf) == "false");
        CHECK(minfer_set_option(m, "mmap", "true") == MINFER_ERR_OPTION_LOCKED);
        std::vector<float> l1, l2;
        const std::vector<int32_t> t1 = run(m, &l1);
        REQUIRE(::truncate(path.c_str(), 0) == 0);
        const std::vector<int32_t> t2 = run(m, &l2);
        CHECK(t1 == t2);
        CHECK(l1 == l2);
        char name[128];
        CHECK(minfer_model_meta_string(m, "general.name", name, sizeof name, &len) == MINFER_OK);  // metadata too
        CHECK(std::string(name).find("qwen2-tiny") != std::string::npos);
        minfer_close(m);

        // The default maps the file: the same truncation kills the process with SIGBUS on the next read
        // of the weights (in a child process; under ASan its handler reports the fault and aborts).
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q8_0", 21) == MINFER_OK);
        const pid_t child = fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            minfer_model* mm = nullptr;
            const char* kk[] = {"device", "threads"};
            const char* vv[] = {"cpu", "1"};
            if (minfer_open_with_options(path.c_str(), kk, vv, 2, &mm) != MINFER_OK) _exit(2);
            minfer_context* ctx = nullptr;
            if (minfer_context_create(mm, &ctx) != MINFER_OK) _exit(3);
            // Exit quietly on SIGBUS where the handler can be installed (ASan may keep its own).
            struct sigaction sa = {};
            sa.sa_handler = [](int) { _exit(42); };
            sigaction(SIGBUS, &sa, nullptr);
            if (::truncate(path.c_str(), 0) != 0) _exit(4);
            minfer_prefill(ctx, prompt, 4);
            _exit(0);
        }
        int status = 0;
        REQUIRE(waitpid(child, &status, 0) == child);
        // 42: our SIGBUS handler ran; killed by SIGBUS, or by SIGABRT from ASan's report of it.
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        CHECK_MESSAGE((code == 42 || sig == SIGBUS || sig == SIGABRT), "the child ended with status ", code, ", signal ", sig);
        ::unlink(path.c_str());
    }

    TEST_CASE("synth: presets, determinism, errors") {
        std::set<std::string> names;
        for (size_t i = 0; i < minfer_synth_preset_count(); ++i) names.insert(minfer_synth_preset_name(i));
        for (const char* want : {"qwen2-0.5b", "qwen2-1.5b", "qwen2-7b", "qwen3-0.6b", "qwen3-8b", "qwen2-tiny", "qwen3-tiny"})
            CHECK(names.count(want) == 1);
        CHECK(minfer_synth_preset_name(minfer_synth_preset_count()) == nullptr);
        const std::string a = test::tmp_path("synth-a.gguf"), b = test::tmp_path("synth-b.gguf"), c = test::tmp_path("synth-c.gguf");
        REQUIRE(minfer_synth(a.c_str(), "qwen3-tiny", "bf16", 42) == MINFER_OK);
        REQUIRE(minfer_synth(b.c_str(), "qwen3-tiny", "bf16", 42) == MINFER_OK);
        REQUIRE(minfer_synth(c.c_str(), "qwen3-tiny", "bf16", 43) == MINFER_OK);
        CHECK(read_file(a) == read_file(b));
        CHECK(read_file(a) != read_file(c));
        CHECK(minfer_synth(a.c_str(), "qwen9-huge", "f16", 1) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(std::string(minfer_last_error()).find("unknown preset 'qwen9-huge'") != std::string::npos);
        CHECK(minfer_synth(a.c_str(), "qwen2-tiny", "q9_9", 1) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(std::string(minfer_last_error()).find("unknown mix 'q9_9'") != std::string::npos);
        CHECK(minfer_synth("/no/such/dir/x.gguf", "qwen2-tiny", "f16", 1) == MINFER_ERR_IO);
        CHECK(minfer_synth(nullptr, "qwen2-tiny", "f16", 1) == MINFER_ERR_INVALID_ARGUMENT);
        // The failed writes left the earlier file intact.
        CHECK(read_file(a) == read_file(b));
    }
}
