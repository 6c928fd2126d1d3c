package ledger

import (
	"bytes"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
)

// recordKey is scope NUL key; scopes cannot contain NUL, keys are visible
// ASCII, so the split is unambiguous and a scope prefix is a key prefix.
func recordKey(dst []byte, scope, key string) []byte {
	dst = append(dst, scope...)
	dst = append(dst, 0)
	return append(dst, key...)
}

func splitRecordKey(k []byte) (scope, key string, ok bool) {
	i := bytes.IndexByte(k, 0)
	if i < 0 {
		return "", "", false
	}
	return string(k[:i]), string(k[i+1:]), true
}

// decodeRecord decodes a stored record. With withBody false the response is
// skipped (cheap look-ups for status and expiry); otherwise the body is
// copied out (and decompressed), so the Record outlives the transaction.
func decodeRecord(k, v []byte, withBody bool) (*Record, error) {
	scope, key, ok := splitRecordKey(k)
	if !ok {
		return nil, &kv.CorruptError{Kind: record.KindIdempotency, Reason: "record key has no scope separator"}
	}
	return decodeRecordAs(scope, key, v, withBody)
}
