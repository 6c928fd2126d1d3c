package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"
)

// writeKey writes a new key file with the given ID.
func writeKey(t *testing.T, dir string, id uint32) string {
	t.Helper()
	_, s := seal.NewKey(id)
	path := filepath.Join(dir, "key"+strings.Repeat("x", int(id)))
	require.NoError(t, os.WriteFile(path, []byte(s+"\n"), 0o600))
	return path
}

// The payments service run with -key-file: orders are created, paid and
// replayed byte for byte as in clear; the file holds none of the amounts
// (stored responses, intents, events, order rows are sealed) while the
// same run in clear shows them. Restarted with a new key and the old one
// after a comma, the service serves every old order and moves its values
// to the new key in the background; then the old key can be retired.
func TestEncryptedService(t *testing.T) {
	t.Parallel()
	const amount = 98765432 // appears in every body, payload and row
	for _, encrypted := range []bool{false, true} {
		dir := t.TempDir()
		prov := start(t, "provider", "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "provider.db"), "-seed", "7")
		db := filepath.Join(dir, "payments.db")
		args := []string{"-addr", "127.0.0.1:0", "-db", db, "-provider", prov.url, "-metrics=false"}
		key1 := writeKey(t, dir, 1)
		if encrypted {
			args = append(args, "-key-file", key1)
		}
		svc := start(t, "payments", args...)
		var ids, bodies []string
		for i, ref := range []string{"ext-a", "ext-b", "ext-c"} {
			created := do(t, "POST", svc.url+"/v1/orders", acme, "create-"+ref, orderBody(ref, amount, "10:00:0"+string(rune('0'+i))))
			require.Equal(t, 201, created.Status, created.Body)
			id := created.json(t)["id"].(string)
			paid := do(t, "POST", svc.url+"/v1/orders/"+id+"/pay", acme, "pay-"+ref, "")
			require.Contains(t, []int{200, 202}, paid.Status, paid.Body)
			again := do(t, "POST", svc.url+"/v1/orders/"+id+"/pay", acme, "pay-"+ref, "")
			require.Equal(t, paid.Body, again.Body, "replayed byte for byte")
			ids, bodies = append(ids, id), append(bodies, created.Body)
		}
		require.Len(t, charges(t, prov.url), 3)
		svc.stop(t)
		raw, err := os.ReadFile(db)
		require.NoError(t, err)
		if !encrypted {
			require.Contains(t, string(raw), "98765432", "control: in clear the file shows the amounts")
			continue
		}
		require.NotContains(t, string(raw), "98765432", "no stored response, intent, event or order row is readable")

		// Rotation: key 2 is current, key 1 still opens, a background
		// rekey moves everything; then key 1 is retired.
		key2 := writeKey(t, dir, 2)
		svc = start(t, "payments", "-addr", "127.0.0.1:0", "-db", db, "-provider", prov.url, "-metrics=false", "-key-file", key2+","+key1)
		for i, ref := range []string{"ext-a", "ext-b", "ext-c"} {
			again := do(t, "POST", svc.url+"/v1/orders", acme, "create-"+ref, orderBody(ref, amount, "10:00:0"+string(rune('0'+i))))
			require.Equal(t, 201, again.Status)
			require.Equal(t, bodies[i], again.Body, "an answer sealed under key 1 replays under the new ring")
		}
		require.Contains(t, svc.waitLine(t, "rekey:"), "moved to key id 2")
		svc.stop(t)
		k2, err := seal.ReadKeyFile(key2)
		require.NoError(t, err)
		ring2, err := seal.NewRing(k2)
		require.NoError(t, err)
		fdb, err := kv.Open(db, &kv.Options{ReadOnly: true, Cipher: ring2})
		require.NoError(t, err)
		problems, err := fdb.Check(t.Context(), inspect.Checkers()...)
		require.NoError(t, err)
		require.Empty(t, problems, "after the background rekey, key 2 alone opens every value")
		require.NoError(t, fdb.Close())

		// Key 1 retired: the service still serves the old orders.
		svc = start(t, "payments", "-addr", "127.0.0.1:0", "-db", db, "-provider", prov.url, "-metrics=false", "-key-file", key2)
		for _, id := range ids {
			got := do(t, "GET", svc.url+"/v1/orders/"+id, acme, "", "")
			require.Equal(t, 200, got.Status, got.Body)
			require.EqualValues(t, amount, got.json(t)["amount_cents"])
		}
		svc.stop(t)
	}
}
