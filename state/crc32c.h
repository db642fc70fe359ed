// CRC-32C (Castagnoli polynomial, reflected 0x82F63B78): the checksum of kiln's journal and
// snapshot records (state/journal.h). Software implementation (slicing-by-8 tables).
// Pure functions; thread-safe (the table is built once, on first use, thread-safely).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kiln::crc32c {

/// Extends `crc` (the CRC-32C of some data A) with `data`, returning the CRC-32C of A+data.
/// Extend(0, x) is the CRC-32C of x.
uint32_t Extend(uint32_t crc, const void* data, size_t n);

/// CRC-32C of `data`. Value("123456789") == 0xE3069283.
inline uint32_t Value(std::string_view data) { return Extend(0, data.data(), data.size()); }

}  // namespace kiln::crc32c
