package command

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
)

// One damaged intent, event or processed-message ID once made its whole
// listing fail: in an incident, "oncekv intents" showed an error instead
// of the intents waiting for an operator. Each listing now shows the
// damage as a corrupt row and goes on, as "oncekv keys" does; the check
// still fails.
func TestListingsGoOnPastDamage(t *testing.T) {
	t.Parallel()
	path := fixture(t)
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	var intentID string
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		cut := func(bucket string, match func(k, v []byte) bool) []byte {
			bk := tx.Bucket([]byte(record.ReservedPrefix + bucket))
			require.NotNil(t, bk, bucket)
			var key []byte
			require.NoError(t, bk.ForEach(func(k, v []byte) error {
				if key == nil && match(k, v) {
					key = bytes.Clone(k)
				}
				return nil
			}))
			require.NotNil(t, key, bucket)
			v := bytes.Clone(bk.Get(key))
			require.NoError(t, bk.Put(key, v[:len(v)/2]))
			return key
		}
		intentID = string(cut("intent", func(_, v []byte) bool { return bytes.Contains(v, []byte("order/ord_3")) }))
		cut("outbox.quarantine", func(_, v []byte) bool { return bytes.Contains(v, []byte("ev-poison")) })

		name, k, ok := recstore.Locate(kv.WrapTx(tx), recstore.Spec{Name: "inbox"}, "billing", "msg-1")
		require.True(t, ok)
		bk := tx.Bucket(name)
		v := bytes.Clone(bk.Get(k))
		v[3+1+len("billing")+1] ^= 0x01 // "msg-1" reads "lsg-1": a checksum mismatch
		return bk.Put(k, v)
	}))
	require.NoError(t, b.Close())

	out, stderr, code := run("intents", "--db", path)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, intentID+`\s+-\s+-\s+corrupt\s.*kv: corrupt`, out)
	require.Contains(t, out, "needs_attention", "the intents an operator needs are still listed")
	require.Contains(t, out, "(3 intents)")
	out, _, code = run("intents", "--db", path, "--state", "needs_attention")
	require.Equal(t, 0, code)
	require.Contains(t, out, "corrupt", "a damaged intent's state is unknown: it shows under every filter")
	require.Contains(t, out, "(2 intents)")

	out, stderr, code = run("outbox", "--db", path, "--json")
	require.Equal(t, 0, code, stderr)
	var ob inspect.Outbox
	require.NoError(t, json.Unmarshal([]byte(out), &ob))
	require.Equal(t, 1, ob.Pending)
	require.Equal(t, 0, ob.Quarantined)
	require.Equal(t, 1, ob.Corrupt)
	require.Len(t, ob.CorruptEvents, 1)
	require.Equal(t, "quarantined", ob.CorruptEvents[0].State)
	require.NotZero(t, ob.CorruptEvents[0].Seq)
	require.Contains(t, ob.CorruptEvents[0].Error, "corrupt")
	out, _, code = run("outbox", "--db", path)
	require.Equal(t, 0, code)
	require.Contains(t, out, "CORRUPT SEQ")

	out, stderr, code = run("inbox", "--db", path)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "analytics")
	require.Regexp(t, `billing\s+lsg-1\s+corrupt\s+-\s+.*checksum mismatch`, out)
	require.NotRegexp(t, `lsg-1\s+20`, out, "never shown as a message ID processed")
	require.Contains(t, out, "(2 message IDs)")

	_, _, code = run("check", "--db", path)
	require.Equal(t, 1, code)
	for _, q := range []string{"intents", "outbox", "inbox"} {
		_, stderr, code := run(q, "--db", path, "--json")
		require.Equal(t, 0, code, "%s: %s", q, stderr)
	}

	// The console's pages show the same rows.
	db, err := kv.Open(path, &kv.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	h, err := inspect.Handler(db, inspect.HandlerOptions{})
	require.NoError(t, err)
	for page, want := range map[string]string{
		"intents": "damaged intent " + intentID,
		"outbox":  `<span id="corrupt">1</span> damaged`,
		"inbox":   "<td>lsg-1</td><td colspan=\"2\">damaged: ",
	} {
		req := httptest.NewRequest(http.MethodGet, inspect.ConsolePath+page, nil)
		req.Host, req.RemoteAddr = "127.0.0.1", "127.0.0.1:40000"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, page)
		require.Contains(t, rec.Body.String(), want, page)
	}
}
