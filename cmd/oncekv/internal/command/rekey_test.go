package command

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/seal"
)

// keyFile writes a new key made by `oncekv keygen --id id` and returns its path.
func keyFile(t *testing.T, id string) string {
	t.Helper()
	out, stderr, code := run("keygen", "--id", id)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `^`+id+`:[0-9a-f]{64}\n$`, out)
	path := filepath.Join(t.TempDir(), "key"+id)
	require.NoError(t, os.WriteFile(path, []byte(out), 0o600))
	return path
}

// sealedFixture is the fixture written by a service running with key.
func sealedFixture(t *testing.T, key string) string {
	t.Helper()
	k, err := seal.ReadKeyFile(key)
	require.NoError(t, err)
	ring, err := seal.NewRing(k)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "sealed.db")
	clock := kvtest.NewManualClock(time.Now().Add(-150 * time.Minute))
	db, err := kv.Open(path, &kv.Options{Clock: clock, NoSync: true, Cipher: ring})
	require.NoError(t, err)
	defer db.Close()
	populate(t, db, clock)
	return path
}

// The CLI on an encrypted file: without the key it lists keys, statuses
// and sizes and shows bodies as "encrypted (key id N)"; with --key-file (or
// $ONCEKV_KEY) it shows them; check verifies every sealed value opens with
// the keys given; rekey moves every value to a new key, after which the
// old one no longer opens anything.
func TestEncryptedFileThroughTheCLI(t *testing.T) {
	key1, key2 := keyFile(t, "1"), keyFile(t, "2")
	db := sealedFixture(t, key1)
	raw, err := os.ReadFile(db)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "ord_old", "a stored body is not readable in the file")
	plainRaw, err := os.ReadFile(fixture(t))
	require.NoError(t, err)
	require.Contains(t, string(plainRaw), "ord_old", "control: the same fixture without a key shows it")

	out, stderr, code := run("keys", "--db", db)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "(sealed, key id 1)")
	require.Contains(t, out, "create-2")
	out, _, code = run("keys", "--db", db, "--json")
	require.Equal(t, 0, code)
	var keys []inspect.Key
	require.NoError(t, json.Unmarshal([]byte(out), &keys))
	sealed := 0
	for _, k := range keys {
		if k.Encrypted == "key id 1" {
			sealed++
		}
	}
	require.Equal(t, 3, sealed, "every live completed record (the claim has no response yet; old-1 has expired)")

	out, stderr, code = run("get", "--db", db, "--scope", "acme|POST /v1/orders", "--key", "create-2", "--body")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "encrypted (key id 1)")
	require.NotContains(t, out, "ord_2")
	require.Regexp(t, `response status +200`, out, "statuses stay clear")
	require.Regexp(t, `headers, body +encrypted \(key id 1\): pass --key-file`, out)

	out, stderr, code = run("get", "--db", db, "--scope", "acme|POST /v1/orders", "--key", "create-2", "--body", "--key-file", key1)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `{"id":"ord_2"}`)
	k1, err := os.ReadFile(key1)
	require.NoError(t, err)
	t.Setenv(keyEnv, strings.TrimSpace(string(k1)))
	out, stderr, code = run("get", "--db", db, "--scope", "acme|POST /v1/orders", "--key", "create-2", "--body")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `{"id":"ord_2"}`, "$ONCEKV_KEY works like --key-file")
	t.Setenv(keyEnv, "")

	out, stderr, code = run("intents", "--db", db)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "encrypted (key id 1)", "provider error text of the parked intent")

	_, _, code = run("check", "--db", db)
	require.Equal(t, 0, code, "without a key nothing can be verified, and nothing is called damaged")
	_, _, code = run("check", "--db", db, "--key-file", key1)
	require.Equal(t, 0, code)
	out, _, code = run("check", "--db", db, "--key-file", key2)
	require.Equal(t, 1, code, "key 2 opens nothing here")
	require.Contains(t, out, "sealed under a key not supplied (key 1)")

	_, stderr, code = run("rekey", "--db", db, "--key-file", key2, "--old-key-file", key1, "--batch", "-1")
	require.Equal(t, 2, code, "a negative batch was taken as the default")
	require.Contains(t, stderr, "--batch must be positive (or 0 for the default), not -1")
	_, stderr, code = run("rekey", "--db", db, "--key-file", key2)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "supply the key with ID 1 as --old-key-file")
	out, stderr, code = run("rekey", "--db", db, "--key-file", key2, "--old-key-file", key1, "--batch", "2", "--json")
	require.Equal(t, 0, code, stderr)
	var res struct {
		Resealed int    `json:"resealed"`
		KeyID    uint32 `json:"key_id"`
		Batches  int    `json:"batches"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, uint32(2), res.KeyID)
	require.Equal(t, 4+3+4, res.Resealed, "4 responses, 3 intents, 4 events (the row's table did not opt in)")
	require.Contains(t, stderr, "rekey: idempotency done")
	out, _, code = run("rekey", "--db", db, "--key-file", key2, "--json")
	require.Equal(t, 0, code, "a second rekey needs no old key: nothing is under it")
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Zero(t, res.Resealed)

	_, _, code = run("check", "--db", db, "--key-file", key2)
	require.Equal(t, 0, code)
	out, _, code = run("check", "--db", db, "--key-file", key1)
	require.Equal(t, 1, code, "key 1 is retired")
	require.Contains(t, out, "(key 2)")
	out, stderr, code = run("get", "--db", db, "--scope", "acme|POST /v1/orders", "--key", "create-2", "--body", "--key-file", key2)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `{"id":"ord_2"}`)
	require.Contains(t, out, "key id 2")

	_, stderr, code = run("keys", "--db", db, "--key-file", filepath.Join(t.TempDir(), "missing"))
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--key-file")
	bad := filepath.Join(t.TempDir(), "bad")
	require.NoError(t, os.WriteFile(bad, []byte("1:abcd"), 0o600))
	_, stderr, code = run("keys", "--db", db, "--key-file", bad)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "64 hex digits")
}
