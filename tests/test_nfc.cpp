// NFC against the Unicode consortium's NormalizationTest.txt (columns source -> NFC, extracted into
// tests/data/nfc_cases.txt by scripts/gen_nfc_tables.py), plus hand cases and invalid bytes.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <cstdint>
#include <string>

#include "tokenizer/normalize.h"

namespace {

std::string utf8(const std::string& hex_list) {
    std::string out;
    std::istringstream in(hex_list);
    std::string h;
    while (in >> h) {
        const uint32_t cp = static_cast<uint32_t>(std::stoul(h, nullptr, 16));
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xc0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xe0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        } else {
            out += static_cast<char>(0xf0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        }
    }
    return out;
}

}  // namespace

TEST_SUITE("nfc") {
    TEST_CASE("every case of the Unicode normalization test file") {
        std::ifstream f(std::string(MINFER_TEST_DATA) + "/nfc_cases.txt");
        REQUIRE(f.good());
        std::string line;
        size_t n = 0, bad = 0;
        while (std::getline(f, line)) {
            if (line.empty() || line[0] == '#') continue;
            const size_t semi = line.find(';');
            const std::string src = utf8(line.substr(0, semi)), want = utf8(line.substr(semi + 1));
            ++n;
            if (minfer::tokenizer::nfc(src) != want && ++bad <= 10) MESSAGE("NFC mismatch for ", line);
            // NFC is idempotent.
            if (minfer::tokenizer::nfc(want) != want && ++bad <= 10) MESSAGE("NFC(NFC) changes ", line);
        }
        CHECK(n > 18000);
        CHECK(bad == 0);
    }

    TEST_CASE("hand cases and invalid bytes") {
        using minfer::tokenizer::nfc;
        CHECK(nfc("e\xcc\x81") == "\xc3\xa9");                    // e + U+0301 -> é
        CHECK(nfc("A\xcc\x8a" "ngstr\xc3\xb6m") == "\xc3\x85ngstr\xc3\xb6m");  // Å
        CHECK(nfc("\xe2\x84\xab") == "\xc3\x85");                 // U+212B ANGSTROM SIGN -> U+00C5
        CHECK(nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8") == "\xea\xb0\x81");  // conjoining jamo -> 각
        CHECK(nfc("plain ascii") == "plain ascii");
        CHECK(nfc("a\xff" "e\xcc\x81") == "a\xff\xc3\xa9");        // an invalid byte is kept
        CHECK(nfc("\xff\xcc\x81") == "\xff\xcc\x81");              // and never composes
        CHECK(nfc("") == "");
    }
}
