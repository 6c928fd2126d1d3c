package recstore

import (
	"encoding/binary"

	"github.com/oncekv/oncekv/internal/sealing"
	"github.com/oncekv/oncekv/kv"
)

// Rewrite visits up to limit records of the kind after the cursor after
// (nil: from the start), in storage order, and calls fn with each record's
// scope, key and value; a non-nil value fn returns replaces the record's
// value in place (same position, same expiry: fn must not change the
// expiry). It returns the cursor to resume after (nil when done) and how
// many values it replaced. Rekeys use it.
func (k *Kind[R]) Rewrite(tx kv.Tx, after []byte, limit int, fn func(scope, key string, v []byte) ([]byte, error)) ([]byte, int, error) {
	if k.usesLog(tx) {
		var inner []byte
		if len(after) > 0 && after[0] == cursorLog {
			inner = after[1:]
		}
		s := logOf(tx, k.Spec.Name)
		next, n, err := sealing.Rewrite(k.both(tx), inner, limit, func(pos, v []byte) ([]byte, error) {
			scope, key, payload, ok := unwrap(v)
			if !ok || !intact(v) {
				return nil, nil // damaged: the check reports it
			}
			nv, err := fn(string(scope), string(key), payload)
			if nv == nil || err != nil {
				return nil, err
			}
			if s != nil && len(pos) == 8 {
				// The cached entry is sealed with the old key: read the
				// new one from the log.
				s.dir.forget(s.dir.hashBytes(scope, key), binary.BigEndian.Uint64(pos))
			}
			return wrap(string(scope), string(key), nv), nil
		})
		return withTag(cursorLog, next), n, err
	}
	var inner []byte
	if len(after) > 0 && after[0] == cursorKeyed {
		inner = after[1:]
	}
	next, n, err := sealing.Rewrite(keyspaceBucket(tx, k.Spec), inner, limit, func(jk, v []byte) ([]byte, error) {
		scope, key, ok := splitKey(jk)
		if !ok {
			return nil, nil
		}
		return fn(string(scope), string(key), v)
	})
	return withTag(cursorKeyed, next), n, err
}

func keyspaceBucket(tx kv.Tx, spec Spec) kv.Bucket {
	return Keyed(spec).(*keyed).records.Bucket(tx)
}

func withTag(tag byte, next []byte) []byte {
	if next == nil {
		return nil
	}
	return append([]byte{tag}, next...)
}
