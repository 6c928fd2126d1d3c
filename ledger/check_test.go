package ledger_test

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// The consistency check finds, in the records' log, an entry at a place
// that does not match its expiry (which the directory does not find
// either), a key with two entries, and an entry whose bytes were damaged;
// a damaged record met on the request path is a clear error.
func TestCheckFindsBrokenLogAndCorruptRecords(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c"} {
		_, err := l.Do(ctx, req(k, "x"), order(k, nil))
		require.NoError(t, err)
	}
	// Damage is found in the file by a later open: records this process
	// committed are answered from memory (the cache of recent entries).
	require.NoError(t, db.Close())
	db, err = kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	l, err = ledger.New(db, nil)
	require.NoError(t, err)
	problems, err := db.Check(ctx, ledger.RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)

	logName := []byte(record.ReservedPrefix + "ledger.log")
	require.NoError(t, db.Bolt().Update(func(tx *bolt.Tx) error {
		require.NoError(t, recstore.FlushTail(kv.WrapTx(tx), recstore.Spec{Name: "ledger"}))
		log := tx.Bucket(logName)
		var entries [][2][]byte
		c := log.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			entries = append(entries, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
		}
		require.Len(t, entries, 3)
		const scope = "acme|POST /v1/orders"
		find := func(key string) [2][]byte {
			for _, e := range entries {
				// The entry's identity: a 3-byte header, then scope and key,
				// each length-prefixed. (A search for the key's bytes anywhere
				// could match inside another entry's random owner ID.)
				id := append([]byte{byte(len(scope))}, scope...)
				id = append(append(id, byte(len(key))), key...)
				if bytes.HasPrefix(e[1][3:], id) {
					return e
				}
			}
			t.Fatalf("no log entry for %q", key)
			return [2][]byte{}
		}
		a, b, cc := find("a"), find("b"), find("c")
		// "a" moves one hour later in the log: its expiry says otherwise.
		moved := binary.BigEndian.AppendUint64(nil, binary.BigEndian.Uint64(a[0])+3600<<30)
		require.NoError(t, log.Delete(a[0]))
		require.NoError(t, log.Put(moved, a[1]))
		// "b" gets a second entry.
		require.NoError(t, log.Put(binary.BigEndian.AppendUint64(nil, binary.BigEndian.Uint64(b[0])+100), b[1]))
		// "c" has a byte flipped in its stored response.
		bad := bytes.Clone(cc[1])
		bad[len(bad)-10] ^= 0xff
		return log.Put(cc[0], bad)
	}))
	problems, err = db.Check(ctx, ledger.RecordKind)
	require.NoError(t, err)
	var msgs []string
	for _, p := range problems {
		require.Equal(t, "idempotency", p.Check)
		msgs = append(msgs, p.Message)
	}
	all := strings.Join(msgs, "\n")
	require.Contains(t, all, `"acme|POST /v1/orders"/"a": log entry`)
	require.Contains(t, all, `but the record expires at`)
	require.Contains(t, all, `"acme|POST /v1/orders"/"a": the in-memory directory does not find log entry`)
	require.Contains(t, all, `"acme|POST /v1/orders"/"b": two log entries`)
	require.Contains(t, all, `damaged (checksum or framing)`)
	require.Contains(t, all, `"acme|POST /v1/orders"/"b": the in-memory directory does not find`, "the duplicate is not where the directory points")
	require.Contains(t, all, `this process counts 3 records`, "a record written behind the ledger is not in its tenant's usage")
	require.Len(t, msgs, 6, "%v", msgs)

	// A corrupt record met on the request path is a clear error, not a panic
	// or a silent re-run.
	_, err = l.Do(ctx, req("c", "x"), order("c2", nil))
	require.ErrorIs(t, err, kv.ErrCorrupt)
	_, err = l.Get(ctx, "acme|POST /v1/orders", "c")
	require.ErrorIs(t, err, kv.ErrCorrupt)
	_, err = l.Claim(ctx, req("c", "x"))
	require.ErrorIs(t, err, kv.ErrCorrupt)
}
