package kvtest

import (
	"bytes"
	"encoding/hex"
	"iter"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
)

// Damage returns a damaged copy of the stored value v, for fuzz targets
// that change one value and then check every read path: by mode (taken
// modulo 3) v replaced with data, data XORed into v from offset off
// (wrapping), or v cut to off bytes (modulo its length). The result may
// equal v (XOR with zeros, a cut at its length): compare before expecting
// damage to be seen.
func Damage(v []byte, mode uint8, off uint16, data []byte) []byte {
	out := append([]byte(nil), v...)
	switch mode % 3 {
	case 0:
		return append([]byte(nil), data...)
	case 1:
		for j, x := range data {
			if len(out) > 0 {
				out[(int(off)+j)%len(out)] ^= x
			}
		}
	case 2:
		if len(out) > 0 {
			out = out[:int(off)%len(out)]
		}
	}
	return out
}

// Split runs a listing to its end and returns what it yielded apart: the
// values, and the errors (a listing yields one per damaged entry and goes
// on), each in order.
func Split[V any](seq iter.Seq2[V, error]) (vals []V, errs []error) {
	for v, err := range seq {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		vals = append(vals, v)
	}
	return vals, errs
}

// Input reads a fuzz input a byte at a time, for targets that decode
// operations (and a fake's answers) from it. Past its end every byte is 0.
type Input struct{ Data []byte }

// Next returns the next byte, or 0 when none is left.
func (in *Input) Next() byte {
	if len(in.Data) == 0 {
		return 0
	}
	b := in.Data[0]
	in.Data = in.Data[1:]
	return b
}

// More reports whether bytes are left.
func (in *Input) More() bool { return len(in.Data) > 0 }

// DamageLogEntry rewrites, in tx (raw bbolt, as damage on disk would
// come), every log entry of kind ("idempotency" records are the
// ledger's, "inbox" marks the inbox's: their log and its tail) whose
// stored bytes match, through garble, and returns the last one's position
// as the check names it (16 hex digits), or "" when none matches. A
// garble that returns its argument leaves the entry as it was.
func DamageLogEntry(tx *bolt.Tx, kind string, match func(v []byte) bool, garble func(v []byte) []byte) (string, error) {
	store := map[string]string{"idempotency": "ledger"}[kind]
	if store == "" {
		store = kind
	}
	var pos string
	for _, suffix := range []string{".tail", ".log"} {
		b := tx.Bucket(keyspace.New(store + suffix).Bytes())
		if b == nil {
			continue
		}
		var found [][2][]byte
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if match(v) {
				found = append(found, [2][]byte{bytes.Clone(k), garble(bytes.Clone(v))})
			}
		}
		for _, kv := range found {
			if err := b.Put(kv[0], kv[1]); err != nil {
				return "", err
			}
			pos = hex.EncodeToString(kv[0])
		}
	}
	return pos, nil
}

// Naming returns a match for DamageLogEntry: the intact entries whose
// record is stored under key, in scope ("": in any scope), as the entry's
// framing names them (read with the record decoder that frames them). A
// search of the stored bytes for key would also match an entry whose other
// bytes (a timestamp, an incarnation ID) hold it by chance, and damage
// that entry too.
func Naming(scope, key string) func(v []byte) bool {
	return func(v []byte) bool {
		var d record.Decoder
		if _, err := d.Reset(record.KindLogEntry, v); err != nil {
			return false
		}
		sc, k := d.Bytes(), d.Bytes()
		return d.Err() == nil && (scope == "" || string(sc) == scope) && string(k) == key
	}
}

// RawUpdate runs fn in one raw bbolt update of the database file at path,
// which no one may hold open: the way damage on disk, or another program,
// reaches a file, past everything kv checks.
func RawUpdate(t testing.TB, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update(fn); err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}
