// Package seal encrypts what oncekv stores on the caller's behalf:
// AES-256-GCM (the standard library's), a random 96-bit nonce per value,
// and the ID of the key in every sealed value, so keys can rotate. Set a
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
// Sealed layout: 0xE5 'S' 0x01, the key ID (4 bytes, big endian), the
// nonce (12 bytes), the ciphertext and GCM's 16-byte tag.
package seal
