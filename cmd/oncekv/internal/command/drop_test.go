package command

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// check names a damaged record; drop removes it by that name (and only a
// damaged one), after which check is clean.
func TestDropADamagedRecord(t *testing.T) {
	t.Parallel()
	path := fixture(t)
	var intact, entry string
	kvtest.RawUpdate(t, path, func(tx *bolt.Tx) (err error) {
		if intact, err = kvtest.DamageLogEntry(tx, "idempotency", kvtest.Naming("", "pay-1"), func(v []byte) []byte { return v }); err != nil {
			return err
		}
		entry, err = kvtest.DamageLogEntry(tx, "idempotency", kvtest.Naming("acme|POST /v1/orders", "create-1"), func(v []byte) []byte {
			v[len(v)-8] ^= 0x55
			return v
		})
		return err
	})

	out, _, code := run("check", "--db", path)
	require.Equal(t, 1, code)
	require.Contains(t, out, "idempotency log entry "+entry+": damaged (checksum or framing); oncekv drop --kind idempotency "+entry+" removes it")

	out, _, code = run("keys", "--db", path)
	require.Equal(t, 0, code)
	require.Contains(t, out, "(log entry "+entry+": oncekv drop "+entry+")", "the listing names it too")

	_, stderr, code := run("drop", "--db", path, "not-hex")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "16 hex digits")
	_, stderr, code = run("drop", "--db", path, "--kind", "outbox", entry)
	require.Equal(t, 2, code, stderr)
	_, stderr, code = run("drop", "--db", path, "--kind", "inbox", entry)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no record at that log position")

	out, stderr, code = run("drop", "--db", path, entry)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `dropped\s+idempotency log entry `+entry+`\nscope\s+acme\|POST /v1/orders\nkey\s+create-1\nreason\s+checksum mismatch`, out)
	out, _, code = run("check", "--db", path)
	require.Equal(t, 0, code, out)
	_, stderr, code = run("drop", "--db", path, entry)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no record at that log position")

	// An intact record is refused.
	_, stderr, code = run("drop", "--db", path, intact)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `the record is intact and decodes: idempotency record "acme|POST /v1/orders/{id}/pay"/"pay-1"`)
	out, _, code = run("get", "--db", path, "--scope", "acme|POST /v1/orders/{id}/pay", "--key", "pay-1", "--json")
	require.Equal(t, 0, code, "still there")
	var rec inspect.Record
	require.NoError(t, json.Unmarshal([]byte(out), &rec))
	require.Equal(t, "pay-1", rec.Key.Key)
}

// An outbox event damaged on disk is dropped by its sequence, as the
// listing and check name it.
func TestDropADamagedOutboxEvent(t *testing.T) {
	t.Parallel()
	path := fixture(t)
	var seq uint64
	kvtest.RawUpdate(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("\x00oncekv/outbox"))
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if strings.Contains(string(v), "ev-pending") {
				seq = binary.BigEndian.Uint64(k)
				return b.Put(bytes.Clone(k), v[:len(v)-3])
			}
		}
		t.Fatal("no pending event ev-pending")
		return nil
	})
	s := strconv.FormatUint(seq, 10)
	out, _, code := run("check", "--db", path)
	require.Equal(t, 1, code)
	require.Contains(t, out, "event seq "+s)

	_, stderr, code := run("drop", "--db", path, "--kind", "outbox", "x1")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "sequence")
	out, stderr, code = run("drop", "--db", path, "--kind", "outbox", s)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `dropped\s+outbox event seq `+s+`\nid\s+-\nreason\s+kv: corrupt outbox record`, out)
	out, _, code = run("check", "--db", path)
	require.Equal(t, 0, code, out)
}
