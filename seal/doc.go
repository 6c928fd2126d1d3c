// Package seal encrypts what oncekv stores on the caller's behalf:
// XAES-256-GCM (AES-256-GCM under a key derived for a 192-bit random
// nonce, https://c2sp.org/XAES-256-GCM, built from the standard library's
// AES and GCM), and the ID of the key in every sealed value, so keys can
// rotate. Set a
// Ring in kv.Options.Cipher and the packages seal their payloads with it:
// stored response headers and bodies (ledger), intent payloads, results and
// provider error text (sideeffect), outbox event payloads, and the values
// of conditional tables that opt in (Options.Seal).
//
// Each value is sealed with associated data naming where it lives (its
// kind, bucket and key), so a sealed value copied to another record fails
// to open (ErrTampered) instead of replaying another request's answer.
// Values are compressed, when that pays, before they are sealed.
//
// What stays clear: bucket names, keys (scopes, tenants, idempotency keys,
// intent IDs, event IDs, row IDs), statuses, versions, times and sizes,
// which look-ups, listings, sweeps and the consistency check need. Key
// names and tenants remain visible to anyone with the file.
//
// Keys come from the application and are never stored in the database:
// NewRing takes the current key and the older ones still to be read;
// ParseKey and ReadKeyFile read "ID:HEX" (a key ID and 32 bytes in hex),
// the format of the CLI's --key-file and of $ONCEKV_KEY. A value sealed
// under a key the ring lacks fails with ErrUnknownKey, naming the key ID;
// tools without any key show such values as "encrypted (key id N)".
//
// Rotation: open the database with the new key current and the old ones
// older (NewRing(newKey, oldKey)): new values use the new key, old ones
// still open. inspect.Rekey (or `oncekv rekey`
// on a stopped service's file) then rewrites every value under the new key
// in short, bounded, resumable transactions, after which the old keys can
// be retired. A rekey also seals values written before the database had a
// key, except rows of conditional tables that did not opt in.
//
// # Why XAES-256-GCM
//
// AES-256-GCM with random 96-bit nonces under one key is safe for 2^32
// values (NIST SP 800-38D, 8.3): past that, two values are too likely to
// share a nonce, which under GCM leaks the XOR of their plaintexts and the
// key that authenticates every value. A service sealing 1,000 values a
// second reaches 2^32 in 50 days; oncekv's benchmarks seal 17,000 a
// second. XAES-256-GCM derives, from the key and the first 96 bits of a
// 192-bit random nonce, a key of its own for the value (NIST SP 800-108
// counter mode over CMAC-AES) and runs AES-256-GCM under it with the last
// 96 bits: random nonces are then safe for far more values than any
// database holds. A ring derives one key per 2^24 values it seals (the
// values of one such epoch share the nonce's first half, which is still
// XAES-256-GCM) and keeps the keys it derived to open values, so sealing
// and opening cost what AES-256-GCM costs alone.
//
// # Layout
//
// A sealed value is 0xE5 'S' 0x02, the key ID (4 bytes, big endian), the
// nonce (24 bytes), the ciphertext and GCM's 16-byte tag: Overhead (47)
// bytes more than its plaintext. Values sealed before 2026-12-05 have the
// layout byte 0x01 and a 12-byte nonce (AES-256-GCM under the key
// itself); they still open, and a rekey to a new key moves them to the
// current layout.
package seal
