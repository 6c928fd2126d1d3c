// Package record encodes oncekv's stored records: a magic byte, the record
// kind, a layout version, varint and length-prefixed fields, and a CRC-32C.
// A Decoder never panics: truncated, bit-flipped or foreign input yields a
// *CorruptError (kv.CorruptError is the same type). Large values are
// compressed with zstd by Compress; Decompress bounds its output.
//
// # The model
//
// Every value oncekv stores is a record: the header (Magic, the Kind, the
// layout version) lets a reader refuse a value that is not what it
// expects, and the CRC-32C at the end catches a damaged one. Encoder
// appends fields; Decoder reads them back with bounds checked at each
// step, so hostile or damaged bytes (a fuzzer's, a disk's) end in a
// *CorruptError naming what was wrong, never in a panic or a misread.
// Layouts are versioned per kind, so a record written by older code is
// read by its own layout.
//
// Bodies over DefaultCompressThreshold are compressed with zstd
// (klauspost/compress); Decompress refuses output past
// MaxDecompressedSize, so a small record cannot expand into an exhausted
// heap. The format record (EncodeFormat, DecodeFormat) in MetaBucket
// stamps the file's layout.
package record
