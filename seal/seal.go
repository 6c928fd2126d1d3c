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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	keys    map[uint32]*ringKey
}

// ringKey is one key of a ring, ready for both layouts.
type ringKey struct {
	block cipher.Block // AES-256 under the key: XAES's key derivation
	k1    [16]byte     // the CMAC subkey K1 of block, for the derivation
	gcm   cipher.AEAD  // AES-256-GCM under the key itself: layout 1

	// sealing is the derived key values are sealed under now: deriving
	// one per value would cost a microsecond and a kilobyte each, so one
	// nonce prefix serves epochValues values, then another is drawn.
	sealing atomic.Pointer[epoch]
	// opened caches the keys derived to open values, by nonce prefix (the
	// values of one epoch share it), up to maxOpened of them.
	opened  sync.Map // [12]byte → cipher.AEAD
	nOpened atomic.Int32
}

// epoch is a derived key and its nonce prefix, for up to epochValues
// values.
type epoch struct {
	prefix [12]byte
	aead   cipher.AEAD
	used   atomic.Int64
}

const (
	// epochValues bounds the values sealed under one derived key: with
	// random 96-bit nonces under it, the chance that two of 2^24 values
	// share a nonce is under 2^-49 (NIST SP 800-38D allows 2^32).
	epochValues = 1 << 24
	// maxOpened bounds the derived keys kept to open values; past it the
	// cache starts again (a file written by many runs of a service holds
	// a prefix per run).
	maxOpened = 256
)

// NewRing returns a ring sealing with current and opening values sealed
// under current or any of older.
func NewRing(current Key, older ...Key) (*Ring, error) {
	r := &Ring{current: current.ID, keys: map[uint32]*ringKey{}}
	for _, k := range append([]Key{current}, older...) {
		if _, dup := r.keys[k.ID]; dup {
			return nil, fmt.Errorf("%w: key ID %d given twice", ErrInvalidKey, k.ID)
		}
		b, err := aes.NewCipher(k.Secret[:])
		if err != nil {
			return nil, err
		}
		g, err := cipher.NewGCM(b)
		if err != nil {
			return nil, err
		}
		rk := &ringKey{block: b, gcm: g}
		// K1 = dbl(AES_K(0^128)) (NIST SP 800-38B): the last block of a
		// one-block CMAC message is XORed with it.
		var l [16]byte
		b.Encrypt(l[:], l[:])
		for i := range 15 {
			rk.k1[i] = l[i]<<1 | l[i+1]>>7
		}
		rk.k1[15] = l[15] << 1
		if l[0]&0x80 != 0 {
			rk.k1[15] ^= 0x87
		}
		r.keys[k.ID] = rk
	}
	return r, nil
}

// Current is the ID of the key new values are sealed with.
func (r *Ring) Current() uint32 { return r.current }

// Has reports whether the ring opens values sealed under key id.
func (r *Ring) Has(id uint32) bool {
	_, ok := r.keys[id]
	return ok
}

// The sealed layouts: 0xE5 'S', a layout byte, the key ID (4 bytes, big
// endian), the nonce, the ciphertext and GCM's 16-byte tag.
const (
	// layoutGCM is AES-256-GCM under the key itself with a random 96-bit
	// nonce: the layout before 2026-12-05, still opened, no longer
	// written. Random 96-bit nonces bound one key to 2^32 values (NIST SP
	// 800-38D, 8.3), which a busy service reaches in days.
	layoutGCM = 0x01
	// layoutXAES is XAES-256-GCM (https://c2sp.org/XAES-256-GCM): a
	// 192-bit nonce, whose first 96 bits derive a key from the ring's key
	// (NIST SP 800-108 counter mode over CMAC-AES) and whose last 96,
	// random, are the GCM nonce under it. A ring draws the first half at
	// random once per epochValues values (ringKey.sealing), so no derived
	// key seals more than that many: far under GCM's bound, for as many
	// values as any database holds.
	layoutXAES = 0x02

	magic0, magic1 = 0xE5, 'S'
	idLen          = 4
	tagLen         = 16
	gcmNonceLen    = 12
	xaesNonceLen   = 24
)

// Overhead is what sealing adds to a value: the header (magic, layout, key
// ID), the 24-byte nonce and the 16-byte tag.
const Overhead = 3 + idLen + xaesNonceLen + tagLen

// nonceLen returns the nonce's length in layout, 0 for an unknown layout.
func nonceLen(layout byte) int {
	switch layout {
	case layoutGCM:
		return gcmNonceLen
	case layoutXAES:
		return xaesNonceLen
	}
	return 0
}

