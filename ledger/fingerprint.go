package ledger

import (
	"crypto/subtle"
	"encoding/hex"
)

// Fingerprint identifies a request's content: the SHA-256 that package
// fingerprint computes from its method, concrete target (escaped path and
// raw query) and canonical body.
// Two requests with the same fingerprint are the same request for the
// purposes of idempotency.
type Fingerprint [32]byte

// Equal compares two fingerprints in constant time.
func (f Fingerprint) Equal(g Fingerprint) bool {
	return subtle.ConstantTimeCompare(f[:], g[:]) == 1
}

// IsZero reports whether f is the zero fingerprint.
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }

// Short returns the first 6 bytes in hex, enough to tell fingerprints apart
// in messages and logs.
func (f Fingerprint) Short() string { return hex.EncodeToString(f[:6]) }

// String returns the full fingerprint in hex.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }
