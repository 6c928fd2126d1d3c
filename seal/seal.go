package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Errors a value that does not open wraps (in a *OpenError).
var (
	// ErrUnknownKey: the value was sealed under a key the ring does not
	// hold (or there is no ring).
	ErrUnknownKey = errors.New("seal: sealed under a key not supplied")
	// ErrTampered: the value does not authenticate: altered, truncated, or
	// copied from another record (its associated data differs).
	ErrTampered = errors.New("seal: does not authenticate (altered, or moved from another record)")
	// ErrInvalidKey: a key that is not 32 bytes, a duplicate ID, or a key
	// file that does not parse.
	ErrInvalidKey = errors.New("seal: invalid key")
)

// OpenError reports a value that did not open.
type OpenError struct {
	KeyID uint32
	Err   error // ErrUnknownKey or ErrTampered
}

func (e *OpenError) Error() string { return fmt.Sprintf("%v (key %d)", e.Err, e.KeyID) }

// Unwrap returns ErrUnknownKey or ErrTampered.
func (e *OpenError) Unwrap() error { return e.Err }

// Key is one AES-256 key and its ID.
type Key struct {
	ID     uint32
	Secret [32]byte
}

// Ring holds the current key (new values are sealed with it) and older
// ones (still opened). It is safe for concurrent use.
type Ring struct {
	current uint32
	aeads   map[uint32]cipher.AEAD
}

// NewRing returns a ring sealing with current and opening values sealed
// under current or any of older.
func NewRing(current Key, older ...Key) (*Ring, error) {
	r := &Ring{current: current.ID, aeads: map[uint32]cipher.AEAD{}}
	for _, k := range append([]Key{current}, older...) {
		if _, dup := r.aeads[k.ID]; dup {
			return nil, fmt.Errorf("%w: key ID %d given twice", ErrInvalidKey, k.ID)
		}
		b, err := aes.NewCipher(k.Secret[:])
		if err != nil {
			return nil, err
		}
		a, err := cipher.NewGCM(b)
		if err != nil {
			return nil, err
		}
		r.aeads[k.ID] = a
	}
	return r, nil
}

// Current is the ID of the key new values are sealed with.
func (r *Ring) Current() uint32 { return r.current }

// Has reports whether the ring opens values sealed under key id.
func (r *Ring) Has(id uint32) bool {
	_, ok := r.aeads[id]
	return ok
}

var magic = [3]byte{0xE5, 'S', 0x01}

const (
	headerLen = 3 + 4 + 12
	// Overhead is what sealing adds to a value.
	Overhead = headerLen + 16
)

// Seal appends the sealed form of plaintext, bound to aad, to dst.
func (r *Ring) Seal(dst, plaintext, aad []byte) []byte {
	a := r.aeads[r.current]
	dst = append(dst, magic[:]...)
	dst = binary.BigEndian.AppendUint32(dst, r.current)
	n := len(dst)
	dst = append(dst, make([]byte, 12)...)
	if _, err := rand.Read(dst[n:]); err != nil {
		panic("seal: no randomness: " + err.Error()) // crypto/rand does not fail on supported platforms
	}
	return a.Seal(dst, dst[n:n+12], plaintext, aad)
}

// Open appends the plaintext of sealed, which must have been sealed with
// aad, to dst. A nil ring opens nothing: ErrUnknownKey.
func (r *Ring) Open(dst, sealed, aad []byte) ([]byte, error) {
	id, ok := KeyID(sealed)
	if !ok || len(sealed) < Overhead {
		return nil, &OpenError{Err: ErrTampered}
	}
	var a cipher.AEAD
	if r != nil {
		a = r.aeads[id]
	}
	if a == nil {
		return nil, &OpenError{KeyID: id, Err: ErrUnknownKey}
	}
	out, err := a.Open(dst, sealed[7:headerLen], sealed[headerLen:], aad)
	if err != nil {
		return nil, &OpenError{KeyID: id, Err: ErrTampered}
	}
	return out, nil
}

// IsSealed reports whether v has the sealed layout's header.
func IsSealed(v []byte) bool {
	return len(v) >= headerLen && v[0] == magic[0] && v[1] == magic[1] && v[2] == magic[2]
}

// KeyID returns the ID of the key v was sealed under.
func KeyID(v []byte) (uint32, bool) {
	if !IsSealed(v) {
		return 0, false
	}
	return binary.BigEndian.Uint32(v[3:7]), true
}

// ParseKey parses "ID:HEX": a key ID (a decimal uint32) and 32 bytes in
// hex (64 digits). Surrounding space is ignored.
func ParseKey(s string) (Key, error) {
	id, h, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return Key{}, fmt.Errorf("%w: want ID:HEX (a key ID and 64 hex digits)", ErrInvalidKey)
	}
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		return Key{}, fmt.Errorf("%w: key ID %q is not a number", ErrInvalidKey, id)
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 32 {
		return Key{}, fmt.Errorf("%w: want 64 hex digits (32 bytes) after the key ID", ErrInvalidKey)
	}
	k := Key{ID: uint32(n)}
	copy(k.Secret[:], b)
	return k, nil
}

// ReadKeyFile reads a key in ParseKey's format from a file (which should
// be readable by its owner only).
func ReadKeyFile(path string) (Key, error) {
	b, err := os.ReadFile(path) //nolint:gosec // the operator names the key file
	if err != nil {
		return Key{}, err
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return Key{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// KeyFromEnv reads a key in ParseKey's format from the environment
// variable name ($ONCEKV_KEY for the CLI and the examples). ok is false
// when the variable is unset or empty.
func KeyFromEnv(name string) (k Key, ok bool, err error) {
	s := os.Getenv(name)
	if strings.TrimSpace(s) == "" {
		return Key{}, false, nil
	}
	if k, err = ParseKey(s); err != nil {
		return Key{}, false, fmt.Errorf("$%s: %w", name, err)
	}
	return k, true, nil
}

// LoadRing builds a ring from key files (the first is the current key, the
// others older ones still read) or, when files is empty, from the key in
// the environment variable envName (KeyFromEnv). It returns nil, and no
// error, when neither gives a key: the caller runs without encryption. The
// CLI's --key-file and the examples' -key-file use it.
func LoadRing(envName string, files ...string) (*Ring, error) {
	var keys []Key
	for _, f := range files {
		k, err := ReadKeyFile(f)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		k, ok, err := KeyFromEnv(envName)
		if err != nil || !ok {
			return nil, err
		}
		keys = append(keys, k)
	}
	return NewRing(keys[0], keys[1:]...)
}

// NewKey returns a random key with the given ID, and its ParseKey form.
func NewKey(id uint32) (Key, string) {
	k := Key{ID: id}
	_, _ = rand.Read(k.Secret[:])
	return k, fmt.Sprintf("%d:%s", id, hex.EncodeToString(k.Secret[:]))
}
