// NFC against the Unicode consortium's NormalizationTest.txt (columns source -> NFC, extracted into
// tests/data/nfc_cases.txt by scripts/gen_nfc_tables.py), plus hand cases and invalid bytes; and the
// committed tables and cases against a fresh run of the script on the Unicode data files.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "helpers.h"
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

std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST_SUITE("nfc") {
    TEST_CASE("every case of the Unicode normalization test file") {
        const std::string path = std::string(MINFER_TEST_DATA) + "/nfc_cases.txt";
        std::ifstream f(path);
        REQUIRE_MESSAGE(f.good(), "cannot read " << path << " (written by scripts/gen_nfc_tables.py)");
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

    TEST_CASE("the NFC tables and cases are what scripts/gen_nfc_tables.py writes from the Unicode data") {
        // Everything this needs is installed by scripts/deps: a missing piece fails the test, naming it, so
        // the check cannot pass without having run. (The script itself writes no cases without the test file.)
        const std::filesystem::path root = std::filesystem::path(MINFER_TEST_DATA).parent_path().parent_path();
        const std::filesystem::path script = root / "scripts/gen_nfc_tables.py";
        const std::filesystem::path table = root / "lib/tokenizer/nfc_tables.h";
        const std::filesystem::path cases = root / "tests/data/nfc_cases.txt";
        const std::string ucd = "/usr/share/unicode";
        for (const char* name : {"UnicodeData.txt", "DerivedNormalizationProps.txt", "NormalizationTest.txt.bz2"}) {
            const std::string f = ucd + "/" + name;
            if (!std::filesystem::exists(f)) FAIL(f << " is missing (Debian: apt-get install unicode-data)");
        }
        for (const std::filesystem::path& f : {script, table, cases})
            if (!std::filesystem::exists(f)) FAIL(f.string() << " is missing: the source tree is not at " << root);
        if (std::system("command -v python3 >/dev/null 2>&1") != 0) FAIL("python3 is not installed");

        const std::string out_h = test::tmp_path("nfc_tables_regenerated.h");
        const std::string out_cases = test::tmp_path("nfc_cases_regenerated.txt");
        std::filesystem::remove(out_h);
        std::filesystem::remove(out_cases);
        const std::string cmd = "python3 '" + script.string() + "' '" + ucd + "' '" + out_h + "' '" + out_cases + "'";
        REQUIRE(std::system(cmd.c_str()) == 0);
        const std::string fresh_h = read_file(out_h), fresh_cases = read_file(out_cases);
        CHECK(!fresh_h.empty());
        CHECK(!fresh_cases.empty());
        CHECK_MESSAGE(fresh_h == read_file(table), "lib/tokenizer/nfc_tables.h differs from the script's output; rerun it");
        CHECK_MESSAGE(fresh_cases == read_file(cases), "tests/data/nfc_cases.txt differs from the script's output; rerun it");
        std::filesystem::remove(out_h);
        std::filesystem::remove(out_cases);
    }
}