// derive returns the AES-256-GCM of the key XAES-256-GCM derives from k for
// the nonce prefix n (12 bytes): K_x = CMAC_K(0x00 0x01 'X' 0x00 || n) ||
// CMAC_K(0x00 0x02 'X' 0x00 || n), each message one block.
func (k *ringKey) derive(n []byte) cipher.AEAD {
	var m, kx [32]byte
	m[1], m[2] = 0x01, 'X'
	copy(m[4:16], n)
	m[17], m[18] = 0x02, 'X'
	copy(m[20:32], n)
	for i := range 16 {
		m[i] ^= k.k1[i]
		m[16+i] ^= k.k1[i]
	}
	k.block.Encrypt(kx[:16], m[:16])
	k.block.Encrypt(kx[16:], m[16:])
	b, err := aes.NewCipher(kx[:])
	if err != nil {
		panic("seal: " + err.Error()) // a 32-byte key is always accepted
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		panic("seal: " + err.Error()) // the standard nonce and tag sizes
	}
	return g
}

// epoch returns the derived key to seal the next value under, drawing a
// new nonce prefix for the first value and after every epochValues.
func (k *ringKey) epoch() *epoch {
	for {
		e := k.sealing.Load()
		if e != nil && e.used.Add(1) <= epochValues {
			return e
		}
		next := &epoch{}
		random(next.prefix[:])
		next.aead = k.derive(next.prefix[:])
		k.sealing.CompareAndSwap(e, next) // a loser takes the winner's
	}
}

// opener returns the derived key for the nonce prefix n, from the cache
// when it holds it.
func (k *ringKey) opener(n []byte) cipher.AEAD {
	p := [12]byte(n)
	if e := k.sealing.Load(); e != nil && e.prefix == p {
		return e.aead // a value this process sealed lately
	}
	if a, ok := k.opened.Load(p); ok {
		return a.(cipher.AEAD)
	}
	a := k.derive(n)
	if k.nOpened.Add(1) > maxOpened {
		k.opened.Clear()
		k.nOpened.Store(1)
	}
	k.opened.Store(p, a)
	return a
}

func random(b []byte) {
	if _, err := rand.Read(b); err != nil {
		panic("seal: no randomness: " + err.Error()) // crypto/rand does not fail on supported platforms
	}
}

// Seal appends the sealed form of plaintext, bound to aad, to dst, in the
// XAES-256-GCM layout under the ring's current key.
func (r *Ring) Seal(dst, plaintext, aad []byte) []byte {
	e := r.keys[r.current].epoch()
	dst = append(dst, magic0, magic1, layoutXAES)
	dst = binary.BigEndian.AppendUint32(dst, r.current)
	n := len(dst)
	dst = slices.Grow(dst, xaesNonceLen+len(plaintext)+tagLen)[:n+xaesNonceLen]
	copy(dst[n:], e.prefix[:])
	random(dst[n+12 : n+xaesNonceLen])
	return e.aead.Seal(dst, dst[n+12:n+xaesNonceLen], plaintext, aad)
}

// Open appends the plaintext of sealed, which must have been sealed with
// aad, to dst. It opens both layouts. A nil ring opens nothing:
// ErrUnknownKey.
func (r *Ring) Open(dst, sealed, aad []byte) ([]byte, error) {
	id, ok := KeyID(sealed)
	if !ok || len(sealed) < 3+idLen+nonceLen(sealed[2])+tagLen {
		return nil, &OpenError{Err: ErrTampered}
	}
	var k *ringKey
	if r != nil {
		k = r.keys[id]
	}
	if k == nil {
		return nil, &OpenError{KeyID: id, Err: ErrUnknownKey}
	}
	nonce := sealed[3+idLen : 3+idLen+nonceLen(sealed[2])]
	body := sealed[3+idLen+len(nonce):]
	var out []byte
	var err error
	if sealed[2] == layoutGCM {
		out, err = k.gcm.Open(dst, nonce, body, aad)
	} else {
		out, err = k.opener(nonce[:12]).Open(dst, nonce[12:], body, aad)
	}
	if err != nil {
		return nil, &OpenError{KeyID: id, Err: ErrTampered}
	}
	return out, nil
}

// IsSealed reports whether v has the header of a sealed layout.
func IsSealed(v []byte) bool {
	return len(v) >= 3+idLen && v[0] == magic0 && v[1] == magic1 && nonceLen(v[2]) > 0 && len(v) >= 3+idLen+nonceLen(v[2])
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
